import { assertCount, inFilterValues, isPlainObject, isScalar } from './checks';
import type { FieldFilter, Query, ReadDoc, Scalar, SortKey, Where } from './port';

/**
 * The memory read store's query language, with MongoDB's semantics (see memory.ts):
 * `where` filters compiled into conditions, sort keys, field paths and their getters, the
 * matching of a document, and the order of values (comparisons).
 */

/** A document as the store holds it: deep-copied and frozen (see frozen-copy.ts). */
export type Stored = Readonly<Record<string, unknown>> & ReadDoc;
type Path = readonly string[];

// ---------------------------------------------------------------------------------------
// Compiling filters and sort keys

/** A where entry, compiled: `read` takes the field's value out of a document, `test` decides on it. */
export interface Condition {
  readonly field: string;
  readonly read: Getter;
  readonly test: (value: unknown) => boolean;
  /** The values an equality index can look up (for equality and `in`). */
  readonly lookup?: readonly Scalar[];
}

export type CompiledWhere = readonly Condition[];
export type Getter = (doc: unknown) => unknown;

interface Bound {
  readonly op: 'gt' | 'gte' | 'lt' | 'lte';
  readonly value: string | number | boolean;
}

export interface ParsedSortKey {
  readonly field: string;
  readonly read: Getter;
  readonly direction: 1 | -1;
}

const RANGE_OPERATORS = ['gt', 'gte', 'lt', 'lte'] as const;

export function parseQuery(query: Query): { where: CompiledWhere; sort: readonly ParsedSortKey[]; skip: number; limit: number | undefined } {
  if (typeof query !== 'object' || query === null) throw new TypeError('query must be an object');
  return {
    where: compileWhere(query.where),
    sort: parseSort(query.sort ?? []),
    skip: query.skip === undefined ? 0 : assertCount(query.skip, 'skip'),
    limit: query.limit === undefined ? undefined : assertCount(query.limit, 'limit'),
  };
}

export function compileWhere(where: Where | undefined): CompiledWhere {
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
  const values = inFilterValues(field, filter);
  if (values !== undefined) {
    const set = new Set<unknown>(values);
    const matchesAbsent = set.has(null);
    const test = (value: unknown): boolean =>
      Array.isArray(value) ? value.some((element) => set.has(element)) : set.has(value) || (matchesAbsent && value === undefined);
    return { field, read, test, lookup: values };
  }
  const bounds: Bound[] = [];
  for (const key of Object.keys(filter)) {
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

export function parseSort(keys: readonly SortKey[]): ParsedSortKey[] {
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

// ---------------------------------------------------------------------------------------
// Matching

export function matchesAll(where: CompiledWhere, doc: Stored): boolean {
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

// ---------------------------------------------------------------------------------------
// Order of values

function compareScalars(a: string | number | boolean, b: string | number | boolean): number {
  if (typeof a === 'string' && typeof b === 'string') return compareStrings(a, b);
  return a < b ? -1 : a > b ? 1 : 0;
}

/**
 * Code point order, which is MongoDB's (UTF-8 byte) order. It differs from JavaScript's
 * UTF-16 `<` only when a surrogate half meets a code unit in U+E000..U+FFFF.
 */
export function compareStrings(a: string, b: string): number {
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

export function compareForSort(a: unknown, b: unknown): number {
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


// ---------------------------------------------------------------------------------------
// Fields

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


function isRangeBound(value: unknown): value is string | number | boolean {
  return value !== null && isScalar(value);
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
