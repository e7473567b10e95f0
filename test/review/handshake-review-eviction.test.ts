/**
 * The handshake limit remembers at most REFUSED_ADDRESSES_KEPT refused addresses
 * (src/tunnel/handshake-limit.ts): a flood of distinct addresses past their limit does not grow
 * the process without bound. What it forgets first is the oldest refusal, and a forgotten
 * address is asked of the store again: it is let past `check` (a place of the pace, the cost
 * of the bound), never past the limit itself.
 */
import { createMemoryRateLimiter, DEFAULT_LIMITS } from '../../src/ratelimit/limiter';
import { handshakeLimiterFrom, REFUSED_ADDRESSES_KEPT, REMEMBERED_ADDRESS_MAX_LENGTH } from '../../src/tunnel/handshake-limit';

const address = (i: number): string => `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;

test('past the bound the oldest refusal is forgotten: that address passes check and is refused by the store again', async () => {
  const handshakes = handshakeLimiterFrom(createMemoryRateLimiter({ ...DEFAULT_LIMITS, general: { points: 1, durationSeconds: 60 } }));
  const count = REFUSED_ADDRESSES_KEPT + 1;
  for (let i = 0; i < count; i++) {
    expect((await handshakes.admit(address(i))).allowed).toBe(true);
    expect((await handshakes.admit(address(i))).allowed).toBe(false);
  }
  // The first is forgotten; the 10,000 after it are all still refused without the store.
  expect(handshakes.check(address(0))).toEqual({ allowed: true, retryAfter: 0 });
  let refused = 0;
  for (let i = 1; i < count; i++) if (!handshakes.check(address(i)).allowed) refused++;
  expect(refused).toBe(REFUSED_ADDRESSES_KEPT);
  // Not past the limit: the store refuses it, and it is remembered again.
  expect(await handshakes.admit(address(0))).toMatchObject({ allowed: false });
  expect(handshakes.check(address(0))).toMatchObject({ allowed: false });
  // Which made the next oldest the one forgotten.
  expect(handshakes.check(address(1))).toEqual({ allowed: true, retryAfter: 0 });
}, 60_000);

test('an "address" longer than any address (a forwarded header trusted blindly) is not remembered: the store refuses it each time', async () => {
  const handshakes = handshakeLimiterFrom(createMemoryRateLimiter({ ...DEFAULT_LIMITS, general: { points: 1, durationSeconds: 60 } }));
  const long = 'x'.repeat(REMEMBERED_ADDRESS_MAX_LENGTH + 1);
  const ipv6 = 'fe80:0000:0000:0000:0202:b3ff:fe1e:8329%eth0';
  for (const ip of [long, ipv6]) {
    expect((await handshakes.admit(ip)).allowed).toBe(true);
    expect((await handshakes.admit(ip)).allowed).toBe(false);
  }
  expect(handshakes.check(long)).toEqual({ allowed: true, retryAfter: 0 });
  expect(await handshakes.admit(long)).toMatchObject({ allowed: false });
  expect(handshakes.check(ipv6)).toMatchObject({ allowed: false });
});
