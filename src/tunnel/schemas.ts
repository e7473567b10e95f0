import { z } from 'zod';
import { deviceUuid } from '../api/schemas/devices';
import { TUNNEL_MESSAGE_MAX_BYTES } from './events';

/**
 * Schemas of what apps and devices send. Anything that fails them is answered with
 * `INVALID_PAYLOAD`; unknown keys are dropped, never relayed.
 */

const messageType = z.string().min(1).max(100);
const messageId = z.string().min(1).max(128);
/** Any value; absent relays as null. */
const payload = z.unknown();

export const subscribeRequest = z.object({ deviceUuid });

export const appMessage = z.object({
  deviceUuid,
  id: messageId.optional(),
  type: messageType,
  payload,
});

export const deviceMessage = z.object({
  id: messageId.optional(),
  to: deviceUuid.optional(),
  replyTo: messageId.optional(),
  type: messageType,
  payload,
});

export type SubscribeInput = z.infer<typeof subscribeRequest>;
export type AppMessageInput = z.infer<typeof appMessage>;
export type DeviceMessageInput = z.infer<typeof deviceMessage>;

/** Deeper than this is refused, so no walk over a message can exhaust the stack. */
const MAX_DEPTH = 32;

/**
 * UTF-8 bytes of a string as JSON writes it, quotes and escapes included (`"` and `\\` take
 * two bytes, control characters and lone surrogates six), or -1 once it is certainly over
 * `budget`: a string longer than the budget needs no exact count (at least one byte each).
 */
function jsonStringBytes(text: string, budget: number): number {
  if (text.length + 2 > budget) return -1;
  return Buffer.byteLength(JSON.stringify(text), 'utf8');
}

/** What is left of `budget` after `node`, or -1 once it is certainly over (or too deep). */
function remainingAfter(node: unknown, budget: number, depth: number): number {
  if (depth > MAX_DEPTH) return -1;
  if (node === null || node === undefined) return budget - 4;
  switch (typeof node) {
    case 'string': {
      const bytes = jsonStringBytes(node, budget);
      return bytes < 0 ? -1 : budget - bytes;
    }
    case 'number':
    case 'boolean':
    case 'bigint':
      return budget - String(node).length;
    case 'object':
      break;
    default:
      return budget;
  }
  if (node instanceof ArrayBuffer || ArrayBuffer.isView(node)) return budget - node.byteLength;
  // Brackets, then a comma before every item but the first.
  let left = budget - 2;
  let separator = 0;
  if (Array.isArray(node)) {
    for (const item of node) {
      left = remainingAfter(item, left - separator, depth + 1);
      if (left < 0) return -1;
      separator = 1;
    }
    return left;
  }
  for (const key in node) {
    if (!Object.prototype.hasOwnProperty.call(node, key)) continue;
    const keyBytes = jsonStringBytes(key, left);
    if (keyBytes < 0) return -1;
    // The key, its colon and the separator before it.
    left = remainingAfter((node as Record<string, unknown>)[key], left - separator - keyBytes - 1, depth + 1);
    if (left < 0) return -1;
    separator = 1;
  }
  return left;
}

/**
 * Whether a value would serialize to more than `limit` bytes of UTF-8 JSON (binary parts count
 * their byte length), or nests deeper than MAX_DEPTH. Stops as soon as either is certain,
 * so a huge value costs no more than the limit to look at.
 */
export function exceedsSize(value: unknown, limit: number = TUNNEL_MESSAGE_MAX_BYTES): boolean {
  return remainingAfter(value, limit, 0) < 0;
}
