import type { RateLimiter } from '../ratelimit/limiter';
import { keyedHash } from './crypto';

/**
 * A rate limiter whose counters kept by client IP (`ip:<address>`) are named by a keyed
 * hash, so the counters' store (Redis) never holds a client's address (decisions §11).
 */
export function withKeyedCounters(limiter: RateLimiter, key: Buffer): RateLimiter {
  return {
    consume: (tier, counter) => limiter.consume(tier, counter.startsWith('ip:') ? `iph:${keyedHash(key, counter).slice(0, 32)}` : counter),
    limitOf: (tier) => limiter.limitOf(tier),
  };
}
