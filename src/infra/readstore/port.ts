/**
 * The read-model store port. Adapters: memory (embedded mode) and MongoDB.
 *
 * Documents are written whole: a projection computes the new document with its pure
 * `evolve` and the store writes it only on top of an older one (revision guard), so
 * applying an event twice changes nothing.
 */

export type Scalar = string | number | boolean | null;

/** Equality, membership, or a range (inclusive and exclusive bounds). */
export type FieldFilter =
  | Scalar
  | { readonly in: readonly Scalar[] }
  | { readonly gt?: Scalar; readonly gte?: Scalar; readonly lt?: Scalar; readonly lte?: Scalar };

export type Where = Readonly<Record<string, FieldFilter>>;

export interface SortKey {
  readonly field: string;
  readonly order: 'asc' | 'desc';
}

export interface Query {
  readonly where?: Where;
  /** Applied in order; ties are always broken by `id` ascending so pages are stable. */
  readonly sort?: readonly SortKey[];
  readonly skip?: number;
  readonly limit?: number;
}

/** Every read-model document has a string id and the guard of the last change applied to it. */
export interface ReadDoc {
  readonly id: string;
}

/** A stored document with the guard it was written with. */
export interface GuardedDoc<T> {
  readonly doc: T;
  readonly guard: string;
}

/** One guarded change of a batch: a `put` or a `remove`, with the same guard rules. */
export type DocChange<T> =
  | { readonly kind: 'put'; readonly doc: T; readonly guard: string }
  | { readonly kind: 'remove'; readonly id: string; readonly guard: string };

export interface ReadCollection<T extends ReadDoc> {
  get(id: string): Promise<T | null>;
  /** The documents with these ids that exist, each with its guard (one round trip for a batch). */
  getMany(ids: readonly string[]): Promise<Map<string, GuardedDoc<T>>>;
  /**
   * Applies the changes (at most one per id) as `put` and `remove` would, each guarded on
   * its own, in one round trip where the adapter can. A change the guard refuses is skipped.
   */
  writeMany(changes: ReadonlyArray<DocChange<T>>): Promise<void>;
  /** The guard (see `put`) stored with the document, or null when absent. */
  getGuard(id: string): Promise<string | null>;
  find(query?: Query): Promise<T[]>;
  count(where?: Where): Promise<number>;
  /**
   * Writes the whole document when no document with this id exists or when the stored
   * guard is lower than `guard` (string comparison). Returns whether it was written.
   */
  put(doc: T, guard: string): Promise<boolean>;
  /**
   * Deletes the document when its stored guard is lower than `guard`, and leaves a tombstone
   * with `guard` (none of the reads sees it): a `put` with a guard up to it is refused, so a
   * projector that replays older events (one that lost its lease) cannot bring the document
   * back. A tombstone is left for a missing document too. Returns whether a document was deleted.
   */
  remove(id: string, guard: string): Promise<boolean>;
  /**
   * Bulk-inserts documents, each with its guard, as a rebuild fills a fresh collection.
   * Nothing is overwritten: an id that already exists is an error.
   */
  load(entries: ReadonlyArray<{ readonly doc: T; readonly guard: string }>): Promise<void>;
  /** Declares a compound index used by queries (a no-op where the adapter has no indexes). */
  ensureIndex(fields: readonly SortKey[], options?: { readonly unique?: boolean }): Promise<void>;
  /** Removes every document. */
  clear(): Promise<void>;
}

/**
 * What a projector writes its checkpoint under: `epoch`, the fencing token of the projector
 * lease it holds (grows with every acquisition; 0 where there is no lease), and `order`, the
 * position as a string that compares like it (so the checkpoint never goes backwards).
 */
export interface CheckpointGuard {
  readonly epoch: number;
  readonly order: string;
}

/** `written`; `behind`: a checkpoint further on is stored (under this epoch or an older one); `fenced`: a newer epoch wrote it. */
export type CheckpointWrite = 'written' | 'behind' | 'fenced';

export interface ReadStore {
  collection<T extends ReadDoc>(name: string): ReadCollection<T>;
  getCheckpoint(name: string): Promise<string | null>;
  /** Writes the checkpoint as it is (a rebuild filling a fresh store). */
  setCheckpoint(name: string, value: string): Promise<void>;
  /**
   * Writes the checkpoint only when no newer epoch and no later position is stored: a
   * projector that lost its lease (and whose write arrives late) can neither move the
   * checkpoint back nor write over its successor's.
   */
  advanceCheckpoint(name: string, value: string, guard: CheckpointGuard): Promise<CheckpointWrite>;
  /** Answers when the store is reachable; throws otherwise. */
  ping(): Promise<void>;
  close(): Promise<void>;
}
