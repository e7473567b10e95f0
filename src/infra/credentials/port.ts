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
