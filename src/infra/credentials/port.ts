import { createHash } from 'node:crypto';

/**
 * The credential store port: password hashes, which never go into an event (decisions §2).
 * Adapters: a durable file in DATA_DIR (embedded mode) and a MongoDB collection
 * (distributed mode). It is not a read model: nothing rebuilds it from events.
 *
 * A hash is stored under `(userId, passwordVersion)`, the version a `PasswordChanged`
 * event announced; the user's current version (from the user stream) says which hash
 * counts. Versions are written only after their event was appended, so two writers never
 * share one.
 */
export interface CredentialStore {
  /** Stores (or replaces) the hash of one password version; resolves once durable. */
  put(userId: string, passwordVersion: number, hash: string): Promise<void>;
  /** The hash stored for that version, or null. */
  get(userId: string, passwordVersion: number): Promise<string | null>;
  /**
   * The data key of a subject (src/privacy/keyring.ts), wrapped by the key-encryption key,
   * or null. Data keys live here, not in the event log, so that erasing one erases every
   * event sealed under it (crypto-shredding, decisions §11).
   */
  getDataKey(subject: string): Promise<StoredDataKey | null>;
  /**
   * Stores a subject's data key unless it has one (or a tombstone); resolves, once durable, with
   * the one kept: a tombstone (`isTombstone`) for a subject whose key was destroyed for good.
   */
  putDataKey(subject: string, key: StoredDataKey): Promise<StoredDataKey>;
  /**
   * Removes the password hashes of `userId` (when given) and the data keys of `subjects`,
   * leaving no copy in the store's own files (embedded: the file is rewritten). The subjects
   * also listed in `tombstones` (an erased person's) keep a tombstone in place of their key,
   * in the same write: no key is ever stored for them again.
   */
  forget(what: { readonly userId?: string; readonly dataKeySubjects: readonly string[]; readonly tombstones?: readonly string[] }): Promise<void>;
  /** Answers when the store is reachable; throws otherwise. */
  ping(): Promise<void>;
  close(): Promise<void>;
}

export function assertCredentialKey(userId: unknown, passwordVersion: unknown): void {
  if (typeof userId !== 'string' || userId.length === 0) throw new TypeError('userId must be a non-empty string');
  if (typeof passwordVersion !== 'number' || !Number.isSafeInteger(passwordVersion) || passwordVersion < 1) {
    throw new RangeError('passwordVersion must be a positive integer');
  }
}

export function assertHash(hash: unknown): asserts hash is string {
  if (typeof hash !== 'string' || hash.length === 0) throw new TypeError('hash must be a non-empty string');
}

/** A data key as stored: `id` names this key of the subject (a new key gets a new id). */
export interface StoredDataKey {
  readonly id: string;
  /** AES-256-GCM of the key under the key-encryption key, base64url. */
  readonly wrapped: string;
}

/**
 * What a subject erased for good keeps in place of its key: no key, and none to be made. Kept as
 * the record of another name (tombstoneSubject), so the store holds nothing under the subject
 * itself, and a store written by an earlier version reads it as one more key it never asks for.
 */
export const DATA_KEY_TOMBSTONE: StoredDataKey = { id: 'erased', wrapped: '' };

export function isTombstone(stored: StoredDataKey): boolean {
  return stored.id === DATA_KEY_TOMBSTONE.id && stored.wrapped === DATA_KEY_TOMBSTONE.wrapped;
}

/** The name a subject's tombstone is kept under: a hash, naming no subject. */
export function tombstoneSubject(subject: string): string {
  return `erased:${createHash('sha256').update(subject).digest('hex')}`;
}
