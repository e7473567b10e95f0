/**
 * Defect (fixed): in distributed mode the rate limiter is wrapped by `withKeyedCounters`
 * (src/runtime/api.ts: Redis counters named by a keyed hash). The wrapper once dropped methods
 * it did not know of (a refund, later a peek), and the handshake limit then answered "allowed"
 * for every address. The limit now asks only `consume` and `refund`, which the interface
 * requires of every limiter and wrapper: an address past its limit of failed handshakes is
 * refused in both modes, before admission gives it a place of the pace. Shown on the memory
 * limiter (the wrapper does not care what it wraps).
 */
import { withKeyedCounters } from '../../src/privacy/counter-keys';
import { createMemoryRateLimiter, DEFAULT_LIMITS } from '../../src/ratelimit/limiter';
import { handshakeLimiterFrom } from '../../src/tunnel/handshake-limit';

const KEY = Buffer.alloc(32, 7);

test('an address past its limit of failed handshakes is refused by check, with and without keyed names', async () => {
  const limits = { ...DEFAULT_LIMITS, general: { points: 2, durationSeconds: 60 } };
  const embedded = handshakeLimiterFrom(createMemoryRateLimiter(limits));
  const distributed = handshakeLimiterFrom(withKeyedCounters(createMemoryRateLimiter(limits), KEY));
  for (const handshakes of [embedded, distributed]) {
    expect(handshakes.check('203.0.113.9')).toMatchObject({ allowed: true });
    const answers: boolean[] = [];
    for (let i = 0; i < 3; i++) answers.push((await handshakes.admit('203.0.113.9')).allowed);
    expect(answers).toEqual([true, true, false]);
    expect(handshakes.check('203.0.113.9')).toMatchObject({ allowed: false });
    // Another address is not held back.
    expect(handshakes.check('198.51.100.7')).toMatchObject({ allowed: true });
  }
});

test('a refund passes through the keyed names: a successful handshake does not count', async () => {
  const limits = { ...DEFAULT_LIMITS, general: { points: 1, durationSeconds: 60 } };
  const handshakes = handshakeLimiterFrom(withKeyedCounters(createMemoryRateLimiter(limits), KEY));
  for (let i = 0; i < 5; i++) {
    expect((await handshakes.admit('203.0.113.9')).allowed).toBe(true);
    handshakes.release('203.0.113.9');
    await new Promise((resolve) => setImmediate(resolve));
  }
});
