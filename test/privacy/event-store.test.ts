import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openFileCredentialStore } from '../../src/infra/credentials/file';
import type { CredentialStore } from '../../src/infra/credentials/port';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import type { EventStore, NewEvent, RecordedEvent } from '../../src/infra/eventstore/port';
import { derivePrivacyKeys } from '../../src/privacy/crypto';
import { createPrivateEventStore, openEventData } from '../../src/privacy/event-store';
import { createKeyring, deviceSubject, SubjectErasedError, userSubject } from '../../src/privacy/keyring';
import { ERASED } from '../../src/privacy/personal-fields';
import { privateEventStoreEachTest } from '../support/private-event-store';

const USER = '11111111-2222-4333-8444-555555555555';
const DEVICE = '99999999-8888-4777-8666-555555555555';
const meta = { occurredAt: '2026-11-25T10:00:00.000Z', actor: { type: 'user' as const, id: USER }, requestId: 'r', causationId: 'c', correlationId: 'r' };

function event(type: string, data: Record<string, unknown>): NewEvent {
  return { id: crypto.randomUUID(), type, data, metadata: meta };
}

async function readAll(store: EventStore, stream: string): Promise<RecordedEvent[]> {
  const out: RecordedEvent[] = [];
  for await (const e of store.readStream(stream)) out.push(e);
  return out;
}

function filesContain(dir: string, needle: string): string[] {
  return readdirSync(dir).filter((f) => readFileSync(join(dir, f)).includes(Buffer.from(needle, 'utf8')));
}

describe('personal fields sealed in the log (crypto-shredding)', () => {
  const t = privateEventStoreEachTest('hhc-privacy-', (dir) => openEmbeddedEventStore(dir));

  const synced = {
    userId: USER,
    created: true,
    syncId: 42,
    email: 'grace.hopper@example.org',
    firstName: 'Grace',
    lastName: 'Hopper',
    isEmailVerified: false,
    profile: { avatar: null, timezone: 'UTC', language: 'en' },
    crm: { userId: 1, companyName: 'Cobol Ltd', userType: 1, mrr: '10.00', contractLanguage: 'en', createdBy: 1, status: 1 },
    syncedAt: meta.occurredAt,
  };

  test('no personal value reaches the log; the service reads every one back', async () => {
    await t.store.append(`user-${USER}`, [event('UserSynced', synced)], 'any');
    await t.store.append(`device-${DEVICE}`, [event('DeviceRegistered', { id: 'i', uuid: DEVICE, deviceId: 'HUB', name: 'Grace attic hub', ipAddress: '10.9.8.7', port: '8123', metadata: { room: 'Grace attic' }, gen: 0, registeredAt: meta.occurredAt })], 'any');
    await t.store.append(`device-${DEVICE}`, [event('DeviceUpdated', { uuid: DEVICE, changes: { port: '9000', ipAddress: '10.9.8.6' }, source: 'heartbeat', updatedAt: meta.occurredAt })], 'any');
    for (const secret of ['grace.hopper@example.org', 'Hopper', 'Cobol Ltd', 'Grace attic', '10.9.8.7', '10.9.8.6']) {
      expect(filesContain(t.dir, secret)).toEqual([]);
    }
    const [user] = await readAll(t.store, `user-${USER}`);
    expect(user?.data).toEqual(synced);
    const rawUser = (await readAll(t.raw, `user-${USER}`))[0]?.data as Record<string, unknown>;
    expect(rawUser.$v).toBe(2);
    expect(rawUser.email).toBeUndefined();
    const device = await readAll(t.store, `device-${DEVICE}`);
    expect(device[1]?.data).toEqual({ uuid: DEVICE, changes: { port: '9000', ipAddress: '10.9.8.6' }, source: 'heartbeat', updatedAt: meta.occurredAt });
  });

  test('a destroyed key reads as "[erased]" in every sealed field, ids kept, never an error; other people unaffected', async () => {
    const other = '22222222-2222-4333-8444-555555555555';
    await t.store.append(`user-${USER}`, [event('UserSynced', synced)], 'any');
    await t.store.append(`user-${other}`, [event('UserSynced', { ...synced, userId: other, email: 'other@example.org' })], 'any');
    await t.store.append(`device-${DEVICE}`, [event('DeviceUpdated', { uuid: DEVICE, changes: { name: 'Attic' }, source: 'user', updatedAt: meta.occurredAt })], 'any');
    await t.keyring.destroy([userSubject(USER), deviceSubject(DEVICE)], USER);
    const [erased] = await readAll(t.store, `user-${USER}`);
    expect(erased?.data).toEqual({ ...synced, email: ERASED, firstName: ERASED, lastName: ERASED, profile: ERASED, crm: ERASED });
    expect((await readAll(t.store, `user-${other}`))[0]?.data).toMatchObject({ email: 'other@example.org' });
    expect((await readAll(t.store, `device-${DEVICE}`))[0]?.data).toMatchObject({ changes: { name: ERASED } });
    // A new key for the same subject (a device registered again) never opens the older boxes.
    await t.store.append(`device-${DEVICE}`, [event('DeviceUpdated', { uuid: DEVICE, changes: { name: 'New household' }, source: 'user', updatedAt: meta.occurredAt })], 'any');
    const after = await readAll(t.store, `device-${DEVICE}`);
    expect(after.map((e) => (e.data as { changes: { name: string } }).changes.name)).toEqual([ERASED, 'New household']);
    // The credentials file holds no wrapped key of the erased subjects any more.
    expect(readFileSync(join(t.dir, 'credentials.jsonl'), 'utf8')).not.toContain(`user:${USER}`);
    // No key is made for the erased person again (their subject keeps a tombstone): what would
    // be sealed for them is refused. A device registered again did get a new key, above.
    await expect(t.keyring.keyFor(userSubject(USER))).rejects.toBeInstanceOf(SubjectErasedError);
    await expect(t.store.append(`user-${USER}`, [event('UserSynced', synced)], 'any')).rejects.toBeInstanceOf(SubjectErasedError);
    const fresh = createKeyring(t.credentials, derivePrivacyKeys('k'.repeat(40)).keyEncryptionKey);
    await expect(fresh.keyFor(userSubject(USER))).rejects.toBeInstanceOf(SubjectErasedError);
  });

  test('a second process destroying the key is seen here once the cached key is evicted', async () => {
    await t.store.append(`user-${USER}`, [event('UserSynced', synced)], 'any');
    const otherKeyring = createKeyring(t.credentials, derivePrivacyKeys('k'.repeat(40)).keyEncryptionKey);
    await otherKeyring.destroy([userSubject(USER)]);
    t.keyring.evict(userSubject(USER));
    expect(((await readAll(t.store, `user-${USER}`))[0]?.data as { email: string }).email).toBe(ERASED);
  });

  test('plaintext events of version 1 still read as they were', async () => {
    await t.raw.append(`user-${USER}`, [event('UserSynced', synced)], 'any');
    expect((await readAll(t.store, `user-${USER}`))[0]?.data).toEqual(synced);
    expect(await openEventData(t.keyring, 'RefreshIssued', { familyId: 'f', ip: '1.2.3.4', userAgent: 'UA' })).toEqual({ familyId: 'f', ip: '1.2.3.4', userAgent: 'UA' });
  });

  test('data keys survive a reopen of the credential store, wrapped, never in the clear', async () => {
    await t.store.append(`user-${USER}`, [event('UserSynced', synced)], 'any');
    await t.credentials.close();
    t.credentials = await openFileCredentialStore(t.dir);
    t.keyring = createKeyring(t.credentials, derivePrivacyKeys('k'.repeat(40)).keyEncryptionKey);
    t.store = createPrivateEventStore(t.raw, { keyring: t.keyring });
    expect((await readAll(t.store, `user-${USER}`))[0]?.data).toEqual(synced);
    const wrongKek = createKeyring(t.credentials, derivePrivacyKeys('z'.repeat(40)).keyEncryptionKey);
    await expect(wrongKek.keyFor(userSubject(USER))).rejects.toThrow(/DATA_KEY_ENCRYPTION_KEY/);
  });
});

