/**
 * Defect (fixed): `check` refused an address from the moment one of its handshakes was refused
 * until that refusal's `retryAfter`, even when handshakes of the same address that were in
 * flight then succeeded afterwards and gave their points back. The store then has room again
 * (it counts only failures), but `check` never asks it: every hub behind that address (a
 * carrier-grade NAT, an office) was refused for up to the whole window. It happens when more
 * handshakes of one address than its limit are in flight at once, as in a fleet's reconnection
 * storm through one NAT. Before `check` answered from memory it read the store and let them in.
 * A handshake that gives its point back (`release`) now ends what this process remembers of
 * the address: its next handshake is the store's to decide.
 */
import { createMemoryRateLimiter, DEFAULT_LIMITS } from '../../src/ratelimit/limiter';
import { handshakeLimiterFrom } from '../../src/tunnel/handshake-limit';

const flush = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

test('handshakes in flight that succeed after a refusal make room: the address is not refused by check for the rest of the window', async () => {
  const limiter = createMemoryRateLimiter({ ...DEFAULT_LIMITS, general: { points: 5, durationSeconds: 60 } });
  const handshakes = handshakeLimiterFrom(limiter);
  const ip = '198.51.100.20';
  // Six hubs behind one address start their handshakes at once: each takes its point before its token is checked.
  const answers = await Promise.all(Array.from({ length: 6 }, () => handshakes.admit(ip)));
  expect(answers.map((a) => a.allowed)).toEqual([true, true, true, true, true, false]);
  // The five admitted succeed and give their points back.
  for (let i = 0; i < 5; i++) handshakes.release(ip);
  await flush();
  // The store has room for this address again (one point of five used: the refused handshake).
  expect(handshakes.check(ip)).toEqual({ allowed: true, retryAfter: 0 });
  expect((await handshakes.admit(ip)).allowed).toBe(true);
});

test('an address whose failures alone put it past its limit stays refused by check', async () => {
  const handshakes = handshakeLimiterFrom(createMemoryRateLimiter({ ...DEFAULT_LIMITS, general: { points: 3, durationSeconds: 60 } }));
  const ip = '198.51.100.21';
  const answers: boolean[] = [];
  for (let i = 0; i < 4; i++) answers.push((await handshakes.admit(ip)).allowed);
  expect(answers).toEqual([true, true, true, false]);
  expect(handshakes.check(ip)).toMatchObject({ allowed: false });
  // Another address's success does not let it in.
  handshakes.release('198.51.100.22');
  await flush();
  expect(handshakes.check(ip)).toMatchObject({ allowed: false });
});
