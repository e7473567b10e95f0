import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { STREAM_PREFIXES, sessionStream, userStream } from '../../src/domain/events';
import { openFileCredentialStore } from '../../src/infra/credentials/file';
import type { CredentialStore } from '../../src/infra/credentials/port';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import type { EventStore, NewEvent, Subscription } from '../../src/infra/eventstore/port';
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
 *
 * And what a login's events cost the readers of the log. A service process reads every commit
 * with several subscriptions (the projector, the access-revocation feed, the tunnel's live feed,
 * presence expiry, the past-devices feed): each used to check and decode every committed record
 * itself, scanning from its segment's last sample (up to 255 records back) at every commit, and
 * each reader of a sealed event decrypted and parsed its box again (the projector and the
 * revocation feed both open a login's RefreshIssued; each login reads the user's stream). A
 * record just committed is now decoded once for all of them, and a box opened once while its
 * key is held (never after the key is gone).
 */

/** Calls counted in every module of this test: checksums (every record read or written) and AES-GCM decryptions. */
const mockCounts = { checksums: 0, deciphers: 0 };

/** `f`, counting its calls under `name` (a function declaration: the hoisted mock factories may call it). */
function mockCounting<A extends unknown[], R>(name: keyof typeof mockCounts, f: (...args: A) => R): (...args: A) => R {
  return (...args) => {
    mockCounts[name]++;
    return f(...args);
  };
}

jest.mock('node:zlib', () => {
  const actual = jest.requireActual<typeof import('node:zlib')>('node:zlib');
  return { ...actual, crc32: mockCounting('checksums', actual.crc32) };
});

jest.mock('node:crypto', () => {
  const actual = jest.requireActual<typeof import('node:crypto')>('node:crypto');
  return { ...actual, createDecipheriv: mockCounting('deciphers', actual.createDecipheriv) };
});

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

/** Reads a subscription in the background; `seen(n)` resolves once n events came after it caught up. */
function follow(subscription: Subscription): { caughtUp: Promise<void>; seen: (n: number) => Promise<Array<Record<string, unknown>>> } {
  const events: Array<Record<string, unknown>> = [];
  let live = false;
  let markCaughtUp: () => void = () => undefined;
  const caughtUp = new Promise<void>((resolve) => (markCaughtUp = resolve));
  const waiters: Array<() => void> = [];
  void (async () => {
    for await (const item of subscription) {
      if (item.kind !== 'event') {
        live = true;
        markCaughtUp();
      } else if (live) events.push(item.event.data as Record<string, unknown>);
      for (const wake of waiters.splice(0)) wake();
    }
  })();
  const seen = async (n: number): Promise<Array<Record<string, unknown>>> => {
    while (events.length < n) await new Promise<void>((resolve) => waiters.push(resolve));
    return events;
  };
  return { caughtUp, seen };
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

  test('five subscriptions: each login is checksummed and decoded once for all of them, and found opened already', async () => {
    const users = Array.from({ length: 300 }, () => randomUUID());
    // History: more records than a segment's sampling step, so a scan from the last sample is long.
    for (const userId of users) await store.append(userStream(userId), [synced(userId)], 'no_stream');
    const subscriptions = [
      store.subscribe(),
      store.subscribe({ streamPrefixes: [STREAM_PREFIXES.user, STREAM_PREFIXES.session] }),
      store.subscribe({ streamPrefixes: [STREAM_PREFIXES.device] }),
      store.subscribe({ streamPrefixes: [STREAM_PREFIXES.device] }),
      store.subscribe({ streamPrefixes: [STREAM_PREFIXES.device] }),
    ];
    const followers = subscriptions.map(follow);
    await Promise.all(followers.map((f) => f.caughtUp));

    mockCounts.checksums = 0;
    mockCounts.deciphers = 0;
    const logins = users.slice(0, 20);
    const streams = logins.map(() => sessionStream(randomUUID()));
    for (const [i, userId] of logins.entries()) {
      await store.append(streams[i] as string, [issued(userId)], 'no_stream');
      await Promise.all([followers[0]?.seen(i + 1), followers[1]?.seen(i + 1)]);
    }
    const projected = (await followers[0]?.seen(logins.length)) ?? [];
    const fed = (await followers[1]?.seen(logins.length)) ?? [];
    // Opened for both readers, and the same.
    expect(projected.map((d) => d.ip)).toEqual(logins.map(() => '203.0.113.9'));
    expect(fed).toEqual(projected);
    // The writer's own checksums (the record, its position, the batch flag, the segment's
    // running CRC) and one to decode it for every reader, per login (before: each subscription
    // checked every record from its segment's last sample on, hundreds per login here).
    expect(mockCounts.checksums / logins.length).toBeLessThanOrEqual(6);
    // No decryption: the private store that sealed a login knows what its box opens to (before:
    // one for each subscription).
    expect(mockCounts.deciphers).toBe(0);
    // Exactly what opening the box read back from the log answers (another process: nothing known), field order too.
    const elsewhere = createPrivateEventStore(raw, { keyring: createKeyring(credentials, derivePrivacyKeys('k'.repeat(40)).keyEncryptionKey, () => clock) });
    for (const [i, stream] of streams.entries()) {
      for await (const event of elsewhere.readStream(stream)) expect(JSON.stringify(event.data)).toBe(JSON.stringify(projected[i]));
    }
    await Promise.all(subscriptions.map((s) => s.close()));
  });

  test('a user stream read at each login is read from the file and opened once; a destroyed key opens none of it again', async () => {
    const userId = randomUUID();
    await store.append(userStream(userId), [synced(userId)], 'no_stream');
    // After a restart: nothing of it in memory.
    await raw.close();
    raw = await openEmbeddedEventStore(dir);
    store = createPrivateEventStore(raw, { keyring });
    const read = async (): Promise<{ email: string; firstName: string }> => (await userData(userId))[0] ?? { email: '', firstName: '' };
    const first = await read();
    expect(first.email).toBe(`${userId}@example.org`);
    mockCounts.deciphers = 0;
    mockCounts.checksums = 0;
    for (let i = 0; i < 4; i++) expect(await read()).toEqual(first);
    // Neither read, checked and decoded again, nor decrypted (before: one of each per read).
    expect(mockCounts.checksums).toBe(0);
    expect(mockCounts.deciphers).toBe(0);

    await keyring.destroy([`user:${userId}`], userId);
    const erased = await read();
    expect(erased.email).toBe(ERASED);
    expect(erased.firstName).toBe(ERASED);
  });
});
