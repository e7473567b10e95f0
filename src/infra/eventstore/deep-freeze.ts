/**
 * Events read from the log are shared among their readers (the embedded log decodes a record
 * once for every subscription and stream read; the private store opens a box once while its
 * key is held). They are deep-frozen once, where they are decoded or opened, so no reader can
 * change what another one is handed: a change throws (strict mode), and a reader that needs
 * another shape builds its own copy.
 */

/** `value` with every object and array in it frozen (an object already frozen is taken as frozen through). */
export function deepFreeze<T>(value: T): T {
  if (typeof value !== 'object' || value === null || Object.isFrozen(value) || ArrayBuffer.isView(value)) return value;
  Object.freeze(value);
  if (Array.isArray(value)) {
    for (const element of value as unknown[]) deepFreeze(element);
  } else {
    for (const key of Object.keys(value)) deepFreeze((value as Record<string, unknown>)[key]);
  }
  return value;
}
