/**
 * Defect: in distributed mode the rate limiter is wrapped by `withKeyedCounters`
 * (src/runtime/api.ts: Redis counters named by a keyed hash), and that wrapper forwards
 * `consume`, `refund` and `limitOf` only. `RateLimiter.peek` is lost, so
 * `handshakeLimiterFrom(...).check` answers "allowed" for every address
 * (`limiter.peek === undefined`): an address past its limit of failed handshakes is not refused
 * by that limit before admission and still takes places of the pace and the window, which is what
 * c77aadd set out to stop. The same class of defect as the refund the wrapper once missed.
 * Shown on the memory limiter (the wrapper does not care what it wraps).
 */
import { withKeyedCounters } from '../../src/privacy/counter-keys';
import { createMemoryRateLimiter, DEFAULT_LIMITS } from '../../src/ratelimit/limiter';
import { handshakeLimiterFrom } from '../../src/tunnel/handshake-limit';

const KEY = Buffer.alloc(32, 7);

test('the keyed-counter wrapper passes peek through under the hashed name', async () => {
  const keyed = withKeyedCounters(createMemoryRateLimiter({ ...DEFAULT_LIMITS, general: { points: 2, durationSeconds: 60 } }), KEY);
  for (let i = 0; i < 3; i++) await keyed.consume('general', 'ip:203.0.113.9');
  expect(keyed.peek).toBeDefined();
  expect(await keyed.peek?.('general', 'ip:203.0.113.9')).toMatchObject({ allowed: false });
});

test('an address past its limit of failed handshakes is refused by check, as in embedded mode', async () => {
  const limits = { ...DEFAULT_LIMITS, general: { points: 2, durationSeconds: 60 } };
  const embedded = handshakeLimiterFrom(createMemoryRateLimiter(limits));
  const distributed = handshakeLimiterFrom(withKeyedCounters(createMemoryRateLimiter(limits), KEY));
  for (const handshakes of [embedded, distributed]) {
    for (let i = 0; i < 3; i++) await handshakes.admit('203.0.113.9');
  }
  expect(await embedded.check('203.0.113.9')).toMatchObject({ allowed: false });
  expect(await distributed.check('203.0.113.9')).toMatchObject({ allowed: false });
});
