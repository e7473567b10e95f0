import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sessionStream, userStream } from '../../src/domain/events';
import { openFileCredentialStore } from '../../src/infra/credentials/file';
import type { CredentialStore } from '../../src/infra/credentials/port';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import type { EventStore, NewEvent } from '../../src/infra/eventstore/port';
import { batchesOf, type Batch } from '../../src/projections/batches';
import { derivePrivacyKeys } from '../../src/privacy/crypto';
import { createPrivateEventStore } from '../../src/privacy/event-store';
import { createKeyring, userSubject, type Keyring } from '../../src/privacy/keyring';
import { ERASED } from '../../src/privacy/personal-fields';

/**
 * What sealing costs the readers of the log, counted (never timed): a process that holds a
 * person's data key seals and opens their events without asking the key store, and without
 * extra turns of the event loop, so that the projector gathers logins committed together into
 * one batch through the private store as it does from the log itself (each batch is read-model
 * writes, a checkpoint and a watermark wake-up: batches lost are CPU per login). A key that is
 * destroyed, evicted or stale is never held, so none of this reads an erased person's data.
 */

const meta = { occurredAt: '2026-11-27T10:00:00.000Z', actor: { type: 'system' as const, id: 'test' }, requestId: 'r', causationId: 'c', correlationId: 'r' };

function issued(userId: string): NewEvent {
  const familyId = randomUUID();
  return {
    id: randomUUID(),
    type: 'RefreshIssued',
    data: { familyId, jti: randomUUID(), userId, issuedAt: meta.occurredAt, expiresAt: meta.occurredAt, ip: '203.0.113.9', userAgent: 'Counting/1.0' },
    metadata: meta,
  };
}

function synced(userId: string): NewEvent {
  return {
    id: randomUUID(),
    type: 'UserSynced',
    data: { userId, created: true, syncId: 7, email: `${userId}@example.org`, firstName: 'Ada', lastName: 'Lovelace', syncedAt: meta.occurredAt },
    metadata: meta,
  };
}

/** Batches the projector would make of what `store` hands out after it caught up, until `count` events came. */
async function liveBatches(store: EventStore, started: () => void, count: number): Promise<Batch[]> {
  const subscription = store.subscribe();
  const batches: Batch[] = [];
  let events = 0;
  let live = false;
  try {
    for await (const batch of batchesOf(subscription)) {
      // History (the users' own events) comes first, up to "caught up".
      if (!live) {
        live = batch.caughtUp;
        if (live) started();
        continue;
      }
      batches.push(batch);
      events += batch.events.length;
      if (events >= count) break;
    }
  } finally {
    await subscription.close();
  }
  return batches;
}

