import { isPlainObject } from './checks';

/**
 * The form in which the memory read store keeps a document: a JSON-shaped deep copy,
 * frozen, so reads can hand out the stored object itself and no caller can change it.
 */

/**
 * Values this store has copied and deep-frozen. A document written again after a small
 * change (a heartbeat moving `lastSeenAt`) mostly holds such values, handed out by `get`
 * and spread into the new version: they are shared as they are, not copied again.
 */
const deepFrozen = new WeakSet<object>();

const INVALID: unique symbol = Symbol('invalid');

/** A JSON-shaped deep copy, frozen; undefined properties are dropped (array slots become null), as the MongoDB adapter stores them. */
export function frozenCopy(value: unknown, where: string): unknown {
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
