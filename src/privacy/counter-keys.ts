import type { RateLimiter } from '../ratelimit/limiter';
import { keyedHash } from './crypto';

/**
 * A rate limiter whose counters kept by client IP (`ip:<address>`) are named by a keyed
 * hash, so the counters' store (Redis) never holds a client's address (decisions §11).
 */
export function withKeyedCounters(limiter: RateLimiter, key: Buffer): RateLimiter {
  const named = (counter: string): string => (counter.startsWith('ip:') ? `iph:${keyedHash(key, counter).slice(0, 32)}` : counter);
  const { refund } = limiter;
  return {
    consume: (tier, counter) => limiter.consume(tier, named(counter)),
    limitOf: (tier) => limiter.limitOf(tier),
    // Every method of the limiter passes through under the same name (a refund that missed the
    // wrapper counted successful tunnel handshakes against their IP).
    ...(refund !== undefined ? { refund: (tier: Parameters<typeof refund>[0], counter: string) => refund.call(limiter, tier, named(counter)) } : {}),
  };
}
