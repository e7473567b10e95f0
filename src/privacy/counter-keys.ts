import type { RateLimiter } from '../ratelimit/limiter';
import { keyedHash } from './crypto';

/** How many client addresses' counter names are kept. */
const NAMES_KEPT = 10_000;

/** A rate limiter whose counter names can be forgotten (`withKeyedCounters`). */
export interface KeyedCounters extends RateLimiter {
  /** Forgets every address whose counter name is kept (an erasure: a session's address is personal data). */
  forgetAddresses(): void;
}

/**
 * A rate limiter whose counters kept by client IP (`ip:<address>`) are named by a keyed
 * hash, so the counters' store (Redis, or embedded mode's memory) never holds a client's
 * address (decisions §11).
 */
export function withKeyedCounters(limiter: RateLimiter, key: Buffer): KeyedCounters {
  // The names of the addresses seen last, so that a client's requests do not each compute an
  // HMAC (in memory only, as the requests themselves; bounded). They hold the addresses: an
  // erasure empties them (`forgetAddresses`), since its person's sessions' addresses may be here.
  const names = new Map<string, string>();
  const named = (counter: string): string => {
    if (!counter.startsWith('ip:')) return counter;
    let name = names.get(counter);
    if (name === undefined) {
      name = `iph:${keyedHash(key, counter).slice(0, 32)}`;
      names.set(counter, name);
      if (names.size > NAMES_KEPT) names.delete(names.keys().next().value as string);
    }
    return name;
  };
  return {
    consume: (tier, counter) => limiter.consume(tier, named(counter)),
    limitOf: (tier) => limiter.limitOf(tier),
    // Every method of the limiter passes through under the same name, and the interface requires
    // each: a refund that missed the wrapper counted successful tunnel handshakes against their IP.
    refund: (tier, counter) => limiter.refund(tier, named(counter)),
    forgetAddresses: () => names.clear(),
  };
}