describe('sealed events cost their readers no key-store reads and no lost batches', () => {
  let dir: string;
  let raw: EventStore;
  let credentials: CredentialStore;
  let keyring: Keyring;
  let store: EventStore;
  let clock: number;
  const reads = { dataKeys: 0 };

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'hhc-opening-'));
    raw = await openEmbeddedEventStore(dir);
    const file = await openFileCredentialStore(dir);
    credentials = Object.assign(Object.create(file) as CredentialStore, {
      getDataKey: (subject: string) => {
        reads.dataKeys++;
        return file.getDataKey(subject);
      },
      close: () => file.close(),
    });
    clock = Date.parse(meta.occurredAt);
    keyring = createKeyring(credentials, derivePrivacyKeys('k'.repeat(40)).keyEncryptionKey, () => clock);
    store = createPrivateEventStore(raw, { keyring });
    reads.dataKeys = 0;
  });

  /** The user stream's data as the service reads it. */
  const userData = async (userId: string): Promise<Array<{ email: string; firstName: string }>> => {
    const out: Array<{ email: string; firstName: string }> = [];
    for await (const event of store.readStream(userStream(userId))) out.push(event.data as { email: string; firstName: string });
    return out;
  };

  afterEach(async () => {
    await raw.close();
    await credentials.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('logins committed together reach the projector in no more batches through the private store than from the log', async () => {
    const users = Array.from({ length: 12 }, () => randomUUID());
    for (const userId of users) await store.append(userStream(userId), [synced(userId)], 'no_stream');
    /** The batches a projector reading `reader` makes of one login per user, all finishing in the same turn (one group commit). */
    const burst = async (reader: EventStore): Promise<Batch[]> => {
      let started: () => void = () => undefined;
      const live = new Promise<void>((resolve) => (started = resolve));
      const batches = liveBatches(reader, started, users.length);
      await live;
      await Promise.all(users.map((userId) => store.append(sessionStream(randomUUID()), [issued(userId)], 'no_stream')));
      return batches;
    };
    const fromLog = await burst(raw);
    const fromPrivate = await burst(store);
    expect(fromLog.flatMap((b) => b.events).length).toBe(users.length);
    expect(fromPrivate.flatMap((b) => b.events).length).toBe(users.length);
    expect(fromPrivate.length).toBeLessThanOrEqual(fromLog.length);
    // And opened: the projector reads the session's IP and user agent in the clear.
    expect(fromPrivate.flatMap((b) => b.events).map((e) => (e.data as { ip: string }).ip)).toEqual(users.map(() => '203.0.113.9'));
  });

  test('a person whose key this process holds: sealing and opening their events reads no key from the store', async () => {
    const userId = randomUUID();
    await store.append(userStream(userId), [synced(userId)], 'no_stream');
    // Made once (the store asked whether the person has a key, and whether they were erased).
    const made = reads.dataKeys;
    expect(made).toBeLessThanOrEqual(1);
    for (let login = 0; login < 20; login++) {
      expect((await userData(userId)).map((d) => d.email)).toEqual([`${userId}@example.org`]);
      await store.append(sessionStream(randomUUID()), [issued(userId)], 'no_stream');
    }
    expect(reads.dataKeys).toBe(made);
  });

  /** A person synced here: their key is held from then on. */
  const syncedHere = async (): Promise<{ userId: string; subject: string; keyId: string; key: Buffer }> => {
    const userId = randomUUID();
    const subject = userSubject(userId);
    await store.append(userStream(userId), [synced(userId)], 'no_stream');
    const held = keyring.heldKeyFor(subject);
    if (held === undefined) throw new Error('the key just made is not held');
    expect(keyring.heldKeyById(held.keyId)).toEqual(held.key);
    expect(keyring.heldKeyById(`${subject}#another`)).toBeUndefined();
    return { userId, subject, keyId: held.keyId, key: held.key };
  };

  test('a held key lasts as long as the cache keeps it, then is read from the store again', async () => {
    const { subject, keyId, key } = await syncedHere();
    clock += 30_000;
    expect(keyring.heldKeyFor(subject)).toBeUndefined();
    expect(keyring.heldKeyById(keyId)).toBeUndefined();
    const before = reads.dataKeys;
    expect(await keyring.keyById(keyId)).toEqual(key);
    expect(reads.dataKeys).toBe(before + 1);
    expect(keyring.heldKeyById(keyId)).toEqual(key);
  });

  test.each(['in this process', 'in another process'])('an erasure %s: the key is not held from then on, the data reads "[erased]", nothing is sealed for them again', async (where) => {
    const { userId, subject, keyId } = await syncedHere();
    if (where === 'in this process') {
      await keyring.destroy([subject], userId);
    } else {
      await createKeyring(credentials, derivePrivacyKeys('k'.repeat(40)).keyEncryptionKey, () => clock).destroy([subject], userId);
      // Held here until its UserErased passes this process (src/privacy/event-store.ts, forgetErased).
      expect(keyring.heldKeyById(keyId)).toBeDefined();
      keyring.evict(subject);
    }
    expect(keyring.heldKeyFor(subject)).toBeUndefined();
    expect(keyring.heldKeyById(keyId)).toBeUndefined();
    expect((await userData(userId)).map((d) => [d.email, d.firstName])).toEqual([[ERASED, ERASED]]);
    expect(keyring.heldKeyFor(subject)).toBeUndefined();
    await expect(store.append(sessionStream(randomUUID()), [issued(userId)], 'no_stream')).rejects.toThrow(/erased/);
  });
});
