/**
 * Not a defect: checks that held. The opened events a private store keeps (by event id) are
 * never handed out once the person's key is gone from this process: destroyed here, destroyed
 * by another process (two private stores on one log and one key store, as two services) once its
 * UserErased passed here or the held key aged out, for stream reads, subscriptions started
 * later, and events this process sealed itself (pre-recorded at append).
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openFileCredentialStore } from '../../src/infra/credentials/file';
import type { CredentialStore } from '../../src/infra/credentials/port';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import type { EventStore, NewEvent, RecordedEvent } from '../../src/infra/eventstore/port';
import { derivePrivacyKeys } from '../../src/privacy/crypto';
import { createPrivateEventStore } from '../../src/privacy/event-store';
import { createKeyring, userSubject, type Keyring } from '../../src/privacy/keyring';
import { ERASED } from '../../src/privacy/personal-fields';

const meta = { occurredAt: '2026-11-27T10:00:00.000Z', actor: { type: 'system' as const, id: 'review' }, requestId: 'r', causationId: 'c', correlationId: 'r' };

function synced(userId: string): NewEvent {
  return {
    id: randomUUID(),
    type: 'UserSynced',
    data: { userId, created: true, syncId: 9, email: `${userId}@example.org`, firstName: 'Ada', lastName: 'Lovelace', syncedAt: meta.occurredAt },
    metadata: meta,
  };
}

function issued(userId: string): NewEvent {
  return {
    id: randomUUID(),
    type: 'RefreshIssued',
    data: { familyId: randomUUID(), jti: randomUUID(), userId, issuedAt: meta.occurredAt, expiresAt: meta.occurredAt, ip: '203.0.113.77', userAgent: 'Secret/1.0' },
    metadata: meta,
  };
}

async function readAll(store: EventStore, stream: string): Promise<RecordedEvent[]> {
  const out: RecordedEvent[] = [];
  for await (const e of store.readStream(stream)) out.push(e);
  return out;
}

/** Every event a subscription started now hands out up to "caught up". */
async function history(store: EventStore): Promise<RecordedEvent[]> {
  const out: RecordedEvent[] = [];
  const subscription = store.subscribe();
  for await (const item of subscription) {
    if (item.kind !== 'event') break;
    out.push(item.event);
  }
  await subscription.close();
  return out;
}

const leaks = (events: readonly RecordedEvent[], userId: string): string[] =>
  events.map((e) => JSON.stringify(e.data)).filter((json) => json.includes(`${userId}@example.org`) || json.includes('203.0.113.77') || json.includes('Secret/1.0'));

describe('opened events kept by a private store are not handed out after an erasure', () => {
  let dir: string;
  let raw: EventStore;
  let credentials: CredentialStore;
  let clock: number;
  let keyringA: Keyring;
  let keyringB: Keyring;
  let a: EventStore;
  let b: EventStore;

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'hhc-review-erasure-'));
    raw = await openEmbeddedEventStore(dir, { reclaimIntervalMs: 0 });
    credentials = await openFileCredentialStore(dir);
    clock = Date.parse(meta.occurredAt);
    const kek = derivePrivacyKeys('k'.repeat(40)).keyEncryptionKey;
    keyringA = createKeyring(credentials, kek, () => clock);
    keyringB = createKeyring(credentials, kek, () => clock);
    a = createPrivateEventStore(raw, { keyring: keyringA });
    b = createPrivateEventStore(raw, { keyring: keyringB });
  });

  afterEach(async () => {
    await raw.close();
    await credentials.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** A person whose events `a` sealed (pre-recorded) and opened (kept) several times. */
  const person = async (): Promise<string> => {
    const userId = randomUUID();
    await a.append(`user-${userId}`, [synced(userId)], 'no_stream');
    await a.append(`session-${userId}`, [issued(userId)], 'no_stream');
    for (let i = 0; i < 3; i++) {
      expect(leaks([...(await readAll(a, `user-${userId}`)), ...(await readAll(a, `session-${userId}`))], userId)).toHaveLength(2);
      expect(leaks(await history(a), userId)).toHaveLength(2);
    }
    return userId;
  };

  test('destroyed in this process: stream reads and a later subscription read "[erased]"', async () => {
    const userId = await person();
    await keyringA.destroy([userSubject(userId)], userId);
    const user = await readAll(a, `user-${userId}`);
    expect((user[0]?.data as { email: string }).email).toBe(ERASED);
    expect(leaks([...user, ...(await readAll(a, `session-${userId}`)), ...(await history(a))], userId)).toEqual([]);
  });

  test('destroyed by another process: once its UserErased passed here, nothing opened before is handed out', async () => {
    const userId = await person();
    await keyringB.destroy([userSubject(userId)], userId);
    await b.append(`user-${userId}`, [{ id: randomUUID(), type: 'UserErased', data: { userId, devices: [], erasedAt: meta.occurredAt }, metadata: meta }], 'any');
    // The erasure reaches this process through its subscriptions.
    expect((await history(a)).some((e) => e.type === 'UserErased')).toBe(true);
    expect(leaks([...(await readAll(a, `user-${userId}`)), ...(await readAll(a, `session-${userId}`)), ...(await history(a))], userId)).toEqual([]);
  });

  test('destroyed by another process: once the held key aged out (30 s), nothing opened before is handed out', async () => {
    const userId = await person();
    await keyringB.destroy([userSubject(userId)], userId);
    clock += 30_001;
    expect(leaks([...(await readAll(a, `user-${userId}`)), ...(await readAll(a, `session-${userId}`)), ...(await history(a))], userId)).toEqual([]);
  });
});
