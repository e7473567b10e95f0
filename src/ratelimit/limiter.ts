import type Redis from 'ioredis';
import { RateLimiterRedis, RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import { MemoryWindows, type MonotonicClock } from './memory-windows';

/**
 * Rate limits (interface: Limits; decisions §6): counted in this process's memory in embedded
 * mode (memory-windows.ts), in Redis by `rate-limiter-flexible` (shared by every process) in
 * distributed mode. Both count fixed windows that start at a key's first point.
 */
export const TIERS = [
  'login',
  'refresh',
  'auth',
  'sync',
  'register',
  'heartbeat',
  'general',
  'ops',
  'tunnelMessage',
  'tunnelSubscribe',
  'export',
] as const;
export type Tier = (typeof TIERS)[number];

export interface TierLimit {
  readonly points: number;
  readonly durationSeconds: number;
}

export const DEFAULT_LIMITS: Readonly<Record<Tier, TierLimit>> = {
  login: { points: 5, durationSeconds: 60 },
  refresh: { points: 10, durationSeconds: 60 },
  auth: { points: 5, durationSeconds: 60 },
  sync: { points: 1000, durationSeconds: 60 },
  register: { points: 10, durationSeconds: 3600 },
  heartbeat: { points: 10, durationSeconds: 60 },
  general: { points: 100, durationSeconds: 60 },
  // Health and metrics: probes from load balancers and scrapers poll often.
  ops: { points: 1000, durationSeconds: 60 },
  tunnelMessage: { points: 50, durationSeconds: 10 },
  tunnelSubscribe: { points: 10, durationSeconds: 60 },
  // GET /users/me/export (decisions §11): per user.
  export: { points: 5, durationSeconds: 3600 },
};

export interface Decision {
  readonly allowed: boolean;
  readonly limit: number;
  readonly remaining: number;
  /** Unix seconds when the window resets. */
  readonly resetAt: number;
  /** Whole seconds to wait before trying again (0 when allowed). */
  readonly retryAfter: number;
}

export interface RateLimiter {
  consume(tier: Tier, key: string): Promise<Decision>;
  /** Gives back one point consumed (what turned out not to count); a store error is ignored. */
  refund(tier: Tier, key: string): Promise<void>;
  limitOf(tier: Tier): TierLimit;
}

function decision(limit: TierLimit, res: RateLimiterRes, allowed: boolean, nowMs: number): Decision {
  const msBeforeNext = Math.max(0, res.msBeforeNext);
  return {
    allowed,
    limit: limit.points,
    remaining: allowed ? Math.max(0, res.remainingPoints) : 0,
    resetAt: Math.ceil((nowMs + msBeforeNext) / 1000),
    retryAfter: allowed ? 0 : Math.max(1, Math.ceil(msBeforeNext / 1000)),
  };
}

/** What is answered while the store cannot be asked: allowed, the whole limit left. */
function failOpen(limit: TierLimit, nowMs: number): Decision {
  return { allowed: true, limit: limit.points, remaining: limit.points, resetAt: Math.ceil(nowMs / 1000) + limit.durationSeconds, retryAfter: 0 };
}

/** A store call that has not answered in this long counts as unreachable (the request is let through). */
export const STORE_TIMEOUT_MS = 1000;

class StoreTimeoutError extends Error {
  constructor(ms: number) {
    super(`the rate-limit store did not answer within ${ms} ms`);
    this.name = 'StoreTimeoutError';
  }
}

/** `work`, or a StoreTimeoutError after `ms` (the work itself runs on; its late answer is dropped). */
function within<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new StoreTimeoutError(ms)), ms);
  });
  work.catch(() => undefined);
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}

/** How a store that may stall is guarded. */
export interface StoreGuard {
  /** A call not answered in this long lets its request through. */
  readonly timeoutMs: number;
  /** After such a timeout, requests are let through at once, without asking the store, for this long. */
  readonly pauseMs: number;
}

export const DEFAULT_STORE_GUARD: StoreGuard = { timeoutMs: STORE_TIMEOUT_MS, pauseMs: 5000 };

class StorePausedError extends Error {
  constructor() {
    super('the rate-limit store timed out recently: not asked for now');
    this.name = 'StorePausedError';
  }
}

