import type { DocChange, FieldFilter, GuardedDoc, Query, ReadCollection, ReadDoc, ReadStore, Scalar, SortKey, Where } from './port';
import { SortedIndex, type IndexGroup } from './sorted-index';

/**
 * What a memory store holds, as plain values: every document with its guard, per
 * collection, and the checkpoints. Indexes are not part of it: projections declare them
 * again at start, and an index is built over the documents already there.
 */
export interface MemoryStoreState {
  readonly checkpoints: Readonly<Record<string, string>>;
  readonly collections: Readonly<Record<string, ReadonlyArray<{ readonly doc: ReadDoc; readonly guard: string }>>>;
}

/** The memory read store, with the hooks a start snapshot uses (src/runtime/snapshot.ts). */
export interface MemoryReadStore extends ReadStore {
  /** Everything stored now, in one synchronous step (the documents are frozen, so they are shared, not copied). */
  exportState(): MemoryStoreState;
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
  const checkpoints = new Map<string, string>();
  let closed = false;
  if (initial !== undefined) {
    for (const [name, value] of Object.entries(initial.checkpoints)) checkpoints.set(name, value);
    for (const [name, entries] of Object.entries(initial.collections)) {
      assertName(name, 'collection name');
      const collection = new MemoryCollection();
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
    collection<T extends ReadDoc>(name: string): ReadCollection<T> {
      assertName(name, 'collection name');
      let collection = collections.get(name);
      if (collection === undefined) {
        collection = new MemoryCollection();
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
    },
    async ping() {
      if (closed) throw new Error('memory read store is closed');
    },
    async close() {
      closed = true;
    },
  };
}

type Path = readonly string[];
type Stored = Readonly<Record<string, unknown>> & ReadDoc;

interface Entry {
  readonly doc: Stored;
  readonly guard: string;
}

/**
 * Equality lookups on the first field of each declared index. An array is multikey, as in
 * MongoDB: the document sits in the bucket of each of its elements (an empty array in none,
 * since no equality or `in` matches it). Documents whose value there is neither a scalar nor
 * an array of scalars stay in `others`.
 */
interface EqualityIndex {
  readonly read: Getter;
  /** The stored documents themselves, not their ids: a lookup needs no second map access per document. */
  readonly buckets: Map<Scalar, Set<Stored>>;
  readonly others: Set<Stored>;
}

interface UniqueIndex {
  readonly name: string;
  readonly reads: readonly Getter[];
  readonly owners: Map<string, string>;
}

/** A declared compound index of two fields or more, kept sorted (see sorted-index.ts). */
interface CompoundIndex {
  readonly fields: readonly string[];
  readonly index: SortedIndex<Stored>;
}

/** How a compound index answers a query: the groups to read, and the conditions they do not settle. */
interface SortedPlan {
  readonly index: SortedIndex<Stored>;
  readonly groups: ReadonlyArray<IndexGroup<Stored>>;
  readonly remaining: CompiledWhere;
}

class MemoryCollection implements ReadCollection<Stored> {
  private readonly entries = new Map<string, Entry>();
  private readonly equalityIndexes = new Map<string, EqualityIndex>();
  private readonly uniqueIndexes = new Map<string, UniqueIndex>();
  private readonly compoundIndexes: CompoundIndex[] = [];

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
    const { where, sort, skip, limit } = parseQuery(query);
    if (limit === 0) return [];
    const [only] = sort;
    const plan = sort.length === 1 && only !== undefined ? this.sortedPlan(where, only.field) : undefined;
    if (plan !== undefined && only !== undefined) return pageFrom(plan, only.direction, skip, limit);
    const matching = this.select(where);
    const end = limit === undefined ? matching.length : Math.min(matching.length, skip + limit);
    if (skip >= end) return [];
    return sortDocuments(matching, sort, end).slice(skip, end);
  }

  async count(where?: Where): Promise<number> {
    const compiled = compileWhere(where);
    // A group's size answers a count its leading fields settle entirely.
    const plan = this.sortedPlan(compiled, undefined);
    if (plan !== undefined && plan.remaining.length === 0 && plan.groups.length <= 1) return plan.groups[0]?.size ?? 0;
    return this.select(compiled).length;
  }

  /**
   * The compound index that settles the most conditions by its leading fields (each needs an
   * equality or `in` there), ending in `sortField` when one is given; undefined when none fits.
   */
  private sortedPlan(where: CompiledWhere, sortField: string | undefined): SortedPlan | undefined {
    let best: { index: SortedIndex<Stored>; conditions: Condition[] } | undefined;
    for (const { fields, index } of this.compoundIndexes) {
      if (!index.usable || (sortField !== undefined && fields[fields.length - 1] !== sortField)) continue;
      const conditions: Condition[] = [];
      for (const field of fields.slice(0, -1)) {
        const condition = where.find((c) => c.field === field && c.lookup !== undefined);
        if (condition !== undefined) conditions.push(condition);
      }
      if (conditions.length !== fields.length - 1) continue;
      if (best === undefined || conditions.length > best.conditions.length) best = { index, conditions };
    }
    if (best === undefined) return undefined;
    const settled = best.conditions;
    return {
      index: best.index,
      groups: best.index.groupsFor(settled.map((c) => c.lookup ?? [])),
      remaining: where.filter((c) => !settled.includes(c)),
    };
  }

  async put(doc: Stored, guard: string): Promise<boolean> {
    if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) throw new TypeError('document must be an object');
    assertId(doc.id, 'document id');
    assertGuard(guard);
    const previous = this.entries.get(doc.id);
    if (previous !== undefined && compareStrings(previous.guard, guard) >= 0) return false;
    const stored = frozenCopy(doc, 'document') as Stored;
    const uniqueKeys = this.checkUnique(stored);
    if (previous !== undefined) this.unindex(previous.doc, stored);
    this.entries.set(stored.id, { doc: stored, guard });
    this.index(stored, uniqueKeys, previous?.doc);
    return true;
  }

