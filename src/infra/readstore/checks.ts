import type { Scalar } from './port';

/**
 * Argument checks and value tests both read stores share (memory.ts and mongo.ts), so that
 * they reject the same names, ids, guards and counts with the same errors.
 */

export function isScalar(value: unknown): value is Scalar {
  return value === null || typeof value === 'string' || typeof value === 'boolean' || (typeof value === 'number' && Number.isFinite(value));
}

export function isPlainObject(value: unknown): value is Readonly<Record<string, unknown>> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const prototype: unknown = Object.getPrototypeOf(value);
  return prototype === Object.prototype || prototype === null;
}

/**
 * The values of an `{in: [...]}` filter on `field`, checked alike in both stores; undefined
 * when the filter is not an `in` (then it is a range).
 */
export function inFilterValues(field: string, filter: Readonly<Record<string, unknown>>): readonly Scalar[] | undefined {
  if (!('in' in filter)) return undefined;
  if (Object.keys(filter).length !== 1) throw new TypeError(`filter on "${field}": "in" cannot be combined with other operators`);
  const values: unknown = filter.in;
  if (!Array.isArray(values) || !values.every(isScalar)) throw new TypeError(`filter on "${field}": "in" must be an array of scalars`);
  return values;
}

export function assertName(name: string, what: string): void {
  if (typeof name !== 'string' || name.length === 0 || name.includes('$') || name.includes('\u0000')) {
    throw new TypeError(`invalid ${what} "${String(name)}"`);
  }
}

export function assertId(id: unknown, what = 'id'): asserts id is string {
  if (typeof id !== 'string' || id.length === 0) throw new TypeError(`${what} must be a non-empty string`);
}

export function assertGuard(guard: unknown): asserts guard is string {
  if (typeof guard !== 'string') throw new TypeError('guard must be a string');
}

export function assertCount(value: unknown, what: string): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) throw new RangeError(`${what} must be a non-negative integer`);
  return value;
}