function build(
  limits: Readonly<Record<Tier, TierLimit>>,
  make: (tier: Tier, limit: TierLimit) => RateLimiterAbstract,
  onStoreError: (tier: Tier, error: Error) => void,
  guard: StoreGuard,
): RateLimiter {
  const limiters = new Map<Tier, RateLimiterAbstract>(TIERS.map((tier) => [tier, make(tier, limits[tier])]));
  // A stalled store would add the whole timeout to every request and pile calls up behind it.
  // On the monotonic clock: a wall clock stepped back does not stretch the pause.
  let pausedUntil = 0;
  /** The store did not answer, or failed: fail open — keep answering — and say so. */
  const storeFailed = (tier: Tier, rejection: unknown, now: number): Decision => {
    if (rejection instanceof StoreTimeoutError) pausedUntil = performance.now() + guard.pauseMs;
    onStoreError(tier, rejection instanceof Error ? rejection : new Error(String(rejection)));
    return failOpen(limits[tier], now);
  };
  return {
    limitOf: (tier) => limits[tier],
    async refund(tier, key) {
      if (performance.now() < pausedUntil) return;
      const limiter = limiters.get(tier) as RateLimiterAbstract;
      try {
        await within(limiter.reward(key, 1), guard.timeoutMs);
      } catch (rejection) {
        onStoreError(tier, rejection instanceof Error ? rejection : new Error(String(rejection)));
      }
    },
    async consume(tier, key) {
      const limit = limits[tier];
      const limiter = limiters.get(tier) as RateLimiterAbstract;
      const now = Date.now();
      try {
        if (performance.now() < pausedUntil) throw new StorePausedError();
        return decision(limit, await within(limiter.consume(key, 1), guard.timeoutMs), true, now);
      } catch (rejection) {
        if (rejection instanceof RateLimiterRes) return decision(limit, rejection, false, now);
        return storeFailed(tier, rejection, now);
      }
    },
  };
}

/**
 * Counters in this process's memory (embedded mode): a fixed window per tier and key
 * (src/ratelimit/memory-windows.ts), answered without waiting for anything.
 */
export function createMemoryRateLimiter(limits: Readonly<Record<Tier, TierLimit>> = DEFAULT_LIMITS, now?: MonotonicClock): RateLimiter {
  const windows = new Map<Tier, MemoryWindows>(TIERS.map((tier) => [tier, new MemoryWindows(limits[tier].durationSeconds * 1000, now)]));
  const windowsOf = (tier: Tier): MemoryWindows => windows.get(tier) as MemoryWindows;
  return {
    limitOf: (tier) => limits[tier],
    refund(tier, key) {
      windowsOf(tier).refund(key);
      return Promise.resolve();
    },
    consume(tier, key) {
      const limit = limits[tier];
      const counted = windowsOf(tier).consume(key);
      const allowed = counted.points <= limit.points;
      return Promise.resolve({
        allowed,
        limit: limit.points,
        remaining: allowed ? limit.points - counted.points : 0,
        resetAt: Math.ceil((Date.now() + counted.msLeft) / 1000),
        retryAfter: allowed ? 0 : Math.max(1, Math.ceil(counted.msLeft / 1000)),
      });
    },
  };
}

/**
 * Counters in Redis. When Redis is not ready the call does not queue behind the
 * reconnection: it fails at once and the request is let through (fail open). A call that
 * was on its way when the connection dropped (queued again until Redis is back), or that a
 * stalled Redis does not answer, is let through after `guard.timeoutMs`; then Redis is not
 * asked for `guard.pauseMs`, every request let through at once.
 */
export function createRedisRateLimiter(
  redis: Redis,
  limits: Readonly<Record<Tier, TierLimit>>,
  onStoreError: (tier: Tier, error: Error) => void,
  guard: StoreGuard = DEFAULT_STORE_GUARD,
): RateLimiter {
  return build(
    limits,
    (tier, limit) =>
      new RateLimiterRedis({
        storeClient: redis,
        keyPrefix: `hhc:rl:${tier}`,
        points: limit.points,
        duration: limit.durationSeconds,
        rejectIfRedisNotReady: true,
      }),
    onStoreError,
    guard,
  );
}

/** Parses `RATE_LIMITS` overrides: `login=5/60,general=100/60` (points/seconds). */
export function parseRateLimits(spec: string | undefined): Record<Tier, TierLimit> {
  const limits: Record<Tier, TierLimit> = { ...DEFAULT_LIMITS };
  if (spec === undefined || spec.trim() === '') return limits;
  for (const part of spec.split(',')) {
    const match = /^\s*([A-Za-z]+)\s*=\s*(\d+)\s*\/\s*(\d+)\s*$/.exec(part);
    const tier = match?.[1];
    if (match === null || tier === undefined || !(TIERS as readonly string[]).includes(tier)) {
      throw new Error(`"${part.trim()}" is not tier=points/seconds with a tier of ${TIERS.join(', ')}`);
    }
    const points = Number(match[2]);
    const durationSeconds = Number(match[3]);
    if (points < 1 || durationSeconds < 1) throw new Error(`"${part.trim()}" needs at least 1 point and 1 second`);
    limits[tier as Tier] = { points, durationSeconds };
  }
  return limits;
}
