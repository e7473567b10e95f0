import { createAdmission } from '../../src/tunnel/admission';

/**
 * Refusals while the loop is late (src/tunnel/admission.ts): whatever the clock does (steps
 * back, stands still, jumps far ahead) and whenever the first answer comes, a refused hub is
 * told a whole number of seconds between 1 and the latest second, and the pace stays a number.
 * (Written against a provisional rate of the answers so far, since taken back; the bounds hold
 * for any rate.)
 */

/** Deterministic: a linear congruential generator. */
function prng(seed: number): () => number {
  let s = seed;
  return () => {
    s = (s * 1103515245 + 12345) % 2147483648;
    return s / 2147483648;
  };
}

describe('retryAfter under hostile clocks and first answers', () => {
  test.each([1, 2, 3, 4])('seed %i: a clock walking back and forth, late and on time, answers early and late', (seed) => {
    const random = prng(seed);
    let t = 1_000_000 * random();
    let delay = 0;
    const maxWait = 1 + Math.floor(random() * 90);
    const admission = createAdmission({
      perSecond: random() < 0.3 ? 0 : Math.ceil(random() * 2000),
      window: random() < 0.3 ? false : { initial: 1 + Math.floor(random() * 100), min: 1 },
      maxRetryAfterSeconds: maxWait,
      loopDelay: () => delay,
      maxLoopDelayMs: 500,
      now: () => t,
    });
    const inFlight: number[] = [];
    for (let step = 0; step < 3000; step++) {
      const r = random();
      // The clock: mostly forward by a little, sometimes standing still, back by up to a minute, or ahead by an hour.
      if (r < 0.05) t -= random() * 60_000;
      else if (r < 0.07) t += random() * 3_600_000;
      else if (r > 0.2) t += random() * 50;
      if (random() < 0.1) delay = random() < 0.5 ? 0 : 600 + random() * 5000;
      if (random() < 0.6) {
        const wait = admission.decide();
        if (wait === null) inFlight.push(t);
        else {
          expect(Number.isInteger(wait)).toBe(true);
          expect(wait).toBeGreaterThanOrEqual(1);
          expect(wait).toBeLessThanOrEqual(maxWait);
        }
      } else if (inFlight.length > 0) {
        admission.settled(inFlight.splice(Math.floor(random() * inFlight.length), 1)[0] as number);
      }
      const stats = admission.stats();
      expect(Number.isFinite(stats.pace)).toBe(true);
      expect(stats.pace).toBeGreaterThan(0);
      expect(stats.inFlight).toBeGreaterThanOrEqual(0);
    }
  });

  test('a first answer after a busy time standing still (no time passed): refused at the pace, not at a rate divided by zero', () => {
    const t = 5000;
    let delay = 0;
    const admission = createAdmission({ perSecond: 100, window: false, loopDelay: () => delay, now: () => t });
    for (let i = 0; i < 3; i++) expect(admission.decide()).toBeNull();
    admission.settled(t);
    delay = 1000;
    // 100 a second: the first hundred within the second.
    expect(Array.from({ length: 100 }, () => admission.decide())).toEqual(Array(100).fill(1));
  });

  test('a first answer after nearly a second: hubs refused late are spread at one a second at the slowest, never past the latest second', () => {
    let t = 0;
    let delay = 0;
    const admission = createAdmission({ perSecond: 1000, window: false, maxRetryAfterSeconds: 60, loopDelay: () => delay, now: () => t });
    for (let i = 0; i < 64; i++) expect(admission.decide()).toBeNull();
    t = 999;
    delay = 900;
    admission.settled(0);
    const waits = Array.from({ length: 100 }, () => admission.decide());
    // Each one at most a second after the one before, and none past the latest second.
    for (let i = 1; i < waits.length; i++) expect((waits[i] as number) - (waits[i - 1] as number)).toBeLessThanOrEqual(1);
    expect(Math.max(...(waits as number[]))).toBeLessThanOrEqual(60);
    expect(Math.min(...(waits as number[]))).toBe(1);
  });
});
