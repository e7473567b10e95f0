import { randomUUID } from 'node:crypto';
import type Redis from 'ioredis';

/**
 * One active projector at a time (decisions §1): whoever holds the lease key in Redis
 * projects; the others stand by and try again.
 *
 * What makes "one at a time" hold when a holder is cut off from Redis rather than dead:
 * - every Redis call of the lease has a deadline shorter than the lease (a call to an
 *   unreachable Redis would otherwise wait for ever: the connection retries without limit);
 * - the holder counts the lease as its own only until the time its last successful
 *   acquisition or renewal was *sent* plus the lease time, less a margin: Redis cannot let
 *   the key expire before that, so the holder stops applying before anyone else can hold it;
 * - each acquisition draws a new epoch (a fencing token, growing even across a Redis that
 *   lost its data), which the projector writes with its checkpoint: the store refuses a
 *   checkpoint from an older epoch, so a write that was on its way when the lease passed on
 *   changes nothing (src/infra/readstore/port.ts, `advanceCheckpoint`).
 */
export interface Lease {
  readonly owner: string;
  /** How often a process that does not hold the lease bids for it (and a holder renews it). */
  readonly bidEveryMs: number;
  /** Resolves once this process holds the lease. */
  acquire(signal?: AbortSignal): Promise<void>;
  /** Resolves when the lease is lost (taken, refused, or not renewed in time). */
  readonly lost: () => Promise<void>;
  release(): Promise<void>;
  /** Held, and certainly so: before the local deadline of the last renewal. */
  isHeld(): boolean;
  /** The epoch of the current tenure (null when not held): the fencing token of its writes. */
  epoch(): number | null;
  /** Until when (ms since the epoch) the current or last tenure was certainly held: nothing is applied after it. */
  heldUntil(): number;
}

export interface LeaseOptions {
  /** A Redis call that has not answered by then counts as failed (default: a third of the lease). */
  readonly callTimeoutMs?: number;
  readonly now?: () => number;
}

/** Sets the key when free, and draws an epoch above every earlier one: Redis's clock in microseconds, or the last epoch + 1. */
const ACQUIRE = `
if not redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX') then return 0 end
local t = redis.call('TIME')
local epoch = tonumber(t[1]) * 1000000 + tonumber(t[2])
local last = tonumber(redis.call('get', KEYS[2]) or '0')
if last >= epoch then epoch = last + 1 end
local text = string.format('%.0f', epoch)
redis.call('set', KEYS[2], text)
return text
`;
const RENEW = `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end`;
const RELEASE = `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end`;

/** Waits `ms`, or less when `signal` aborts; leaves no listener behind either way. */
export function delay(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}

export class LeaseCallTimeout extends Error {
  constructor(ms: number) {
    super(`lease: Redis did not answer within ${ms} ms`);
  }
}

/** The call's answer, or a rejection once `ms` have passed (the call itself may still complete later). */
export function withDeadline<T>(call: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new LeaseCallTimeout(ms)), ms);
    timer.unref();
    call.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        clearTimeout(timer);
        reject(error instanceof Error ? error : new Error(String(error)));
      },
    );
  });
}

export function createRedisLease(redis: Redis, key: string, ttlMs: number, options: LeaseOptions = {}): Lease {
  const owner = randomUUID();
  const now = options.now ?? Date.now;
  const every = Math.max(50, Math.floor(ttlMs / 3));
  const callTimeoutMs = Math.min(options.callTimeoutMs ?? every, every);
  // Clocks of one machine run alike; the margin covers timer lateness, not clock drift between hosts.
  const margin = Math.max(10, Math.floor(ttlMs / 10));
  const epochKey = `${key}:epoch`;
  let held = false;
  let currentEpoch: number | null = null;
  /** Until when the lease is certainly ours: sent time of the last acquisition or renewal + ttl - margin. */
  let validUntil = 0;
  let renewTimer: NodeJS.Timeout | undefined;
  let expiryTimer: NodeJS.Timeout | undefined;
  let renewing = false;
  let onLost: (() => void) | undefined;
  let lostPromise: Promise<void> = new Promise((resolve) => (onLost = resolve));

  const markLost = (): void => {
    if (!held) return;
    held = false;
    currentEpoch = null;
    validUntil = Math.min(validUntil, now());
    if (renewTimer !== undefined) clearInterval(renewTimer);
    if (expiryTimer !== undefined) clearTimeout(expiryTimer);
    renewTimer = undefined;
    expiryTimer = undefined;
    onLost?.();
  };

  /** Stops at the local deadline unless a renewal moves it first. */
  const armExpiry = (): void => {
    if (expiryTimer !== undefined) clearTimeout(expiryTimer);
    expiryTimer = setTimeout(() => {
      if (now() >= validUntil) markLost();
      else armExpiry();
    }, Math.max(0, validUntil - now()));
    expiryTimer.unref();
  };

  const renew = (): void => {
    if (renewing || !held) return;
    renewing = true;
    const sentAt = now();
    withDeadline(redis.eval(RENEW, 1, key, owner, String(ttlMs)), callTimeoutMs)
      .then((result) => {
        if (result !== 1) return markLost();
        if (!held) return;
        validUntil = Math.max(validUntil, sentAt + ttlMs - margin);
        armExpiry();
      })
      // No answer in time, or an error: still ours until the deadline; the next renewal may get through.
      .catch(() => undefined)
      .finally(() => (renewing = false));
  };

  return {
    owner,
    bidEveryMs: every,
    isHeld: () => held && now() < validUntil,
    epoch: () => (held && now() < validUntil ? currentEpoch : null),
    heldUntil: () => validUntil,
    lost: () => lostPromise,
    async acquire(signal) {
      for (;;) {
        if (signal?.aborted) throw new Error('Lease acquisition aborted');
        const sentAt = now();
        try {
          const answer = await withDeadline(redis.eval(ACQUIRE, 2, key, epochKey, owner, String(ttlMs)), callTimeoutMs);
          const epoch = Number(answer);
          if (answer !== 0 && Number.isSafeInteger(epoch) && epoch > 0) {
            held = true;
            currentEpoch = epoch;
            validUntil = sentAt + ttlMs - margin;
            lostPromise = new Promise((resolve) => (onLost = resolve));
            renewTimer = setInterval(renew, every);
            renewTimer.unref();
            armExpiry();
            return;
          }
        } catch {
          // Redis unreachable or slow: keep standing by. (A SET that took effect unanswered expires by itself.)
        }
        await delay(every, signal);
      }
    },
    async release() {
      const wasHeld = held;
      markLost();
      if (wasHeld) await withDeadline(redis.eval(RELEASE, 1, key, owner), callTimeoutMs).catch(() => undefined);
    },
  };
}
