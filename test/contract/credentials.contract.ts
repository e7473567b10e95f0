import { DATA_KEY_TOMBSTONE, type CredentialStore } from '../../src/infra/credentials/port';

/**
 * The credential-store contract, run against every adapter: a hash per (user, version),
 * replaced by a second put of the same key, kept across a reopen, and never confused
 * between users or versions.
 */
export function credentialStoreContract(
  name: string,
  open: () => Promise<{ store: CredentialStore; reopen: () => Promise<CredentialStore>; cleanup: () => Promise<void> }>,
): void {
  describe(`CredentialStore contract: ${name}`, () => {
    let store: CredentialStore;
    let reopen: () => Promise<CredentialStore>;
    let cleanup: () => Promise<void>;

    beforeEach(async () => {
      ({ store, reopen, cleanup } = await open());
    });

    afterEach(async () => {
      await cleanup();
    });

    it('returns null for what was never stored', async () => {
      expect(await store.get('u1', 1)).toBeNull();
    });

    it('keeps one hash per user and version', async () => {
      await store.put('u1', 1, '$argon2id$one');
      await store.put('u1', 2, '$argon2id$two');
      await store.put('u2', 1, '$argon2id$other');
      expect(await store.get('u1', 1)).toBe('$argon2id$one');
      expect(await store.get('u1', 2)).toBe('$argon2id$two');
      expect(await store.get('u2', 1)).toBe('$argon2id$other');
      expect(await store.get('u2', 2)).toBeNull();
    });

    it('replaces the hash on a second put of the same key (an idempotent retry)', async () => {
      await store.put('u1', 1, '$argon2id$first');
      await store.put('u1', 1, '$argon2id$second');
      expect(await store.get('u1', 1)).toBe('$argon2id$second');
    });

    it('keeps what was acknowledged across a reopen', async () => {
      await store.put('u1', 1, '$argon2id$one');
      await store.put('u1', 2, '$argon2id$two');
      await store.close();
      store = await reopen();
      expect(await store.get('u1', 1)).toBe('$argon2id$one');
      expect(await store.get('u1', 2)).toBe('$argon2id$two');
    });

    it('acknowledges concurrent puts, each durable', async () => {
      await Promise.all(Array.from({ length: 20 }, (_, i) => store.put(`user-${i}`, 1, `$argon2id$${i}`)));
      await store.close();
      store = await reopen();
      for (let i = 0; i < 20; i++) expect(await store.get(`user-${i}`, 1)).toBe(`$argon2id$${i}`);
    });

    it('refuses malformed keys and hashes instead of storing them', async () => {
      await expect(store.put('', 1, 'h')).rejects.toThrow();
      await expect(store.put('u1', 0, 'h')).rejects.toThrow();
      await expect(store.put('u1', 1.5, 'h')).rejects.toThrow();
      await expect(store.put('u1', 1, '')).rejects.toThrow();
      const operator = { $gt: '' } as unknown as string;
      await expect(store.put(operator, 1, 'h')).rejects.toThrow();
      await expect(store.get(operator, 1)).rejects.toThrow();
    });

    it('keeps a tombstone in place of an erased subject\'s key: a key stored after it is not kept, across a reopen; a device\'s key is only removed', async () => {
      await store.putDataKey('user:erased', { id: 'k1', wrapped: 'wrapped-one' });
      await store.putDataKey('device:kept-apart', { id: 'k2', wrapped: 'wrapped-two' });
      await store.forget({ userId: 'erased', dataKeySubjects: ['user:erased', 'device:kept-apart'], tombstones: ['user:erased'] });
      expect(await store.getDataKey('user:erased')).toEqual(DATA_KEY_TOMBSTONE);
      expect(await store.putDataKey('user:erased', { id: 'k3', wrapped: 'wrapped-three' })).toEqual(DATA_KEY_TOMBSTONE);
      // A device registered again gets a new key: no tombstone for it.
      expect(await store.getDataKey('device:kept-apart')).toBeNull();
      expect(await store.putDataKey('device:kept-apart', { id: 'k4', wrapped: 'wrapped-four' })).toEqual({ id: 'k4', wrapped: 'wrapped-four' });
      await store.close();
      store = await reopen();
      expect(await store.getDataKey('user:erased')).toEqual(DATA_KEY_TOMBSTONE);
      expect(await store.putDataKey('user:erased', { id: 'k5', wrapped: 'wrapped-five' })).toEqual(DATA_KEY_TOMBSTONE);
      // Nothing else is named by a tombstone.
      expect(await store.getDataKey('user:other')).toBeNull();
    });

    it('answers data keys read together (a crowd of handshakes) each as it would alone: a key, none, a tombstone', async () => {
      await store.putDataKey('device:present', { id: 'k1', wrapped: 'wrapped-one' });
      await store.putDataKey('user:gone', { id: 'k2', wrapped: 'wrapped-two' });
      await store.forget({ userId: 'gone', dataKeySubjects: ['user:gone'], tombstones: ['user:gone'] });
      const subjects = ['device:present', 'device:absent', 'user:gone', 'device:present', ...Array.from({ length: 300 }, (_, i) => `device:crowd-${i}`)];
      const together = await Promise.all(subjects.map((subject) => store.getDataKey(subject)));
      const alone: Array<Awaited<ReturnType<CredentialStore['getDataKey']>>> = [];
      for (const subject of subjects) alone.push(await store.getDataKey(subject));
      expect(together).toEqual(alone);
      expect(together.slice(0, 4)).toEqual([{ id: 'k1', wrapped: 'wrapped-one' }, null, DATA_KEY_TOMBSTONE, { id: 'k1', wrapped: 'wrapped-one' }]);
    });

    it('answers ping while open', async () => {
      await expect(store.ping()).resolves.toBeUndefined();
    });
  });
}
