import { randomUUID } from 'node:crypto';
import type Redis from 'ioredis';
import { OneAtATime, type KeyedSerializer } from './one-at-a-time';

/**
 * Work run one at a time per key across every API process (distributed mode): a lease in Redis
 * (`SET key token NX PX`), taken before the work and given back after it (only by its holder).
 * Within a process the work queues first (OneAtATime), so a process asks Redis for a key's
 * lease once at a time.
 *
 * What it guards is a limit (a user's devices), not safety: when Redis does not answer within
 * `callTimeoutMs` (it is then not asked for `pauseMs`), or the lease is not had within
 * `waitMs`, the work runs without it (as the rate limits fail open); a lease outlived by its
 * work (`leaseMs`: a process killed while holding it) lets the next one in.
 */
export interface RedisLeaseOptions {
  /** How long a lease lasts unless given back. */
  readonly leaseMs: number;
  /** How long to wait for a lease held by another process. */
  readonly waitMs: number;
  /** A Redis call not answered in this long counts as Redis not there... */
  readonly callTimeoutMs: number;
  /** ...and Redis is then not asked for this long: the work that comes meanwhile runs at once, without a lease. */
  readonly pauseMs: number;
}

export const DEFAULT_LEASE_OPTIONS: RedisLeaseOptions = { leaseMs: 10_000, waitMs: 10_000, callTimeoutMs: 500, pauseMs: 5_000 };

/** Deletes the lease only if it is still the caller's. */
const GIVE_BACK = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** What a Redis call that failed or did not answer in time gives. */
const NO_ANSWER = Symbol('no answer');

/** `call`'s answer, or NO_ANSWER when it fails or does not answer within `ms`. */
async function answered<T>(call: Promise<T>, ms: number): Promise<T | typeof NO_ANSWER> {
  let timer: NodeJS.Timeout | undefined;
  call.catch(() => undefined);
  try {
    return await Promise.race([call, new Promise<typeof NO_ANSWER>((resolve) => (timer = setTimeout(() => resolve(NO_ANSWER), ms)))]);
  } catch {
    return NO_ANSWER;
  } finally {
    clearTimeout(timer);
  }
}

export function redisOneAtATime(redis: Redis, name: string, options: RedisLeaseOptions = DEFAULT_LEASE_OPTIONS, onUnguarded?: (key: string, why: string) => void): KeyedSerializer {
  const local = new OneAtATime();
  // On the monotonic clock (a wall clock stepped back does not stretch it).
  let pausedUntil = 0;
  const take = async (lease: string, token: string): Promise<boolean> => {
    if (performance.now() < pausedUntil) return false;
    const deadline = performance.now() + options.waitMs;
    for (let attempt = 0; ; attempt++) {
      const call = redis.set(lease, token, 'PX', options.leaseMs, 'NX');
      const reply = await answered(call, options.callTimeoutMs);
      if (reply === 'OK') return true;
      if (reply === NO_ANSWER) {
        // Redis not there: unguarded, and not asked for a while. If the call is carried out
        // later (Redis stalled, not gone), the lease it takes is given back at once.
        pausedUntil = performance.now() + options.pauseMs;
        call.then((late) => (late === 'OK' ? redis.eval(GIVE_BACK, 1, lease, token) : null)).catch(() => undefined);
        return false;
      }
      // null: another holds the lease.
      if (performance.now() >= deadline) return false;
      await sleep(10 + Math.random() * Math.min(100, 10 * 2 ** Math.min(attempt, 4)));
    }
  };
  return {
    run: (key, work) =>
      local.run(key, async () => {
        const lease = `hhc:lease:${name}:${key}`;
        const token = randomUUID();
        const held = await take(lease, token);
        if (!held) onUnguarded?.(key, 'no lease within the wait, or Redis did not answer');
        try {
          return await work();
        } finally {
          if (held) await answered(redis.eval(GIVE_BACK, 1, lease, token), options.callTimeoutMs);
        }
      }),
  };
}