describe('keys made by another process', () => {
  test('a key id the store no longer has is asked for at most once a second', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hhc-privacy-'));
    const credentials = await openFileCredentialStore(dir);
    let reads = 0;
    const counted: CredentialStore = Object.assign(Object.create(credentials) as CredentialStore, {
      getDataKey: (subject: string) => {
        reads++;
        return credentials.getDataKey(subject);
      },
    });
    let clock = 0;
    const keyring = createKeyring(counted, derivePrivacyKeys('k'.repeat(40)).keyEncryptionKey, () => clock);
    try {
      const gone = `device:${DEVICE}#00`;
      expect(await keyring.keyById(gone)).toBeNull();
      const first = reads;
      for (let i = 0; i < 50; i++) expect(await keyring.keyById(gone)).toBeNull();
      expect(reads).toBe(first);
      clock += 1000;
      expect(await keyring.keyById(gone)).toBeNull();
      expect(reads).toBe(first + 1);
    } finally {
      await credentials.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test('a box sealed by another process with a key made after this one looked opens here', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hhc-privacy-'));
    const raw = await openEmbeddedEventStore(dir);
    const credentials = await openFileCredentialStore(dir);
    const clock = 0;
    const kek = derivePrivacyKeys('k'.repeat(40)).keyEncryptionKey;
    const hereKeyring = createKeyring(credentials, kek, () => clock);
    const here = createPrivateEventStore(raw, { keyring: hereKeyring });
    const there = createPrivateEventStore(raw, { keyring: createKeyring(credentials, kek, () => clock) });
    try {
      // Here the device had no key (erased); there, a new registration makes one and seals with it.
      expect(await openEventData(hereKeyring, 'DeviceUpdated', { uuid: DEVICE, changes: {}, $pii: { k: `device:${DEVICE}#00`, f: ['changes.name'], c: 'AAAA' } })).toMatchObject({ changes: { name: ERASED } });
      await there.append(`device-${DEVICE}`, [event('DeviceUpdated', { uuid: DEVICE, changes: { name: 'Fresh' }, source: 'user', updatedAt: meta.occurredAt })], 'any');
      // At once, not a second later: what `here` cached before the key was made does not count.
      expect(((await readAll(here, `device-${DEVICE}`))[0]?.data as { changes: { name: string } }).changes.name).toBe('Fresh');
    } finally {
      await raw.close();
      await credentials.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
