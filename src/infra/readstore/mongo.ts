import type { AnyBulkWriteOperation, Collection, Document, Filter } from 'mongodb';
import { connectMongo } from '../mongo';
import { assertCount, assertGuard, assertId, assertName, inFilterValues, isPlainObject, isScalar } from './checks';
import type { DocChange, FieldFilter, GuardedDoc, Query, ReadCollection, ReadDoc, ReadStore, SortKey, Where } from './port';

/**
 * The read store on MongoDB. A document `{id, ...fields}` is stored as
 * `{_id: id, ...fields, _guard: guard}`; `_guard` is stripped on read.
 *
 * Uses only what jongodb (the test stand-in) implements correctly: replaceOne/updateOne
 * with upsert, deleteOne/deleteMany, find with filter/sort/skip/limit, countDocuments,
 * createIndex. Query semantics are MongoDB's; the memory adapter follows them.
 */
export async function createMongoReadStore(
  uri: string,
  options: { readonly dbName?: string; readonly collectionPrefix?: string } = {},
): Promise<ReadStore> {
  const prefix = options.collectionPrefix ?? '';
  if (prefix.includes('$') || prefix.includes('\u0000')) throw new TypeError(`invalid collection prefix "${prefix}"`);
  // Undefined properties are left out, as the memory adapter does, instead of stored as null.
  const { client, db } = await connectMongo(uri, options.dbName, { ignoreUndefined: true });
  const checkpoints = db.collection<CheckpointDoc>(`${prefix}${CHECKPOINTS}`);
  const collections = new Map<string, MongoReadCollection>();
  let closed = false;

  return {
    collection<T extends ReadDoc>(name: string): ReadCollection<T> {
      assertName(name, 'collection name');
      if (name === CHECKPOINTS) throw new TypeError(`"${CHECKPOINTS}" is reserved for checkpoints`);
      let collection = collections.get(name);
      if (collection === undefined) {
        collection = new MongoReadCollection(db.collection<MongoDoc>(`${prefix}${name}`));
        collections.set(name, collection);
      }
      // The collection stores whatever documents it is given; T only types the caller's view.
      return collection as unknown as ReadCollection<T>;
    },
    async getCheckpoint(name) {
      assertName(name, 'checkpoint name');
      const doc = await checkpoints.findOne({ _id: name });
      return typeof doc?.value === 'string' ? doc.value : null;
    },
    async setCheckpoint(name, value) {
      assertName(name, 'checkpoint name');
      if (typeof value !== 'string') throw new TypeError('checkpoint value must be a string');
      const write = (): Promise<unknown> => checkpoints.updateOne({ _id: name }, { $set: { value }, $unset: { epoch: '', order: '' } }, { upsert: true });
      try {
        await write();
      } catch (error) {
        // Two first writes raced on the upsert: the document exists now, so the update applies.
        if (!isDuplicateKey(error)) throw error;
        await write();
      }
    },
    async advanceCheckpoint(name, value, guard) {
      assertName(name, 'checkpoint name');
      if (typeof value !== 'string') throw new TypeError('checkpoint value must be a string');
      if (!Number.isSafeInteger(guard.epoch) || guard.epoch < 0 || typeof guard.order !== 'string') throw new TypeError('invalid checkpoint guard');
      const fields = { value, epoch: guard.epoch, order: guard.order };
      for (let attempt = 1; ; attempt++) {
        // Only over an older or equal epoch and an earlier or equal position.
        const result = await checkpoints.updateOne({ _id: name, epoch: { $lte: guard.epoch }, order: { $lte: guard.order } }, { $set: fields });
        if (result.matchedCount === 1) return 'written';
        const stored = await checkpoints.findOne({ _id: name });
        if (stored !== null && typeof stored.epoch === 'number' && typeof stored.order === 'string') {
          return stored.epoch > guard.epoch ? 'fenced' : 'behind';
        }
        if (attempt >= PUT_ATTEMPTS) throw new Error(`checkpoint "${name}" kept changing under a guarded write`);
        try {
          // None yet, or one written without a guard (by a rebuild or an earlier version): replaced only as it was read.
          if (stored === null) await checkpoints.insertOne({ _id: name, ...fields });
          else if ((await checkpoints.updateOne({ _id: name, value: stored.value }, { $set: fields })).matchedCount === 0) continue;
          return 'written';
        } catch (error) {
          if (!isDuplicateKey(error)) throw error;
        }
      }
    },
    async ping() {
      if (closed) throw new Error('MongoDB read store is closed');
      await db.command({ ping: 1 });
    },
    async close() {
      closed = true;
      await client.close();
    },
  };
}

