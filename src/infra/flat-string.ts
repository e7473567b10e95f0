/**
 * `a + b` and template literals make a rope in V8: an object of its own (32 bytes) for each
 * `+`, holding on to both parts. A string made per request but kept for long (a map key, a field
 * of a stored document) costs less made flat: its characters only, none of the parts kept. The
 * text is the same either way.
 */

/**
 * `parts` joined into one flat string (V8 joins an array's strings into one flat string; given
 * two parts or more, never a rope).
 */
export function flatJoin(first: string, second: string, ...rest: string[]): string {
  return [first, second, ...rest].join('');
}
