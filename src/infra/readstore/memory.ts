import { assertGuard, assertId, assertName } from './checks';
import {
  addToEqualityIndex,
  checkUnique,
  createEqualityIndex,
  createUniqueIndex,
  narrowByEquality,
  releaseUniqueKey,
  removeFromEqualityIndex,
  type EqualityIndex,
  type UniqueIndex,
} from './equality-index';
import { frozenCopy } from './frozen-copy';
import type { CheckpointGuard, DocChange, GuardedDoc, Query, ReadCollection, ReadDoc, ReadStore, SortKey, Where } from './port';
import { compareStrings, compileWhere, matchesAll, parseQuery, parseSort, type CompiledWhere, type ParsedSortKey, type Stored } from './query';
import { sortDocuments } from './sort';
import { createCompoundIndex, pageFrom, sortedPlan, type CompoundIndex } from './sorted-plan';

/**
 * Embedded mode's read store and its collections: guarded writes, reads by id and in
 * batches, queries (query.ts) answered through the indexes declared (equality-index.ts,
 * sorted-plan.ts), and the export and restore of every entry for a start snapshot.
 */

/**
 * What a memory store holds, as plain values: every document with its guard, per
 * collection, and the checkpoints. Indexes are not part of it: projections declare them
 * again at start, and an index is built over the documents already there.
 */
export interface MemoryStoreState {
  readonly checkpoints: Readonly<Record<string, string>>;
  readonly collections: Readonly<Record<string, ReadonlyArray<{ readonly doc: ReadDoc; readonly guard: string }>>>;
}

/** The memory read store, with the hooks a start uses (a snapshot: src/runtime/snapshot.ts; its replay). */
export interface MemoryReadStore extends ReadStore {
  /** Everything stored now, in one synchronous step (the documents are frozen, so they are shared, not copied). */
  exportState(): MemoryStoreState;
  /**
   * From now on writes leave the indexes as they are and note which documents changed; the
   * indexes catch up with those at the next query, count or index declaration of their
   * collection, and for good when the returned function is called (writes index at once
   * again). A start's replay writes a device once per batch its events fall in (a heartbeat
   * every minute: about every batch): it is then indexed once, at the end. Answers are
   * the same as with indexes kept up at each write: nothing reads an index before it caught up.
   */
  deferIndexing(): () => void;
}

/**
 * Embedded mode's read store. Follows MongoDB's query semantics so both adapters answer
 * alike (the contract suite in test/contract checks it):
 * - strings compare by code point (MongoDB's binary order, e.g. 'B' < 'a'), so ISO
 *   timestamps compare as strings; numbers numerically; a range only matches values of its
 *   bound's type (a numeric range never matches a string, and never null or an absent field);
 * - equality with null matches null and absent fields; an array field matches when one of
 *   its elements does;
 * - sort: null and absent first in ascending order, then numbers, strings, objects, arrays,
 *   booleans; ties broken by `id` ascending.
 *
 * Documents are deep-copied and frozen on `put`; reads hand out the frozen stored objects,
 * so no copy is made per query and callers cannot change stored state.
 */