const CHECKPOINTS = 'checkpoints';
const GUARD = '_guard';
/** A removed document's tombstone: `{_id, _deleted: true, _guard}`, seen by no read. */
const DELETED = '_deleted';
const LIVE: Filter<MongoDoc> = { [DELETED]: { $ne: true } };
/** Guarded writes retried after losing an upsert race to a write with a lower guard. */
const PUT_ATTEMPTS = 5;

interface CheckpointDoc {
  _id: string;
  value: string;
  /** Written by a guarded write (advanceCheckpoint): the lease epoch and the position's order. */
  epoch?: number;
  order?: string;
}

type Stored = Readonly<Record<string, unknown>> & ReadDoc;

interface MongoDoc extends Document {
  _id: string;
}

/** A document and its guard checked before a write: its id, and its other fields (none of them reserved). */
function checkedDocument(doc: Stored, guard: string): { id: string; fields: Omit<Stored, 'id'> } {
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) throw new TypeError('document must be an object');
  assertId(doc.id, 'document id');
  assertGuard(guard);
  const { id, ...fields } = doc;
  for (const reserved of ['_id', GUARD, DELETED]) {
    if (Object.prototype.hasOwnProperty.call(fields, reserved)) throw new TypeError(`document field "${reserved}" is reserved`);
  }
  return { id, fields };
}

class MongoReadCollection implements ReadCollection<Stored> {
  constructor(private readonly collection: Collection<MongoDoc>) {}

  async get(id: string): Promise<Stored | null> {
    assertId(id);
    const doc = await this.collection.findOne({ ...byId(id), ...LIVE });
    return doc === null ? null : toReadDoc(doc);
  }

  async getGuard(id: string): Promise<string | null> {
    assertId(id);
    const doc = await this.collection.findOne({ ...byId(id), ...LIVE });
    const guard: unknown = doc?.[GUARD];
    return typeof guard === 'string' ? guard : null;
  }

  async getMany(ids: readonly string[]): Promise<Map<string, GuardedDoc<Stored>>> {
    for (const id of ids) assertId(id);
    const found = new Map<string, GuardedDoc<Stored>>();
    if (ids.length === 0) return found;
    for (const doc of await this.collection.find({ _id: { $in: [...ids] }, ...LIVE }).toArray()) {
      const guard: unknown = doc[GUARD];
      found.set(String(doc._id), { doc: toReadDoc(doc), guard: typeof guard === 'string' ? guard : '' });
    }
    return found;
  }

  /**
   * One ordered bulk write with the guards of `put` and `remove`. A refused upsert (the
   * stored guard is as high: its insert collides on `_id`) stops an ordered bulk write, so
   * then every change is written again one by one: the guards make that harmless.
   */
  async writeMany(changes: ReadonlyArray<DocChange<Stored>>): Promise<void> {
    if (changes.length === 0) return;
    const operations = changes.map((change): AnyBulkWriteOperation<MongoDoc> => {
      if (change.kind === 'remove') {
        assertId(change.id);
        assertGuard(change.guard);
        return { replaceOne: { filter: { ...byId(change.id), [GUARD]: { $lt: change.guard } }, replacement: tombstone(change.guard), upsert: true } };
      }
      const { id, fields } = checkedDocument(change.doc, change.guard);
      const filter = { ...byId(id), [GUARD]: { $lt: change.guard } };
      return { replaceOne: { filter, replacement: { ...fields, [GUARD]: change.guard }, upsert: true } };
    });
    try {
      await this.collection.bulkWrite(operations, { ordered: true });
    } catch (error) {
      if (!isDuplicateKey(error)) throw error;
      for (const change of changes) {
        if (change.kind === 'put') await this.put(change.doc, change.guard);
        else await this.remove(change.id, change.guard);
      }
    }
  }