  async remove(id: string, guard: string): Promise<boolean> {
    assertId(id);
    assertGuard(guard);
    const previous = this.entries.get(id);
    if (previous === undefined || compareStrings(previous.guard, guard) >= 0) return false;
    this.entries.delete(id);
    this.unindex(previous.doc);
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
    const keys = parseSort(fields);
    if (keys.length === 0) throw new TypeError('an index needs at least one field');
    const first = keys[0];
    if (first !== undefined && !this.equalityIndexes.has(first.field)) {
      const index: EqualityIndex = { read: first.read, buckets: new Map(), others: new Set() };
      for (const { doc } of this.entries.values()) addToEqualityIndex(index, doc);
      this.equalityIndexes.set(first.field, index);
    }
    if (keys.length >= 2) this.addCompoundIndex(keys);
    if (options?.unique === true) {
      const name = keys.map((key) => key.field).join('\u0000');
      if (this.uniqueIndexes.has(name)) return;
      const index: UniqueIndex = { name, reads: keys.map((key) => key.read), owners: new Map() };
      for (const { doc } of this.entries.values()) {
        const key = uniqueKey(index, doc);
        const owner = index.owners.get(key);
        if (owner !== undefined) throw duplicateKeyError(index, owner, doc.id);
        index.owners.set(key, doc.id);
      }
      this.uniqueIndexes.set(name, index);
    }
  }

  private addCompoundIndex(keys: readonly ParsedSortKey[]): void {
    const fields = keys.map((key) => key.field);
    if (this.compoundIndexes.some((known) => known.fields.join('\u0000') === fields.join('\u0000'))) return;
    const last = keys[keys.length - 1] as ParsedSortKey;
    // The top-level fields the index reads: a new version that shares them all (a spread copy
    // changing something else) sorts where the old one did.
    const tops = [...new Set(fields.map((field) => field.split('.')[0] as string))];
    const index = new SortedIndex<Stored>({
      sameFields: (a, b) => tops.every((top) => a[top] === b[top]),
      prefix: keys.slice(0, -1).map((key) => key.read),
      sortField: last.field,
      readSort: last.read,
      compareValues: compareForSort,
      compareIds: compareStrings,
      idOf: (doc) => doc.id,
      keysOf: equalityKeys,
    });
    for (const { doc } of this.entries.values()) index.add(doc);
    this.compoundIndexes.push({ fields, index });
  }