export function createMemoryReadStore(initial?: MemoryStoreState): MemoryReadStore {
  const collections = new Map<string, MemoryCollection>();
  const indexing: Indexing = { deferred: false };
  const checkpoints = new Map<string, string>();
  const checkpointGuards = new Map<string, CheckpointGuard>();
  let closed = false;
  if (initial !== undefined) {
    for (const [name, value] of Object.entries(initial.checkpoints)) checkpoints.set(name, value);
    for (const [name, entries] of Object.entries(initial.collections)) {
      assertName(name, 'collection name');
      const collection = new MemoryCollection(indexing);
      collection.restore(entries);
      collections.set(name, collection);
    }
  }

  return {
    exportState() {
      const exported: Record<string, ReadonlyArray<{ readonly doc: ReadDoc; readonly guard: string }>> = {};
      for (const [name, collection] of collections) exported[name] = collection.exportEntries();
      return { checkpoints: Object.fromEntries(checkpoints), collections: exported };
    },
    deferIndexing() {
      indexing.deferred = true;
      return () => {
        if (!indexing.deferred) return;
        indexing.deferred = false;
        for (const collection of collections.values()) collection.catchUpIndexes();
      };
    },
    collection<T extends ReadDoc>(name: string): ReadCollection<T> {
      assertName(name, 'collection name');
      let collection = collections.get(name);
      if (collection === undefined) {
        collection = new MemoryCollection(indexing);
        collections.set(name, collection);
      }
      // The collection stores whatever documents it is given; T only types the caller's view.
      return collection as unknown as ReadCollection<T>;
    },
    async getCheckpoint(name) {
      assertName(name, 'checkpoint name');
      return checkpoints.get(name) ?? null;
    },
    async setCheckpoint(name, value) {
      assertName(name, 'checkpoint name');
      if (typeof value !== 'string') throw new TypeError('checkpoint value must be a string');
      checkpoints.set(name, value);
      checkpointGuards.delete(name);
    },
    async advanceCheckpoint(name, value, guard) {
      assertName(name, 'checkpoint name');
      if (typeof value !== 'string') throw new TypeError('checkpoint value must be a string');
      const stored = checkpointGuards.get(name);
      if (stored !== undefined && stored.epoch > guard.epoch) return 'fenced';
      if (stored !== undefined && compareStrings(stored.order, guard.order) > 0) return 'behind';
      checkpoints.set(name, value);
      checkpointGuards.set(name, { epoch: guard.epoch, order: guard.order });
      return 'written';
    },
    async ping() {
      if (closed) throw new Error('memory read store is closed');
    },
    async close() {
      closed = true;
    },
  };
}

interface Entry {
  readonly doc: Stored;
  readonly guard: string;
}

/** Writes are deferred only while a collection has no unique index, so none is owed a key when its indexes catch up. */
const NO_UNIQUE_KEYS: ReadonlyMap<UniqueIndex, string> = new Map();

/** Whether writes leave the indexes for later (MemoryReadStore.deferIndexing), shared by a store's collections. */
interface Indexing {
  deferred: boolean;
}

class MemoryCollection implements ReadCollection<Stored> {
  /**
   * Documents written while indexing was deferred, each with the version the indexes hold
   * (null: none): the indexes catch up with `entries` for these before anything reads them.
   */
  private readonly unindexed = new Map<string, Stored | null>();
  private readonly entries = new Map<string, Entry>();
  /** Guards of removed documents (not part of a snapshot: embedded mode has one projector, which never replays behind its checkpoint). */
  private readonly tombstones = new Map<string, string>();
  private readonly equalityIndexes = new Map<string, EqualityIndex>();
  private readonly uniqueIndexes = new Map<string, UniqueIndex>();
  private readonly compoundIndexes: CompoundIndex[] = [];
  /**
   * Indexes declared while indexing was deferred (a start's replay): built once from the
   * documents as they are when it resumes (or at a first query before), rather than built over
   * the snapshot's documents and then moved for every document the replay changes.
   */
  private readonly pendingIndexes: ParsedSortKey[][] = [];

  constructor(private readonly indexing: Indexing) {}

  async get(id: string): Promise<Stored | null> {
    assertId(id);
    return this.entries.get(id)?.doc ?? null;
  }

  async getGuard(id: string): Promise<string | null> {
    assertId(id);
    return this.entries.get(id)?.guard ?? null;
  }

  async getMany(ids: readonly string[]): Promise<Map<string, GuardedDoc<Stored>>> {
    const found = new Map<string, GuardedDoc<Stored>>();
    for (const id of ids) {
      assertId(id);
      const entry = this.entries.get(id);
      if (entry !== undefined) found.set(id, entry);
    }
    return found;
  }

  async writeMany(changes: ReadonlyArray<DocChange<Stored>>): Promise<void> {
    for (const change of changes) {
      if (change.kind === 'put') await this.put(change.doc, change.guard);
      else await this.remove(change.id, change.guard);
    }
  }

  async find(query: Query = {}): Promise<Stored[]> {
    this.catchUpIndexes();
    const { where, sort, skip, limit } = parseQuery(query);
    if (limit === 0) return [];
    const [only] = sort;
    const plan = sort.length === 1 && only !== undefined ? sortedPlan(this.compoundIndexes, where, only.field) : undefined;
    if (plan !== undefined && only !== undefined) return pageFrom(plan, only.direction, skip, limit);
    const matching = this.select(where);
    const end = limit === undefined ? matching.length : Math.min(matching.length, skip + limit);
    if (skip >= end) return [];
    return sortDocuments(matching, sort, end).slice(skip, end);
  }

