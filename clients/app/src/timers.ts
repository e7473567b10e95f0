/** The clock and timers the client schedules with; tests pass a manual one. */
export interface Timers {
  now(): number;
  /** Runs `fire` after `ms`; the returned function cancels it. */
  after(ms: number, fire: () => void): () => void;
}

export const realTimers: Timers = {
  now: () => Date.now(),
  after: (ms, fire) => {
    const handle = setTimeout(fire, Math.max(0, Math.min(ms, 2 ** 31 - 1)));
    return () => clearTimeout(handle);
  },
};

export interface BackoffOptions {
  /** First ceiling, ms (default 1000). */
  readonly baseMs?: number;
  /** Largest ceiling, ms (default 10000). */
  readonly capMs?: number;
}

export const DEFAULT_BACKOFF = { baseMs: 1000, capMs: 10_000 } as const;

/**
 * Exponential backoff with full jitter: attempt n (from 0) waits a uniform random time in
 * [0, min(cap, base * 2^n)), so a fleet that lost the service at the same instant comes back
 * spread out instead of all at once.
 */
export function backoffDelay(attempt: number, options: BackoffOptions, random: () => number): number {
  const base = options.baseMs ?? DEFAULT_BACKOFF.baseMs;
  const cap = options.capMs ?? DEFAULT_BACKOFF.capMs;
  const ceiling = Math.min(cap, base * 2 ** Math.min(attempt, 30));
  return Math.floor(random() * ceiling);
}

/**
 * A wait the service asked for (`retryAfter` whole seconds): never shorter, and spread over
 * the second after it, so the clients told the same second do not return at its first
 * millisecond (the service already gives the clients it refuses together different seconds).
 */
export function retryAfterDelay(retryAfterSeconds: number, random: () => number): number {
  return Math.ceil(Math.max(0, retryAfterSeconds) * 1000 + random() * 1000);
}
