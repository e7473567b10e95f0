/**
 * Two processes on one Redis, and an address past its limit of failed handshakes (decisions §5).
 * `check` answers from the refusals this process met (src/tunnel/handshake-limit.ts), so on a
 * process that has not seen the address refused its first handshake takes a place of the pace
 * and is refused by the limit (the Redis counter); from then on the limit refuses it before
 * admission, and the place stays free for the fleet. Places taken are read from admission's
 * own count (`tunnel_device_handshakes_total{outcome="admitted"}`), not from a hub refused
 * within the same second, which a slow machine would not keep to.
 */
import { TIERS } from '../../src/ratelimit/limiter';
import { createUser } from '../support/harness';
import { scrape } from '../support/metrics';
import { deviceToken, handshakeFrom as handshake, registerHub } from '../support/tunnel';
import { twoProcesses } from '../support/two-processes';

const { a, b } = twoProcesses({
  env: {
    RATE_LIMITS: TIERS.map((tier) => (tier === 'general' ? 'general=3/60' : `${tier}=1000000/60`)).join(','),
    TRUST_PROXY: 'true',
    TUNNEL_HANDSHAKES_PER_SECOND: '1',
  },
});

const refill = (): Promise<void> => new Promise((resolve) => setTimeout(resolve, 1100));

test('an address refused on one process takes one place of the pace on the other, then none', async () => {
  const owner = await createUser(a());
  const hub = await registerHub(a(), owner);
  const token = await deviceToken(a(), hub, owner);
  const attacker = '203.0.113.77';
  const fleet = '198.51.100.77';

  // Past its limit on A.
  for (let i = 0; i < 3; i++) {
    expect(await handshake(a(), attacker, `junk-${i}`)).toMatchObject({ connected: false, message: 'unauthorized' });
    await refill();
  }
  expect(await handshake(a(), attacker, 'junk-3')).toEqual({ connected: false, message: 'rate_limited', data: { retryAfter: expect.any(Number) } });
  await refill();
  // And on A, refused before admission from then on: the hub's place is still free.
  expect(await handshake(a(), attacker, 'junk-4')).toMatchObject({ data: { retryAfter: expect.any(Number) } });
  expect(await handshake(a(), fleet, token)).toEqual({ connected: true });

  // B has not seen it: its first handshake there takes a place of B's pace (admission admits
  // it, as its metrics say), and is refused by the limit.
  const admittedOnB = async (): Promise<number> => (await scrape(b())).value('tunnel_device_handshakes_total', { outcome: 'admitted' });
  await refill();
  let before = await admittedOnB();
  const first = await handshake(b(), attacker, 'junk-5');
  expect(first).toEqual({ connected: false, message: 'rate_limited', data: { retryAfter: expect.any(Number) } });
  expect((await admittedOnB()) - before).toBe(1);

  // From then on B refuses it by the limit, before admission: no place taken, and the hub gets it.
  await refill();
  before = await admittedOnB();
  const second = await handshake(b(), attacker, 'junk-6');
  expect(second).toEqual({ connected: false, message: 'rate_limited', data: { retryAfter: expect.any(Number) } });
  expect(second.data?.retryAfter).toBeLessThanOrEqual(60);
  expect((await admittedOnB()) - before).toBe(0);
  expect(await handshake(b(), fleet, token)).toEqual({ connected: true });
}, 60_000);
