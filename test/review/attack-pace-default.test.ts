import { loadConfig } from '../../src/config';
import { createAdmission, type Admission } from '../../src/tunnel/admission';
import { TEST_SECRETS } from '../support/server';

/**
 * The device handshakes' pace at its default (TUNNEL_HANDSHAKES_PER_SECOND 5000) and at small
 * values, against the in-flight window: whatever refuses a hub, it is told when to come back
 * (decisions §5: `retryAfter`, whole seconds, at least 1), and no second is sent more hubs than
 * the pace. A clock of the test's own.
 */

const pace = (env: Record<string, string> = {}): number => loadConfig({ ...TEST_SECRETS, ...env }).tunnelHandshakesPerSecond;

/** `n` hubs in one instant, each admitted one answered at once (the window only grows): how many admitted, what the others were told. */
function arriveAtOnce(admission: Admission, n: number): { admitted: number; retries: number[] } {
  const retries: number[] = [];
  let admitted = 0;
  for (let i = 0; i < n; i++) {
    const decision = admission.decide();
    if (decision === null) {
      admitted++;
      admission.settled(admission.now());
    } else retries.push(decision);
  }
  return { admitted, retries };
}

test('the default pace is 5000 a second', () => {
  expect(pace()).toBe(5000);
  expect(pace({ TUNNEL_HANDSHAKES_PER_SECOND: '3' })).toBe(3);
  expect(() => pace({ TUNNEL_HANDSHAKES_PER_SECOND: '0' })).toThrow();
});

test('20,000 hubs in one instant at the default pace: 5000 admitted, every other told a whole second to come back, no second given more than the pace but for whole-millisecond rounding', () => {
  let clock = 0;
  const admission = createAdmission({ perSecond: pace(), now: () => clock });
  const { admitted, retries } = arriveAtOnce(admission, 20_000);
  expect(admitted).toBe(5000);
  expect(retries).toHaveLength(15_000);
  expect(retries.filter((r) => !Number.isInteger(r) || r < 1 || r > 60)).toEqual([]);
  const perSecond = new Map<number, number>();
  for (const r of retries) perSecond.set(r, (perSecond.get(r) ?? 0) + 1);
  // At 0.2 ms apart, moments are whole milliseconds and whole seconds: the first of the second
  // after the refusal takes a couple booked within its first milliseconds, never a second's more.
  expect([...perSecond.keys()]).toEqual([1, 2, 3]);
  for (const n of perSecond.values()) expect(n).toBeLessThanOrEqual(5000 + 5);
  // First come, first told: never an earlier second than the one before.
  expect(retries).toEqual([...retries].sort((a, b) => a - b));
  // A second on, a second's worth is admitted again.
  clock += 1000;
  let again = 0;
  while (admission.decide() === null) {
    again++;
    admission.settled(admission.now());
  }
  expect(again).toBe(5000);
});

test('hubs left in flight at once: the window refuses them past 64, each with a retryAfter, before the pace would', () => {
  const admission = createAdmission({ perSecond: pace(), now: () => 0 });
  const decisions = Array.from({ length: 1000 }, () => admission.decide());
  expect(decisions.filter((d) => d === null)).toHaveLength(64);
  expect(decisions.slice(64).filter((d) => d === null || d < 1)).toEqual([]);
});

test('a small pace (3 a second) refuses with retryAfter as before, spread a second per three, capped at 60', () => {
  const admission = createAdmission({ perSecond: pace({ TUNNEL_HANDSHAKES_PER_SECOND: '3' }), now: () => 0 });
  const { admitted, retries } = arriveAtOnce(admission, 400);
  expect(admitted).toBe(3);
  expect(retries.slice(0, 6)).toEqual([1, 1, 1, 2, 2, 2]);
  expect(Math.max(...retries)).toBe(60);
  expect(retries.filter((r) => r < 1)).toEqual([]);
});
