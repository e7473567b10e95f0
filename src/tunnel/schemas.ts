import { z } from 'zod';
import { deviceUuid } from '../api/schemas/devices';
import { TUNNEL_MESSAGE_MAX_BYTES } from './events';

/**
 * Schemas of what apps and devices send. Anything that fails them is answered with
 * `INVALID_PAYLOAD`; unknown keys are dropped, never relayed.
 */

const messageType = z.string().min(1).max(100);
const messageId = z.string().min(1).max(128);
/** Absent and null both relay as null. */
const payload = z.unknown().transform((value) => value ?? null);

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
 * Whether a value would serialize to more than `limit` bytes of JSON (binary parts count
 * their byte length), or nests deeper than MAX_DEPTH. Stops as soon as either is certain,
 * so a huge value costs no more than the limit to look at.
 */
export function exceedsSize(value: unknown, limit: number = TUNNEL_MESSAGE_MAX_BYTES): boolean {
  let budget = limit;
  const walk = (node: unknown, depth: number): boolean => {
    if (depth > MAX_DEPTH) return true;
    if (node === null || node === undefined) budget -= 4;
    else if (typeof node === 'string') budget -= node.length > budget ? node.length : Buffer.byteLength(node, 'utf8') + 2;
    else if (typeof node === 'number' || typeof node === 'boolean' || typeof node === 'bigint') budget -= 8;
    else if (node instanceof ArrayBuffer) budget -= node.byteLength;
    else if (ArrayBuffer.isView(node)) budget -= node.byteLength;
    else if (Array.isArray(node)) {
      budget -= 2;
      for (const item of node) {
        if (budget < 0 || walk(item, depth + 1)) return true;
        budget -= 1;
      }
    } else if (typeof node === 'object') {
      budget -= 2;
      for (const key in node) {
        if (!Object.prototype.hasOwnProperty.call(node, key)) continue;
        budget -= key.length + 4;
        if (budget < 0 || walk((node as Record<string, unknown>)[key], depth + 1)) return true;
      }
    }
    return budget < 0;
  };
  return walk(value, 0);
}