  async clear(): Promise<void> {
    this.entries.clear();
    for (const { index } of this.compoundIndexes) index.clear();
    for (const index of this.equalityIndexes.values()) {
      index.buckets.clear();
      index.others.clear();
    }
    for (const index of this.uniqueIndexes.values()) index.owners.clear();
  }

  private select(where: CompiledWhere): Stored[] {
    const result: Stored[] = [];
    const narrowed = this.candidates(where);
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

  /**
   * The smallest set of documents an equality index narrows the query to (those in the buckets
   * of the condition's values, and the index's `others`, which still need every test), or
   * undefined to scan everything.
   */
  private candidates(where: CompiledWhere): { readonly condition: Condition; readonly inBuckets: Iterable<Stored>; readonly others: Iterable<Stored> } | undefined {
    let best: { readonly condition: Condition; readonly buckets: ReadonlyArray<ReadonlySet<Stored>>; readonly others: ReadonlySet<Stored>; readonly size: number } | undefined;
    for (const condition of where) {
      const index = this.equalityIndexes.get(condition.field);
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

  private checkUnique(doc: Stored): Map<UniqueIndex, string> {
    const keys = new Map<UniqueIndex, string>();
    for (const index of this.uniqueIndexes.values()) {
      const key = uniqueKey(index, doc);
      const owner = index.owners.get(key);
      if (owner !== undefined && owner !== doc.id) throw duplicateKeyError(index, owner, doc.id);
      keys.set(index, key);
    }
    return keys;
  }

  /** `replacing`: the version `doc` replaces, already out of every index but the compound ones. */
  private index(doc: Stored, uniqueKeys: Map<UniqueIndex, string>, replacing?: Stored): void {
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
    for (const index of this.equalityIndexes.values()) {
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
    for (const index of this.uniqueIndexes.values()) {
      const key = uniqueKey(index, doc);
      if (index.owners.get(key) === doc.id) index.owners.delete(key);
    }
  }
}

/** A page read from a compound index: walked in order from one end, stopping once the page is full. */
function pageFrom(plan: SortedPlan, direction: 1 | -1, skip: number, limit: number | undefined): Stored[] {
  const page: Stored[] = [];
  // A multikey document can sit in several of the groups read: each once.
  const seen = plan.groups.length > 1 ? new Set<Stored>() : null;
  let skipped = 0;
  for (const doc of plan.index.walk(plan.groups, direction)) {
    if (seen !== null) {
      if (seen.has(doc)) continue;
      seen.add(doc);
    }
    if (!matchesAll(plan.remaining, doc)) continue;
    if (skipped < skip) {
      skipped++;
      continue;
    }
    page.push(doc);
    if (limit !== undefined && page.length >= limit) break;
  }
  return page;
}

function addToEqualityIndex(index: EqualityIndex, doc: Stored): void {
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

/** The buckets a value belongs to: its own for a scalar, each element's for an array of scalars; undefined otherwise. */
function equalityKeys(value: unknown): readonly Scalar[] | undefined {
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

// ---------------------------------------------------------------------------------------
// Queries

/** A where entry, compiled: `read` takes the field's value out of a document, `test` decides on it. */
interface Condition {
  readonly field: string;
  readonly read: Getter;
  readonly test: (value: unknown) => boolean;
  /** The values an equality index can look up (for equality and `in`). */
  readonly lookup?: readonly Scalar[];
}

type CompiledWhere = readonly Condition[];
type Getter = (doc: unknown) => unknown;

interface Bound {
  readonly op: 'gt' | 'gte' | 'lt' | 'lte';
  readonly value: string | number | boolean;
}

interface ParsedSortKey {
  readonly field: string;
  readonly read: Getter;
  readonly direction: 1 | -1;
}

const RANGE_OPERATORS = ['gt', 'gte', 'lt', 'lte'] as const;

function parseQuery(query: Query): { where: CompiledWhere; sort: readonly ParsedSortKey[]; skip: number; limit: number | undefined } {
  if (typeof query !== 'object' || query === null) throw new TypeError('query must be an object');
  return {
    where: compileWhere(query.where),
    sort: parseSort(query.sort ?? []),
    skip: query.skip === undefined ? 0 : assertCount(query.skip, 'skip'),
    limit: query.limit === undefined ? undefined : assertCount(query.limit, 'limit'),
  };
}

function compileWhere(where: Where | undefined): CompiledWhere {
  if (where === undefined) return [];
  if (!isPlainObject(where)) throw new TypeError('where must be an object');
  const conditions: Condition[] = [];
  for (const [field, filter] of Object.entries(where)) {
    const read = getterFor(parseField(field));
    const condition = compileFilter(field, read, filter);
    if (condition !== undefined) conditions.push(condition);
  }
  return conditions;
}

function compileFilter(field: string, read: Getter, filter: FieldFilter | undefined): Condition | undefined {
  if (isScalar(filter)) return { field, read, test: equalityTest(filter), lookup: [filter] };
  if (!isPlainObject(filter)) throw new TypeError(`filter on "${field}" must be a scalar, {in: [...]} or a range`);
  const keys = Object.keys(filter);
  if ('in' in filter) {
    if (keys.length !== 1) throw new TypeError(`filter on "${field}": "in" cannot be combined with other operators`);
    const values: unknown = filter.in;
    if (!Array.isArray(values) || !values.every(isScalar)) throw new TypeError(`filter on "${field}": "in" must be an array of scalars`);
    const set = new Set<unknown>(values);
    const matchesAbsent = set.has(null);
    const test = (value: unknown): boolean =>
      Array.isArray(value) ? value.some((element) => set.has(element)) : set.has(value) || (matchesAbsent && value === undefined);
    return { field, read, test, lookup: values };
  }
  const bounds: Bound[] = [];
  for (const key of keys) {
    const op = RANGE_OPERATORS.find((candidate) => candidate === key);
    if (op === undefined) throw new TypeError(`filter on "${field}": unknown operator "${key}"`);
    const value: unknown = (filter as Readonly<Record<string, unknown>>)[key];
    if (value === undefined) continue;
    if (!isRangeBound(value)) throw new TypeError(`filter on "${field}": "${op}" must be a string, a finite number or a boolean`);
    bounds.push({ op, value });
  }
  if (bounds.length === 0) return undefined;
  // On an array, each bound may be met by a different element (MongoDB without $elemMatch).
  const test = (value: unknown): boolean =>
    Array.isArray(value)
      ? bounds.every((bound) => value.some((element) => satisfies(element, bound)))
      : bounds.every((bound) => satisfies(value, bound));
  return { field, read, test };
}

function equalityTest(expected: Scalar): (value: unknown) => boolean {
  if (expected === null) {
    return (value) => value === null || value === undefined || (Array.isArray(value) && value.includes(null));
  }
  return (value) => value === expected || (Array.isArray(value) && value.includes(expected));
}

function parseSort(keys: readonly SortKey[]): ParsedSortKey[] {
  if (!Array.isArray(keys)) throw new TypeError('sort must be an array');
  const seen = new Set<string>();
  const parsed: ParsedSortKey[] = [];
  for (const key of keys as readonly unknown[]) {
    if (!isPlainObject(key) || typeof key.field !== 'string' || (key.order !== 'asc' && key.order !== 'desc')) {
      throw new TypeError('a sort key must be {field, order: "asc" | "desc"}');
    }
    const path = parseField(key.field);
    if (seen.has(key.field)) continue;
    seen.add(key.field);
    parsed.push({ field: key.field, read: getterFor(path), direction: key.order === 'asc' ? 1 : -1 });
  }
  return parsed;
}

function matchesAll(where: CompiledWhere, doc: Stored): boolean {
  for (const condition of where) if (!condition.test(condition.read(doc))) return false;
  return true;
}

function satisfies(value: unknown, bound: Bound): boolean {
  if (typeof value !== typeof bound.value) return false;
  const order = compareScalars(value as string | number | boolean, bound.value);
  switch (bound.op) {
    case 'gt':
      return order > 0;
    case 'gte':
      return order >= 0;
    case 'lt':
      return order < 0;
    case 'lte':
      return order <= 0;
    default: {
      const _exhaustive: never = bound.op;
      return _exhaustive;
    }
  }
}

function compareScalars(a: string | number | boolean, b: string | number | boolean): number {
  if (typeof a === 'string' && typeof b === 'string') return compareStrings(a, b);
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * Code point order, which is MongoDB's (UTF-8 byte) order. It differs from JavaScript's
 * UTF-16 `<` only when a surrogate half meets a code unit in U+E000..U+FFFF.
 */
function compareStrings(a: string, b: string): number {
  if (a === b) return 0;
  const length = Math.min(a.length, b.length);
  for (let i = 0; i < length; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x === y) continue;
    const xSurrogate = x >= 0xd800 && x <= 0xdfff;
    const ySurrogate = y >= 0xd800 && y <= 0xdfff;
    if (xSurrogate !== ySurrogate && (x >= 0xe000 || y >= 0xe000)) return xSurrogate ? 1 : -1;
    return x < y ? -1 : 1;
  }
  return a.length - b.length;
}

// ---------------------------------------------------------------------------------------
// Sorting

type Compare<T> = (a: T, b: T) => number;

/**
 * The first `count` documents in query order, then by id. Sort values are read once per
 * document into one flat array (the id last) and positions are sorted, so a query
 * allocates little beyond its result.
 */
function sortDocuments(docs: Stored[], keys: readonly ParsedSortKey[], count: number): Stored[] {
  const width = keys.length + 1;
  const directions = [...keys.map((key) => key.direction), 1];
  const values: unknown[] = new Array<unknown>(docs.length * width);
  const positions: number[] = new Array<number>(docs.length);
  for (let i = 0; i < docs.length; i++) {
    const doc = docs[i] as Stored;
    positions[i] = i;
    for (let j = 0; j < keys.length; j++) {
      const key = keys[j] as ParsedSortKey;
      values[i * width + j] = toSortKey(sortValue(key.read(doc), key.direction));
    }
    values[i * width + keys.length] = toSortKey(doc.id);
  }
  const compare: Compare<number> = (a, b) => {
    for (let j = 0; j < width; j++) {
      const x = values[a * width + j];
      const y = values[b * width + j];
      // Sort keys that are strings compare natively: toSortKey made UTF-16 order agree with code point order.
      const order =
        typeof x === 'string' && typeof y === 'string' ? (x < y ? -1 : x > y ? 1 : 0) : compareForSort(x, y);
      if (order !== 0) return order * (directions[j] as number);
    }
    return 0;
  };
  return sortedPrefix(positions, compare, count).map((i) => docs[i] as Stored);
}

const BEYOND_SURROGATES = /[\ud800-\uffff]/;

/**
 * A string whose UTF-16 order is the code point order of the given one: code units of
 * surrogates move above U+E000..U+FFFF. Strings without such units (nearly all) are kept.
 */
function toSortKey(value: unknown): unknown {
  if (typeof value !== 'string' || !BEYOND_SURROGATES.test(value)) return value;
  let key = '';
  for (let i = 0; i < value.length; i++) {
    const unit = value.charCodeAt(i);
    key += String.fromCharCode(unit < 0xd800 ? unit : unit <= 0xdfff ? unit + 0x2000 : unit - 0x800);
  }
  return key;
}

/** Like MongoDB: an array sorts by its smallest element ascending, by its largest descending. */
function sortValue(value: unknown, direction: 1 | -1): unknown {
  if (!Array.isArray(value) || value.length === 0) return value;
  let chosen: unknown = value[0];
  for (const element of value) if (compareForSort(element, chosen) * direction < 0) chosen = element;
  return chosen;
}

function typeRank(value: unknown): number {
  if (value === undefined || value === null) return 1;
  switch (typeof value) {
    case 'number':
      return 2;
    case 'string':
      return 3;
    case 'boolean':
      return 8;
    default:
      if (Array.isArray(value)) return value.length === 0 ? 0 : 5;
      return 4;
  }
}

function compareForSort(a: unknown, b: unknown): number {
  if (typeof a === 'string' && typeof b === 'string') return compareStrings(a, b);
  if (typeof a === 'number' && typeof b === 'number') return a < b ? -1 : a > b ? 1 : 0;
  const rankA = typeRank(a);
  const rankB = typeRank(b);
  if (rankA !== rankB) return rankA < rankB ? -1 : 1;
  switch (rankA) {
    case 2:
    case 8:
      return compareScalars(a as number | boolean, b as number | boolean);
    case 3:
      return compareStrings(a as string, b as string);
    case 4:
      return compareObjects(a as Readonly<Record<string, unknown>>, b as Readonly<Record<string, unknown>>);
    case 5:
      return compareArrays(a as readonly unknown[], b as readonly unknown[]);
    default:
      return 0;
  }
}

function compareObjects(a: Readonly<Record<string, unknown>>, b: Readonly<Record<string, unknown>>): number {
  const keysA = Object.keys(a);
  const keysB = Object.keys(b);
  for (let i = 0; i < Math.min(keysA.length, keysB.length); i++) {
    const keyA = keysA[i] as string;
    const keyB = keysB[i] as string;
    const byType = typeRank(a[keyA]) - typeRank(b[keyB]);
    if (byType !== 0) return byType < 0 ? -1 : 1;
    const byName = compareStrings(keyA, keyB);
    if (byName !== 0) return byName;
    const byValue = compareForSort(a[keyA], b[keyB]);
    if (byValue !== 0) return byValue;
  }
  return keysA.length - keysB.length;
}

function compareArrays(a: readonly unknown[], b: readonly unknown[]): number {
  for (let i = 0; i < Math.min(a.length, b.length); i++) {
    const order = compareForSort(a[i], b[i]);
    if (order !== 0) return order;
  }
  return a.length - b.length;
}

/** The first `count` items in order: a full sort when most are wanted, a bounded heap for a short page. */
function sortedPrefix<T>(items: T[], compare: Compare<T>, count: number): T[] {
  if (count * 8 >= items.length) return items.sort(compare);
  // Max-heap of the `count` smallest items seen so far.
  const heap: T[] = [];
  const swap = (i: number, j: number): void => {
    const item = heap[i] as T;
    heap[i] = heap[j] as T;
    heap[j] = item;
  };
  const siftUp = (start: number): void => {
    let i = start;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (compare(heap[i] as T, heap[parent] as T) <= 0) return;
      swap(i, parent);
      i = parent;
    }
  };
  const siftDown = (): void => {
    let i = 0;
    for (;;) {
      const left = 2 * i + 1;
      const right = left + 1;
      let largest = i;
      if (left < heap.length && compare(heap[left] as T, heap[largest] as T) > 0) largest = left;
      if (right < heap.length && compare(heap[right] as T, heap[largest] as T) > 0) largest = right;
      if (largest === i) return;
      swap(i, largest);
      i = largest;
    }
  };
  for (const item of items) {
    if (heap.length < count) {
      heap.push(item);
      siftUp(heap.length - 1);
    } else if (compare(item, heap[0] as T) < 0) {
      heap[0] = item;
      siftDown();
    }
  }
  return heap.sort(compare);
}

// ---------------------------------------------------------------------------------------
// Values

/** A reader for a field; a plain property read when the field is one own key, the common case. */
function getterFor(path: Path): Getter {
  const key = path[0] as string;
  if (path.length === 1 && !(key in Object.prototype)) {
    return (doc) => (doc as Readonly<Record<string, unknown>>)[key];
  }
  return (doc) => readPath(doc, path);
}

/** Reads a dotted path; through an array it collects the values of its elements, as MongoDB does. */
function readPath(doc: unknown, path: Path): unknown {
  let current: unknown = doc;
  for (let i = 0; i < path.length; i++) {
    if (current === null || typeof current !== 'object') return undefined;
    if (Array.isArray(current)) {
      const rest = path.slice(i);
      const values: unknown[] = [];
      for (const element of current) {
        const value = readPath(element, rest);
        if (Array.isArray(value)) values.push(...(value as unknown[]));
        else if (value !== undefined) values.push(value);
      }
      return values.length === 0 ? undefined : values;
    }
    const key = path[i] as string;
    current = Object.prototype.hasOwnProperty.call(current, key) ? (current as Readonly<Record<string, unknown>>)[key] : undefined;
  }
  return current;
}

/**
 * Values this store has copied and deep-frozen. A document written again after a small
 * change (a heartbeat moving `lastSeenAt`) mostly holds such values, handed out by `get`
 * and spread into the new version: they are shared as they are, not copied again.
 */
const deepFrozen = new WeakSet<object>();

const INVALID: unique symbol = Symbol('invalid');

/** A JSON-shaped deep copy, frozen; undefined properties are dropped (array slots become null), as the MongoDB adapter stores them. */
function frozenCopy(value: unknown, where: string): unknown {
  const copy = tryFrozenCopy(value);
  if (copy === INVALID) {
    throw new TypeError(`${invalidPath(value, where) ?? where}: only JSON-like values (objects, arrays, strings, numbers, booleans, null) can be stored`);
  }
  return copy;
}

function tryFrozenCopy(value: unknown): unknown {
  if (value === null || typeof value === 'string' || typeof value === 'boolean' || typeof value === 'number') return value;
  if (typeof value !== 'object') return INVALID;
  if (deepFrozen.has(value)) return value;
  let copy: unknown[] | Record<string, unknown>;
  if (Array.isArray(value)) {
    const elements: unknown[] = new Array<unknown>(value.length);
    for (let i = 0; i < value.length; i++) {
      const element: unknown = value[i];
      const copied = element === undefined ? null : tryFrozenCopy(element);
      if (copied === INVALID) return INVALID;
      elements[i] = copied;
    }
    copy = elements;
  } else if (isPlainObject(value)) {
    const fields: Record<string, unknown> = {};
    for (const key of Object.keys(value)) {
      const element = value[key];
      if (element === undefined) continue;
      const copied = tryFrozenCopy(element);
      if (copied === INVALID) return INVALID;
      // A key named __proto__ stays a field: assignment would set the prototype instead.
      if (key === '__proto__') Object.defineProperty(fields, key, { value: copied, enumerable: true, writable: true, configurable: true });
      else fields[key] = copied;
    }
    copy = fields;
  } else {
    return INVALID;
  }
  Object.freeze(copy);
  deepFrozen.add(copy);
  return copy;
}

/** Where in `value` the first value that cannot be stored sits (the slow path, for the error message only). */
function invalidPath(value: unknown, where: string): string | null {
  if (value === null || typeof value === 'string' || typeof value === 'boolean' || typeof value === 'number') return null;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const element: unknown = value[i];
      const found = element === undefined ? null : invalidPath(element, `${where}[${i}]`);
      if (found !== null) return found;
    }
    return null;
  }
  if (isPlainObject(value)) {
    for (const [key, element] of Object.entries(value)) {
      const found = element === undefined ? null : invalidPath(element, `${where}.${key}`);
      if (found !== null) return found;
    }
    return null;
  }
  return where;
}

function isScalar(value: unknown): value is Scalar {
  return value === null || typeof value === 'string' || typeof value === 'boolean' || (typeof value === 'number' && Number.isFinite(value));
}

function isRangeBound(value: unknown): value is string | number | boolean {
  return value !== null && isScalar(value);
}

function isPlainObject(value: unknown): value is Readonly<Record<string, unknown>> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const prototype: unknown = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
}

function parseField(field: string): Path {
  if (typeof field !== 'string' || field.length === 0) throw new TypeError('a field name must be a non-empty string');
  const path = field.split('.');
  for (const segment of path) {
    if (segment.length === 0 || segment.startsWith('$') || segment.includes('\u0000')) {
      throw new TypeError(`invalid field name "${field}"`);
    }
  }
  return path;
}

function assertName(name: string, what: string): void {
  if (typeof name !== 'string' || name.length === 0 || name.includes('$') || name.includes('\u0000')) {
    throw new TypeError(`invalid ${what} "${String(name)}"`);
  }
}

function assertId(id: unknown, what = 'id'): asserts id is string {
  if (typeof id !== 'string' || id.length === 0) throw new TypeError(`${what} must be a non-empty string`);
}

function assertGuard(guard: unknown): asserts guard is string {
  if (typeof guard !== 'string') throw new TypeError('guard must be a string');
}

function assertCount(value: unknown, what: string): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) throw new RangeError(`${what} must be a non-negative integer`);
  return value;
}