  async count(where?: Where): Promise<number> {
    this.catchUpIndexes();
    const compiled = compileWhere(where);
    // A group's size answers a count its leading fields settle entirely.
    const plan = sortedPlan(this.compoundIndexes, compiled, undefined);
    if (plan !== undefined && plan.remaining.length === 0 && plan.groups.length <= 1) return plan.groups[0]?.size ?? 0;
    return this.select(compiled).length;
  }

  async put(doc: Stored, guard: string): Promise<boolean> {
    if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) throw new TypeError('document must be an object');
    assertId(doc.id, 'document id');
    assertGuard(guard);
    const previous = this.entries.get(doc.id);
    if (previous !== undefined && compareStrings(previous.guard, guard) >= 0) return false;
    const tombstone = this.tombstones.get(doc.id);
    if (tombstone !== undefined && compareStrings(tombstone, guard) >= 0) return false;
    const stored = frozenCopy(doc, 'document') as Stored;
    // A unique index refuses a write by what it holds: it is kept up at each write.
    if (this.indexing.deferred && this.uniqueIndexes.size === 0) {
      if (!this.unindexed.has(stored.id)) this.unindexed.set(stored.id, previous?.doc ?? null);
      this.entries.set(stored.id, { doc: stored, guard });
      this.tombstones.delete(stored.id);
      return true;
    }
    this.catchUpIndexes();
    const uniqueKeys = checkUnique(this.uniqueIndexes.values(), stored);
    if (previous !== undefined) this.unindex(previous.doc, stored);
    this.entries.set(stored.id, { doc: stored, guard });
    this.tombstones.delete(stored.id);
    this.index(stored, uniqueKeys, previous?.doc);
    return true;
  }

  async remove(id: string, guard: string): Promise<boolean> {
    assertId(id);
    assertGuard(guard);
    const previous = this.entries.get(id);
    if (previous === undefined) {
      const tombstone = this.tombstones.get(id);
      if (tombstone === undefined || compareStrings(tombstone, guard) < 0) this.tombstones.set(id, guard);
      return false;
    }
    if (compareStrings(previous.guard, guard) >= 0) return false;
    this.entries.delete(id);
    this.tombstones.set(id, guard);
    if (this.indexing.deferred && this.uniqueIndexes.size === 0) {
      if (!this.unindexed.has(id)) this.unindexed.set(id, previous.doc);
    } else {
      this.catchUpIndexes();
      this.unindex(previous.doc);
    }
    return true;
  }

  async load(entries: ReadonlyArray<{ readonly doc: Stored; readonly guard: string }>): Promise<void> {
    const seen = new Set<string>();
    for (const { doc } of entries) {
      assertId(doc.id, 'document id');
      if (this.entries.has(doc.id) || seen.has(doc.id)) throw new Error(`load: a document with id "${doc.id}" already exists`);
      seen.add(doc.id);
    }
    for (const { doc, guard } of entries) {
      if (!(await this.put(doc, guard))) throw new Error(`load: a document with id "${doc.id}" already exists`);
    }
  }

  exportEntries(): Array<{ readonly doc: Stored; readonly guard: string }> {
    return [...this.entries.values()];
  }

  /** Fills an empty collection, before any index is declared (a start from a snapshot). */
  restore(entries: ReadonlyArray<{ readonly doc: ReadDoc; readonly guard: string }>): void {
    if (this.entries.size > 0 || this.equalityIndexes.size > 0 || this.uniqueIndexes.size > 0) throw new Error('restore: the collection is not empty');
    for (const { doc, guard } of entries) {
      if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) throw new TypeError('document must be an object');
      assertId(doc.id, 'document id');
      assertGuard(guard);
      if (this.entries.has(doc.id)) throw new Error(`restore: document id "${doc.id}" appears twice`);
      this.entries.set(doc.id, { doc: frozenCopy(doc, 'document') as Stored, guard });
    }
  }

  async ensureIndex(fields: readonly SortKey[], options?: { readonly unique?: boolean }): Promise<void> {
    this.catchUpEntries();
    const keys = parseSort(fields);
    if (keys.length === 0) throw new TypeError('an index needs at least one field');
    // A unique index checks every write: it is built at once.
    if (this.indexing.deferred && options?.unique !== true) {
      this.pendingIndexes.push(keys);
      return;
    }
    this.buildIndex(keys);
    if (options?.unique === true) {
      const name = keys.map((key) => key.field).join('\u0000');
      if (this.uniqueIndexes.has(name)) return;
      this.uniqueIndexes.set(name, createUniqueIndex(name, keys.map((key) => key.read), this.entries.values()));
    }
  }

  private buildIndex(keys: readonly ParsedSortKey[]): void {
    const first = keys[0];
    if (first !== undefined && !this.equalityIndexes.has(first.field)) {
      this.equalityIndexes.set(first.field, createEqualityIndex(first.read, this.entries.values()));
    }
    if (keys.length >= 2) this.addCompoundIndex(keys);
  }

  private addCompoundIndex(keys: readonly ParsedSortKey[]): void {
    const fields = keys.map((key) => key.field);
    if (this.compoundIndexes.some((known) => known.fields.join('\u0000') === fields.join('\u0000'))) return;
    this.compoundIndexes.push(createCompoundIndex(keys, this.entries.values()));
  }

  async clear(): Promise<void> {
    this.unindexed.clear();
    this.entries.clear();
    this.tombstones.clear();
    for (const { index } of this.compoundIndexes) index.clear();
    for (const index of this.equalityIndexes.values()) {
      index.buckets.clear();
      index.others.clear();
    }
    for (const index of this.uniqueIndexes.values()) index.owners.clear();
  }

  /** Brings the indexes up to the documents written while indexing was deferred, and builds those declared meanwhile. */
  catchUpIndexes(): void {
    this.catchUpEntries();
    for (const keys of this.pendingIndexes.splice(0)) this.buildIndex(keys);
  }

  /** The documents written while indexing was deferred, into the indexes built: each moves once, however often it was written. */
  private catchUpEntries(): void {
    if (this.unindexed.size === 0) return;
    for (const [id, indexed] of this.unindexed) {
      const current = this.entries.get(id)?.doc ?? null;
      if (current === indexed) continue;
      if (current === null) {
        if (indexed !== null) this.unindex(indexed);
        continue;
      }
      if (indexed !== null) this.unindex(indexed, current);
      this.index(current, NO_UNIQUE_KEYS, indexed ?? undefined);
    }
    this.unindexed.clear();
  }

  private select(where: CompiledWhere): Stored[] {
    const result: Stored[] = [];
    const narrowed = narrowByEquality(this.equalityIndexes, where);
    if (narrowed === undefined) {
      for (const { doc } of this.entries.values()) if (matchesAll(where, doc)) result.push(doc);
      return result;
    }
    const collect = (docs: Iterable<Stored>, conditions: CompiledWhere): void => {
      for (const doc of docs) if (matchesAll(conditions, doc)) result.push(doc);
    };
    // A document in the bucket of one of the condition's values meets that condition, so only
    // the rest are tested (not reading the indexed field saves most of a lookup's time).
    collect(narrowed.inBuckets, where.filter((condition) => condition !== narrowed.condition));
    collect(narrowed.others, where);
    return result;
  }

  /** `replacing`: the version `doc` replaces, already out of every index but the compound ones. */
  private index(doc: Stored, uniqueKeys: ReadonlyMap<UniqueIndex, string>, replacing?: Stored): void {
    for (const index of this.equalityIndexes.values()) addToEqualityIndex(index, doc);
    for (const { index } of this.compoundIndexes) {
      if (replacing === undefined) index.add(doc);
      else index.replace(replacing, doc);
    }
    for (const [index, key] of uniqueKeys) index.owners.set(key, doc.id);
  }

  /** With `replacement`, compound indexes are left for `index` to update in place. */
  private unindex(doc: Stored, replacement?: Stored): void {
    if (replacement === undefined) for (const { index } of this.compoundIndexes) index.delete(doc);
    for (const index of this.equalityIndexes.values()) removeFromEqualityIndex(index, doc);
    for (const index of this.uniqueIndexes.values()) releaseUniqueKey(index, doc);
  }
}

