import { randomBytes } from 'node:crypto';
import { isTombstone, type CredentialStore, type StoredDataKey } from '../infra/credentials/port';
import { ConflictError } from '../domain/errors';
import { newDataKey, open, seal } from './crypto';

/**
 * One data key per person (subject `user:<userId>`) and per registered device (subject
 * `device:<uuid>`, household data that belongs to its owners), kept in the credential store
 * wrapped by the key-encryption key. A sealed field names the key it was sealed with as
 * `<subject>#<id>`: once a subject's key is destroyed, its boxes open with nothing, and a key
 * made later for the same subject (a device registered again after its household was
 * erased) has another id, so it never opens the older boxes either. A person's key destroyed
 * by their erasure leaves a tombstone instead: no key is ever made for them again, so nothing
 * sealed for them after the erasure destroyed their key (a sync or a login racing it) can
 * outlive it (SubjectErasedError).
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
  /**
   * The subject's key if it has one, never made: null when it has none (destroyed, or never
   * made). For sealing copies of fields sealed before (a snapshot of a fold): a subject whose key
   * is gone was erased, and a key made now would keep the copy readable after the erasure.
   */
  existingKeyFor(subject: string): Promise<DataKey | null>;
  /**
   * What `keyFor` and `keyById` would answer from this process's cache, without a store read
   * or an await: the key when it is held (fresh, neither destroyed nor evicted), else
   * undefined, and the caller asks `keyFor` or `keyById`. Reading and sealing take it on the
   * hot path, so that a sealed event costs its readers no extra turns of the event loop.
   */
  heldKeyFor(subject: string): DataKey | undefined;
  heldKeyById(keyId: string): Buffer | undefined;
  /**
   * Destroys the keys of these subjects and forgets them in this process. With `userId` (an
   * erasure of that person), their own subject keeps a tombstone: `keyFor` refuses it from then on.
   */
  destroy(subjects: readonly string[], userId?: string): Promise<void>;
  /** Forgets what this process holds of a subject (another process destroyed it). */
  evict(subject: string): void;
  /**
   * Calls `listener` with each subject whose key this process forgets (destroyed here, or
   * evicted): what was opened with that key and kept (the private store's opened events) goes
   * at once.
   */
  onForget(listener: (subject: string) => void): void;
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

/**
 * A data key that is kept but does not open with the key-encryption key: its wrapping was
 * damaged (the key-encryption key itself is checked at start, checkKeyEncryptionKey). What it
 * sealed cannot be read now, which is the store's failure, not the request's: `statusCode` 503
 * (the API answers 503, never 500). The message names the subject (an id), never a key.
 */
export class DataKeyUnreadableError extends Error {
  readonly statusCode = 503;
  constructor(readonly subject: string) {
    super(`The data key of ${subject} is kept but does not open with DATA_KEY_ENCRYPTION_KEY (damaged)`);
    this.name = 'DataKeyUnreadableError';
  }
}

/**
 * A copy of personal fields sealed before (src/privacy/personal-fields.ts, COPIED_PERSONAL_FIELDS)
 * was to be sealed for a subject that has no key: it was erased (or never had one), and no key
 * is made for a copy. Whoever writes such a copy treats it as not written.
 */
export class DataKeyMissingError extends Error {
  constructor(readonly subject: string) {
    super(`${subject} has no data key: a copy of its personal fields is not sealed under a new one`);
    this.name = 'DataKeyMissingError';
  }
}

/**
 * A key asked for a subject erased for good (a tombstone in the key store): whatever was to be
 * sealed under it belongs to a person who is gone. A conflict with the erasure (409).
 */
export class SubjectErasedError extends ConflictError {
  constructor(readonly subject: string) {
    super(`${subject} was erased`);
    this.name = 'SubjectErasedError';
  }
}

/** The key store's check value: a constant wrapped by the key-encryption key, kept beside the data keys. */
export const KEY_CHECK_SUBJECT = '$key-check';
const KEY_CHECK_VALUE = Buffer.from('home-hub-cloud data-key-encryption-key check v1', 'utf8');

/** The key-encryption key given is not the one the key store's data keys are wrapped with. */
export class KeyEncryptionKeyMismatchError extends Error {
  constructor() {
    super(
      'DATA_KEY_ENCRYPTION_KEY is not the key this key store was written with: its check value does not open with it. ' +
        'Refusing to start (every sealed field would fail to read). Start with the key the data keys were wrapped with.',
    );
    this.name = 'KeyEncryptionKeyMismatchError';
  }
}

/**
 * At start, before anything reads or seals: a key store without a check value gets one (the
 * constant sealed under this key-encryption key); one with a check value that does not open
 * with this key refuses the start (KeyEncryptionKeyMismatchError), so a wrong or changed key
 * never serves, not even with readiness green and every personal read failing.
 */
export async function checkKeyEncryptionKey(store: CredentialStore, keyEncryptionKey: Buffer): Promise<'matched' | 'stored'> {
  let kept = await store.getDataKey(KEY_CHECK_SUBJECT);
  let outcome: 'matched' | 'stored' = 'matched';
  if (kept === null) {
    kept = await store.putDataKey(KEY_CHECK_SUBJECT, { id: 'check', wrapped: seal(keyEncryptionKey, KEY_CHECK_VALUE, KEY_CHECK_SUBJECT) });
    outcome = 'stored';
  }
  const opened = open(keyEncryptionKey, kept.wrapped, KEY_CHECK_SUBJECT);
  if (opened === null || !opened.equals(KEY_CHECK_VALUE)) throw new KeyEncryptionKeyMismatchError();
  return outcome;
}