  async find(query: Query = {}): Promise<Stored[]> {
    if (typeof query !== 'object' || query === null) throw new TypeError('query must be an object');
    const filter = toFilter(query.where);
    const sort = toSort(query.sort ?? []);
    const skip = query.skip === undefined ? 0 : assertCount(query.skip, 'skip');
    const limit = query.limit === undefined ? undefined : assertCount(query.limit, 'limit');
    // MongoDB reads limit 0 as "no limit".
    if (limit === 0) return [];
    let cursor = this.collection.find({ ...filter, ...LIVE }).sort(sort);
    if (skip > 0) cursor = cursor.skip(skip);
    if (limit !== undefined) cursor = cursor.limit(limit);
    const docs = await cursor.toArray();
    return docs.map(toReadDoc);
  }

  async count(where?: Where): Promise<number> {
    return this.collection.countDocuments({ ...toFilter(where), ...LIVE });
  }

  async put(doc: Stored, guard: string): Promise<boolean> {
    const { id, fields } = checkedDocument(doc, guard);
    const replacement: Document = { ...fields, [GUARD]: guard };
    for (let attempt = 1; ; attempt++) {
      try {
        // Matches only a stored document with a lower guard; when the document exists with a
        // guard at least as high, the upsert's insert collides on _id and nothing is written.
        const result = await this.collection.replaceOne({ ...byId(id), [GUARD]: { $lt: guard } }, replacement, { upsert: true });
        return result.matchedCount + result.upsertedCount > 0;
      } catch (error) {
        if (!isDuplicateKey(error) || !isIdCollision(error)) throw error;
        const newerOrSame = await this.collection.countDocuments({ ...byId(id), [GUARD]: { $gte: guard } }, { limit: 1 });
        if (newerOrSame > 0) return false;
        // A write with a lower guard won the race to insert; ours goes on top of it.
        if (attempt >= PUT_ATTEMPTS) throw error;
      }
    }
  }

  async remove(id: string, guard: string): Promise<boolean> {
    assertId(id);
    assertGuard(guard);
    const filter = { ...byId(id), [GUARD]: { $lt: guard } };
    const deleted = await this.collection.replaceOne({ ...filter, ...LIVE }, tombstone(guard));
    if (deleted.matchedCount === 1) return true;
    try {
      // Missing, or a tombstone already: the tombstone's guard moves up to this one.
      await this.collection.replaceOne(filter, tombstone(guard), { upsert: true });
    } catch (error) {
      // Stored with a guard at least as high: nothing to do.
      if (!isDuplicateKey(error)) throw error;
    }
    return false;
  }

  async load(entries: ReadonlyArray<{ readonly doc: Stored; readonly guard: string }>): Promise<void> {
    if (entries.length === 0) return;
    const documents = entries.map(({ doc, guard }): MongoDoc => {
      const { id, fields } = checkedDocument(doc, guard);
      return { ...fields, _id: id, [GUARD]: guard };
    });
    // One command for many documents: what a bulk load is for (and far cheaper than one write each).
    await this.collection.insertMany(documents, { ordered: true });
  }

  async ensureIndex(fields: readonly SortKey[], options?: { readonly unique?: boolean }): Promise<void> {
    const keys = toSort(fields, false);
    if (keys.size === 0) throw new TypeError('an index needs at least one field');
    await this.collection.createIndex(keys, { unique: options?.unique === true });
  }

  async clear(): Promise<void> {
    await this.collection.deleteMany({});
  }
}

/** `id` is checked to be a string first, so it cannot carry an operator; a bare value lets an upsert take it as `_id`. */
function byId(id: string): Filter<MongoDoc> {
  return { _id: id };
}

function tombstone(guard: string): Document {
  return { [DELETED]: true, [GUARD]: guard };
}

function toReadDoc(doc: MongoDoc): Stored {
  const { _id: id, [GUARD]: _guard, ...fields } = doc;
  return { id: String(id), ...fields };
}

