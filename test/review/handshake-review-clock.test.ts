/**
 * Defect (fixed): the handshake limit remembers the addresses `admit` saw refused until their
 * `retryAfter`, and `check` refuses them without asking the store (src/tunnel/handshake-limit.ts).
 * The end of each refusal was kept on the wall clock (`Date.now`): a clock stepped back (NTP,
 * a VM resumed, an operator) by an hour kept every remembered address refused by `check` for
 * that hour on top of its window, told to come back an hour later, while the store (Redis, on
 * its own clock) had long ended the window. `check` never asks the store, so nothing corrected
 * it. A clock stepped forward ended every refusal early. Refusals now run on a monotonic clock,
 * as admission does (src/tunnel/admission.ts).
 *
 * The store here stands for Redis: it refuses the address once, for its 60 s window, and has
 * nothing against it afterwards. Jest's fake clock moves the wall clock back without moving
 * `performance.now()`, as a stepped system clock does.
 */
import { DEFAULT_LIMITS, type Decision, type RateLimiter } from '../../src/ratelimit/limiter';
import { handshakeLimiterFrom } from '../../src/tunnel/handshake-limit';

function storeRefusingOnce(): RateLimiter {
  let refused = false;
  return {
    consume: async (): Promise<Decision> => {
      if (!refused) {
        refused = true;
        return { allowed: false, limit: 5, remaining: 0, resetAt: 0, retryAfter: 60 };
      }
      return { allowed: true, limit: 5, remaining: 4, resetAt: 0, retryAfter: 0 };
    },
    refund: async () => undefined,
    limitOf: (tier) => DEFAULT_LIMITS[tier],
  };
}

afterEach(() => jest.useRealTimers());

test('a wall clock stepped back does not keep an address refused past its window', async () => {
  jest.useFakeTimers();
  const handshakes = handshakeLimiterFrom(storeRefusingOnce());
  const ip = '203.0.113.50';
  expect((await handshakes.admit(ip)).allowed).toBe(false);
  expect(handshakes.check(ip)).toEqual({ allowed: false, retryAfter: 60 });

  jest.setSystemTime(Date.now() - 3_600_000);
  jest.advanceTimersByTime(30_000);
  // Still within the window: refused, and told the rest of it, not an hour more.
  const during = handshakes.check(ip);
  expect(during.allowed).toBe(false);
  expect(during.retryAfter).toBeLessThanOrEqual(30);

  jest.advanceTimersByTime(31_000);
  // The window is over: the next handshake is the store's to decide (which allows it).
  expect(handshakes.check(ip)).toEqual({ allowed: true, retryAfter: 0 });
  expect((await handshakes.admit(ip)).allowed).toBe(true);
});

test('a wall clock stepped forward does not end a refusal early', async () => {
  jest.useFakeTimers();
  const handshakes = handshakeLimiterFrom(storeRefusingOnce());
  const ip = '203.0.113.51';
  expect((await handshakes.admit(ip)).allowed).toBe(false);
  jest.setSystemTime(Date.now() + 3_600_000);
  jest.advanceTimersByTime(1_000);
  expect(handshakes.check(ip)).toMatchObject({ allowed: false });
});
