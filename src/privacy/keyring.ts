import { randomBytes } from 'node:crypto';
import type { CredentialStore } from '../infra/credentials/port';
import { newDataKey, open, seal } from './crypto';

/**
 * One data key per person (subject `user:<userId>`) and per registered device (subject
 * `device:<uuid>`, household data that belongs to its owners), kept in the credential store
 * wrapped by the key-encryption key. A sealed field names the key it was sealed with as
 * `<subject>#<id>`: once a subject's key is destroyed, its boxes open with nothing, and a key
 * made later for the same subject (a device registered again after its household was
 * erased) has another id, so it never opens the older boxes either.
 */

export interface DataKey {
  /** `<subject>#<id>`, written beside every box sealed with it. */
  readonly keyId: string;
  readonly key: Buffer;
}

export interface Keyring {
  /** The subject's key, made and stored first if it has none (for sealing). */
  keyFor(subject: string): Promise<DataKey>;
  /** The key a box names, or null when it was destroyed (for opening). */
  keyById(keyId: string): Promise<Buffer | null>;
  /** Destroys the keys of these subjects and forgets them in this process. */
  destroy(subjects: readonly string[], userId?: string): Promise<void>;
  /** Forgets what this process holds of a subject (another process destroyed it). */
  evict(subject: string): void;
}

export function userSubject(userId: string): string {
  return `user:${userId}`;
}

export function deviceSubject(uuid: string): string {
  return `device:${uuid}`;
}

export function subjectOfKeyId(keyId: string): string {
  const hash = keyId.lastIndexOf('#');
  return hash < 0 ? keyId : keyId.slice(0, hash);
}

/** How long an opened key is kept in memory; a key destroyed by another process is gone here after that at the latest. */
const CACHE_MS = 30_000;
const MAX_CACHED = 50_000;
/** How often a box naming a key this process does not have makes it ask the store again. */
const RECHECK_MS = 1000;

export function createKeyring(store: CredentialStore, keyEncryptionKey: Buffer, now: () => number = Date.now): Keyring {
  // Per subject: its current key, or null when it has none (destroyed or never made).
  const cache = new Map<string, { readonly key: DataKey | null; readonly at: number }>();
  const making = new Map<string, Promise<DataKey>>();

  const remember = (subject: string, key: DataKey | null): void => {
    cache.delete(subject);
    cache.set(subject, { key, at: now() });
    if (cache.size > MAX_CACHED) cache.delete(cache.keys().next().value as string);
  };

  const load = async (subject: string): Promise<DataKey | null> => {
    const cached = cache.get(subject);
    if (cached !== undefined && now() - cached.at < CACHE_MS) return cached.key;
    const stored = await store.getDataKey(subject);
    const key = stored === null ? null : unwrap(subject, stored.id, stored.wrapped);
    remember(subject, key);
    return key;
  };

  const unwrap = (subject: string, id: string, wrapped: string): DataKey => {
    const key = open(keyEncryptionKey, wrapped, subject);
    if (key === null) throw new Error(`The data key of ${subject} does not open with DATA_KEY_ENCRYPTION_KEY (was the key changed?)`);
    return { keyId: `${subject}#${id}`, key };
  };

  const make = async (subject: string): Promise<DataKey> => {
    const key = newDataKey();
    const id = randomBytes(6).toString('hex');
    const kept = await store.putDataKey(subject, { id, wrapped: seal(keyEncryptionKey, key, subject) });
    const dataKey = unwrap(subject, kept.id, kept.wrapped);
    remember(subject, dataKey);
    return dataKey;
  };

  return {
    async keyFor(subject) {
      const known = await load(subject);
      if (known !== null) return known;
      let pending = making.get(subject);
      if (pending === undefined) {
        pending = make(subject).finally(() => making.delete(subject));
        making.set(subject, pending);
      }
      return pending;
    },
    async keyById(keyId) {
      const subject = subjectOfKeyId(keyId);
      let key = await load(subject);
      if (key === null || key.keyId !== keyId) {
        // Another process may have made this key since this one looked (a device registered
        // again after an erasure): look once more, at most once a second per subject.
        const cached = cache.get(subject);
        if (cached === undefined || now() - cached.at >= RECHECK_MS) {
          cache.delete(subject);
          key = await load(subject);
        }
      }
      return key !== null && key.keyId === keyId ? key.key : null;
    },
    async destroy(subjects, userId) {
      await store.forget({ ...(userId !== undefined ? { userId } : {}), dataKeySubjects: subjects });
      for (const subject of subjects) remember(subject, null);
    },
    evict(subject) {
      cache.delete(subject);
    },
  };
}