/**
 * How long an opened key is kept in memory. A key destroyed by an erasure in another process is
 * dropped sooner: when that erasure's `UserErased` passes this process's subscriptions, which
 * the erasure waits for in every API process before it answers.
 */
const CACHE_MS = 30_000;
const MAX_CACHED = 50_000;
/** How often a box naming a key the store did not have makes this process ask the store again. */
const RECHECK_MS = 1000;

export function createKeyring(store: CredentialStore, keyEncryptionKey: Buffer, now: () => number = Date.now): Keyring {
  // Per subject: its current key, or null when it has none (destroyed or never made), and
  // whether the store keeps a tombstone for it.
  const cache = new Map<string, { readonly key: DataKey | null; readonly erased: boolean; readonly at: number }>();
  const making = new Map<string, Promise<DataKey>>();
  // Per key id: when a store read made for it last found it gone (destroyed).
  const confirmedAbsent = new Map<string, number>();

  const remember = (subject: string, key: DataKey | null, erased = false): void => {
    cache.delete(subject);
    cache.set(subject, { key, erased, at: now() });
    if (cache.size > MAX_CACHED) cache.delete(cache.keys().next().value as string);
  };

  // Per subject evicted or destroyed in this process: how many times. A load that was under way
  // when its subject was evicted looks again rather than keep (and cache) what it read before.
  const evictions = new Map<string, number>();

  /** The subject's cache entry while it counts. */
  const fresh = (subject: string): { readonly key: DataKey | null; readonly erased: boolean } | undefined => {
    const cached = cache.get(subject);
    return cached !== undefined && now() - cached.at < CACHE_MS ? cached : undefined;
  };
  /** The key held for a subject: what `load` answers from the cache when that is a key. */
  const held = (subject: string): DataKey | undefined => {
    const cached = fresh(subject);
    return cached === undefined || cached.erased || cached.key === null ? undefined : cached.key;
  };

  const load = async (subject: string): Promise<DataKey | null> => {
    const cached = fresh(subject);
    if (cached !== undefined) {
      if (cached.erased) throw new SubjectErasedError(subject);
      return cached.key;
    }
    const evicted = evictions.get(subject);
    const stored = await store.getDataKey(subject);
    if (evictions.get(subject) !== evicted) return load(subject);
    return kept(subject, stored);
  };
  /** What the store keeps for a subject, remembered: its key, null, or SubjectErasedError. */
  const kept = (subject: string, stored: StoredDataKey | null): DataKey | null => {
    if (stored !== null && isTombstone(stored)) {
      remember(subject, null, true);
      throw new SubjectErasedError(subject);
    }
    const key = stored === null ? null : unwrap(subject, stored.id, stored.wrapped);
    remember(subject, key);
    return key;
  };
  /** The subject's key for opening a box: null when destroyed (a tombstone too). */
  const loadForOpening = async (subject: string): Promise<DataKey | null> => {
    try {
      return await load(subject);
    } catch (error) {
      if (error instanceof SubjectErasedError) return null;
      throw error;
    }
  };
  const forgetListeners: Array<(subject: string) => void> = [];
  const evict = (subject: string): void => {
    cache.delete(subject);
    evictions.set(subject, (evictions.get(subject) ?? 0) + 1);
    for (const listener of forgetListeners) listener(subject);
  };

  const unwrap = (subject: string, id: string, wrapped: string): DataKey => {
    const key = open(keyEncryptionKey, wrapped, subject);
    if (key === null) throw new DataKeyUnreadableError(subject);
    return { keyId: `${subject}#${id}`, key };
  };

  const make = async (subject: string): Promise<DataKey> => {
    const key = newDataKey();
    const id = randomBytes(6).toString('hex');
    const dataKey = kept(subject, await store.putDataKey(subject, { id, wrapped: seal(keyEncryptionKey, key, subject) }));
    if (dataKey === null) throw new Error(`the key store kept no key for ${subject}`);
    return dataKey;
  };

  return {
    heldKeyFor: held,
    heldKeyById(keyId) {
      const key = held(subjectOfKeyId(keyId));
      return key !== undefined && key.keyId === keyId ? key.key : undefined;
    },
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
    existingKeyFor: loadForOpening,
    async keyById(keyId) {
      const subject = subjectOfKeyId(keyId);
      let key = await loadForOpening(subject);
      if (key === null || key.keyId !== keyId) {
        // A box names a key that was stored before the box was written: what this process
        // cached before may predate it (another process made the key a moment ago, as when two
        // processes race to register one hub). So the store is asked, and only a store read made
        // for this very key id, less than a second ago, answers "destroyed" without asking again.
        const checked = confirmedAbsent.get(keyId);
        if (checked === undefined || now() - checked >= RECHECK_MS) {
          cache.delete(subject);
          key = await loadForOpening(subject);
          if (key === null || key.keyId !== keyId) {
            confirmedAbsent.delete(keyId);
            confirmedAbsent.set(keyId, now());
            if (confirmedAbsent.size > MAX_CACHED) confirmedAbsent.delete(confirmedAbsent.keys().next().value as string);
          }
        }
      }
      return key !== null && key.keyId === keyId ? key.key : null;
    },
    async destroy(subjects, userId) {
      const tombstones = userId !== undefined && subjects.includes(userSubject(userId)) ? [userSubject(userId)] : [];
      await store.forget({ ...(userId !== undefined ? { userId } : {}), dataKeySubjects: subjects, tombstones });
      for (const subject of subjects) {
        evict(subject);
        remember(subject, null, tombstones.includes(subject));
      }
    },
    evict,
    onForget(listener) {
      forgetListeners.push(listener);
    },
  };
}
