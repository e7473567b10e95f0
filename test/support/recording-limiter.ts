import { DEFAULT_LIMITS, type Decision, type RateLimiter, type Tier } from '../../src/ratelimit/limiter';

/**
 * A limiter that allows everything and records the counter names it is given, in order:
 * `consume` as the name, `refund` as `refund <name>`.
 */
export function recordingLimiter(): { limiter: RateLimiter; names: string[] } {
  const names: string[] = [];
  const decision: Decision = { allowed: true, limit: 10, remaining: 9, resetAt: 0, retryAfter: 0 };
  return {
    names,
    limiter: {
      consume: async (_tier: Tier, key: string) => {
        names.push(key);
        return decision;
      },
      refund: async (_tier: Tier, key: string) => {
        names.push(`refund ${key}`);
      },
      limitOf: (tier: Tier) => DEFAULT_LIMITS[tier],
    },
  };
}
