import type { Decision, RateLimiter } from '../../src/ratelimit/limiter';
import { handshakeLimiterFrom } from '../../src/tunnel/handshake-limit';

/**
 * The addresses a process remembers as past their limit of failed handshakes are personal data
 * (decisions §11: a session's IP address): none is kept long past its refusal, and all go with
 * an erasure (`forgetAddresses`, called on every revocation the process applies).
 */

/** A store that refuses the addresses in `refused` for `retryAfter` seconds and allows the others. */
function store(refused: ReadonlyMap<string, number>): RateLimiter {
  const answer = (key: string): Decision => {
    const retryAfter = refused.get(key.slice('ip:'.length));
    return retryAfter === undefined
      ? { allowed: true, limit: 5, remaining: 4, resetAt: 0, retryAfter: 0 }
      : { allowed: false, limit: 5, remaining: 0, resetAt: 0, retryAfter };
  };
  return { consume: async (_tier, key) => answer(key), refund: async () => undefined, limitOf: () => ({ points: 5, durationSeconds: 60 }) };
}

test('an address whose refusal has ended is let go at the next handshake of any address, not kept until its own comes again', async () => {
  let clock = 0;
  const limiter = handshakeLimiterFrom(store(new Map([['10.0.0.1', 10], ['10.0.0.2', 20]])), undefined, () => clock);
  expect((await limiter.admit('10.0.0.1')).allowed).toBe(false);
  expect((await limiter.admit('10.0.0.2')).allowed).toBe(false);
  expect(limiter.remembered()).toBe(2);
  expect(limiter.check('10.0.0.1')).toEqual({ allowed: false, retryAfter: 10 });
  // Past the first refusal: another address's handshake lets it go, the second is kept.
  clock = 10_001;
  expect(limiter.check('192.0.2.7').allowed).toBe(true);
  expect(limiter.remembered()).toBe(1);
  expect(limiter.check('10.0.0.2')).toEqual({ allowed: false, retryAfter: 10 });
  clock = 20_001;
  expect((await limiter.admit('192.0.2.8')).allowed).toBe(true);
  expect(limiter.remembered()).toBe(0);
});

test('forgetAddresses forgets every address remembered; the store decides again at the next handshake', async () => {
  const limiter = handshakeLimiterFrom(store(new Map([['10.0.0.1', 30]])), undefined, () => 0);
  expect((await limiter.admit('10.0.0.1')).allowed).toBe(false);
  expect(limiter.check('10.0.0.1').allowed).toBe(false);
  limiter.forgetAddresses?.();
  expect(limiter.remembered()).toBe(0);
  // Nothing remembered: `check` lets it through, and `admit` asks the store, which still refuses.
  expect(limiter.check('10.0.0.1').allowed).toBe(true);
  expect(await limiter.admit('10.0.0.1')).toEqual({ allowed: false, retryAfter: 30 });
});
