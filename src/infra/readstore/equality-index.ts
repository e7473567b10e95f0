import type { Scalar } from './port';
import type { CompiledWhere, Condition, Getter, Stored } from './query';

/**
 * The memory read store's equality and unique indexes: buckets of documents by the value of
 * an index's first field, which narrow a query to the documents an equality or `in` can
 * match, and the owners of each key of a unique index, which refuse a second document with
 * the same key as MongoDB does (error code 11000).
 */

/**
 * Equality lookups on the first field of each declared index. An array is multikey, as in
 * MongoDB: the document sits in the bucket of each of its elements (an empty array in none,
 * since no equality or `in` matches it). Documents whose value there is neither a scalar nor
 * an array of scalars stay in `others`.
 */
export interface EqualityIndex {
  readonly read: Getter;
  /** The stored documents themselves, not their ids: a lookup needs no second map access per document. */
  readonly buckets: Map<Scalar, Set<Stored>>;
  readonly others: Set<Stored>;
}

export interface UniqueIndex {
  readonly name: string;
  readonly reads: readonly Getter[];
  readonly owners: Map<string, string>;
}

/** The documents an equality index narrows a query to (see `narrowByEquality`). */
export interface Candidates {
  /** The condition the index settles for the documents in `inBuckets`. */
  readonly condition: Condition;
  readonly inBuckets: Iterable<Stored>;
  /** Documents the index could not place: they still need every test. */
  readonly others: Iterable<Stored>;
}

/** An equality index on `read`, over the documents already stored. */
export function createEqualityIndex(read: Getter, entries: Iterable<{ readonly doc: Stored }>): EqualityIndex {
  const index: EqualityIndex = { read, buckets: new Map(), others: new Set() };
  for (const { doc } of entries) addToEqualityIndex(index, doc);
  return index;
}

export function addToEqualityIndex(index: EqualityIndex, doc: Stored): void {
  const keys = equalityKeys(index.read(doc));
  if (keys === undefined) {
    index.others.add(doc);
    return;
  }
  for (const key of keys) {
    let bucket = index.buckets.get(key);
    if (bucket === undefined) {
      bucket = new Set();
      index.buckets.set(key, bucket);
    }
    bucket.add(doc);
  }
}

export function removeFromEqualityIndex(index: EqualityIndex, doc: Stored): void {
  const keys = equalityKeys(index.read(doc));
  if (keys === undefined) index.others.delete(doc);
  else {
    for (const key of keys) {
      const bucket = index.buckets.get(key);
      bucket?.delete(doc);
      if (bucket?.size === 0) index.buckets.delete(key);
    }
  }
}

/**
 * The smallest set of documents an equality index narrows the query to (those in the buckets
 * of the condition's values, and the index's `others`, which still need every test), or
 * undefined to scan everything.
 */
export function narrowByEquality(indexes: ReadonlyMap<string, EqualityIndex>, where: CompiledWhere): Candidates | undefined {
  let best: { readonly condition: Condition; readonly buckets: ReadonlyArray<ReadonlySet<Stored>>; readonly others: ReadonlySet<Stored>; readonly size: number } | undefined;
  for (const condition of where) {
    const index = indexes.get(condition.field);
    if (index === undefined) continue;
    const values = condition.lookup;
    if (values === undefined) continue;
    const buckets: Array<ReadonlySet<Stored>> = [];
    let size = index.others.size;
    for (const value of new Set(values)) {
      const bucket = index.buckets.get(value);
      if (bucket === undefined) continue;
      buckets.push(bucket);
      size += bucket.size;
    }
    if (best === undefined || size < best.size) best = { condition, buckets, others: index.others, size };
  }
  if (best === undefined) return undefined;
  const { condition, buckets, others } = best;
  if (buckets.length <= 1) return { condition, inBuckets: buckets[0] ?? [], others };
  // A multikey document can sit in several of the buckets looked up: each once.
  const docs = new Set<Stored>();
  for (const bucket of buckets) for (const doc of bucket) docs.add(doc);
  return { condition, inBuckets: docs, others };
}

/** The buckets a value belongs to: its own for a scalar, each element's for an array of scalars; undefined otherwise. */
export function equalityKeys(value: unknown): readonly Scalar[] | undefined {
  if (!Array.isArray(value)) {
    const key = equalityKey(value);
    return key === undefined ? undefined : [key];
  }
  const keys: Scalar[] = [];
  for (const element of value as readonly unknown[]) {
    const key = equalityKey(element);
    if (key === undefined) return undefined;
    keys.push(key);
  }
  return keys;
}

/** The bucket a value belongs to: absent and null share one; non-scalars have none. */
function equalityKey(value: unknown): Scalar | undefined {
  if (value === undefined || value === null) return null;
  if (typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean') return value;
  return undefined;
}

/** A unique index over the documents already stored; throws when two of them share a key. */
export function createUniqueIndex(name: string, reads: readonly Getter[], entries: Iterable<{ readonly doc: Stored }>): UniqueIndex {
  const index: UniqueIndex = { name, reads, owners: new Map() };
  for (const { doc } of entries) {
    const key = uniqueKey(index, doc);
    const owner = index.owners.get(key);
    if (owner !== undefined) throw duplicateKeyError(index, owner, doc.id);
    index.owners.set(key, doc.id);
  }
  return index;
}

/** The key `doc` takes in each unique index; throws when another document holds one of them. */
export function checkUnique(indexes: Iterable<UniqueIndex>, doc: Stored): Map<UniqueIndex, string> {
  const keys = new Map<UniqueIndex, string>();
  for (const index of indexes) {
    const key = uniqueKey(index, doc);
    const owner = index.owners.get(key);
    if (owner !== undefined && owner !== doc.id) throw duplicateKeyError(index, owner, doc.id);
    keys.set(index, key);
  }
  return keys;
}

/** Frees the key `doc` holds in a unique index (if it still holds it). */
export function releaseUniqueKey(index: UniqueIndex, doc: Stored): void {
  const key = uniqueKey(index, doc);
  if (index.owners.get(key) === doc.id) index.owners.delete(key);
}

function uniqueKey(index: UniqueIndex, doc: Stored): string {
  // Like MongoDB, an absent field counts as null, so two documents without it collide.
  return JSON.stringify(index.reads.map((read) => read(doc) ?? null));
}

function duplicateKeyError(index: UniqueIndex, owner: string, id: string): Error {
  const fields = index.name.split('\u0000').join(', ');
  return Object.assign(new Error(`duplicate key on unique index (${fields}): document ${id} collides with ${owner}`), {
    code: 11000,
  });
}