// ---------------------------------------------------------------------------------------
// Query translation. Where values are typed by the port, but they may come from parsed
// input: anything that is not a scalar or one of the port's shapes is rejected, so no
// caller-supplied value can become a query operator.

const RANGE_OPERATORS = { gt: '$gt', gte: '$gte', lt: '$lt', lte: '$lte' } as const;

function toFilter(where: Where | undefined): Filter<MongoDoc> {
  if (where === undefined) return {};
  if (!isPlainObject(where)) throw new TypeError('where must be an object');
  const entries: Array<[string, Document]> = [];
  for (const [field, filter] of Object.entries(where)) {
    const path = toPath(field);
    const condition = toCondition(field, filter);
    if (condition !== undefined) entries.push([path, condition]);
  }
  // fromEntries defines own properties, so a field named __proto__ stays a field.
  return Object.fromEntries(entries);
}

function toCondition(field: string, filter: FieldFilter | undefined): Document | undefined {
  if (isScalar(filter)) return { $eq: filter };
  if (!isPlainObject(filter)) throw new TypeError(`filter on "${field}" must be a scalar, {in: [...]} or a range`);
  const values = inFilterValues(field, filter);
  if (values !== undefined) return { $in: values };
  const condition: Record<string, string | number | boolean> = {};
  for (const key of Object.keys(filter)) {
    if (!Object.prototype.hasOwnProperty.call(RANGE_OPERATORS, key)) throw new TypeError(`filter on "${field}": unknown operator "${key}"`);
    const op = RANGE_OPERATORS[key as keyof typeof RANGE_OPERATORS];
    const value: unknown = (filter as Readonly<Record<string, unknown>>)[key];
    if (value === undefined) continue;
    // A null bound is refused: MongoDB's `$gte: null` would match null and absent fields.
    if (value === null || !isScalar(value)) throw new TypeError(`filter on "${field}": "${key}" must be a string, a finite number or a boolean`);
    condition[op] = value;
  }
  return Object.keys(condition).length === 0 ? undefined : condition;
}

/** Sort keys with `_id` as the last tie-break (unless `withIdTieBreak` is false, for index keys). */
function toSort(keys: readonly SortKey[], withIdTieBreak = true): Map<string, 1 | -1> {
  if (!Array.isArray(keys)) throw new TypeError('sort must be an array');
  const sort = new Map<string, 1 | -1>();
  for (const key of keys as readonly unknown[]) {
    if (!isPlainObject(key) || typeof key.field !== 'string' || (key.order !== 'asc' && key.order !== 'desc')) {
      throw new TypeError('a sort key must be {field, order: "asc" | "desc"}');
    }
    const path = toPath(key.field);
    if (!sort.has(path)) sort.set(path, key.order === 'asc' ? 1 : -1);
  }
  if (withIdTieBreak && !sort.has('_id')) sort.set('_id', 1);
  return sort;
}

function toPath(field: string): string {
  if (typeof field !== 'string' || field.length === 0) throw new TypeError('a field name must be a non-empty string');
  if (field === 'id') return '_id';
  const segments = field.split('.');
  const first = segments[0];
  if (first === '_id' || first === GUARD || first === DELETED) throw new TypeError(`field "${field}" is reserved`);
  for (const segment of segments) {
    if (segment.length === 0 || segment.startsWith('$') || segment.includes('\u0000')) throw new TypeError(`invalid field name "${field}"`);
  }
  return field;
}

// ---------------------------------------------------------------------------------------

function isDuplicateKey(error: unknown): boolean {
  return typeof error === 'object' && error !== null && 'code' in error && error.code === 11000;
}

/** Whether a duplicate-key error is about `_id` rather than another unique index. */
function isIdCollision(error: unknown): boolean {
  if (typeof error !== 'object' || error === null) return false;
  if ('keyPattern' in error && isPlainObject(error.keyPattern)) {
    const fields = Object.keys(error.keyPattern);
    return fields.length === 1 && fields[0] === '_id';
  }
  // jongodb sets no keyPattern; its message names the index like MongoDB's does.
  return 'message' in error && typeof error.message === 'string' && / index: _id_ /.test(error.message);
}
