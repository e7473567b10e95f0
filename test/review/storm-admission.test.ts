import { createAdmission, startLoopDelayMonitor } from '../../src/tunnel/admission';
import { mulberry32 } from '../support/prng';

/**
 * Handshake admission (src/tunnel/admission.ts) from outside: what `retryAfter` a refused hub
 * is told (decisions §5: seconds, which the client obeys), whether a refusal outlives its cause,
 * and the loop-delay monitor's timer.
 */

afterEach(() => {
  jest.restoreAllMocks();
});

describe('retryAfter', () => {
  test('whatever the sequence of handshakes, answers and loop delays, every refusal says a whole number of seconds from 1 to the latest second', () => {
    const wrong: Array<{ seed: number; step: number; answer: number }> = [];
    for (let seed = 1; seed <= 50; seed++) {
      const random = mulberry32(seed);
      let t = 1_700_000_000_000;
      let delay = 0;
      const admission = createAdmission({
        perSecond: Math.floor(random() * 20),
        window: { initial: 1 + Math.floor(random() * 8), min: 1, targetMs: 1000 },
        loopDelay: () => delay,
        now: () => t,
      });
      const inFlight: number[] = [];
      for (let step = 0; step < 2000; step++) {
        const r = random();
        if (r < 0.1) t += Math.floor(random() * 5000);
        else if (r < 0.15) delay = random() < 0.5 ? 0 : random() * 2000;
        else if (r < 0.5 && inFlight.length > 0) admission.settled(inFlight.shift() ?? t);
        else {
          const answer = admission.decide();
          if (answer === null) inFlight.push(t);
          else if (!Number.isInteger(answer) || answer < 1 || answer > 60) wrong.push({ seed, step, answer });
        }
      }
    }
    expect(wrong).toEqual([]);
  });
});

describe('a refusal does not outlive its cause', () => {
  test('after a single long stall of the event loop, device handshakes are admitted again once the loop is on time', () => {
    let t = 0;
    let delay = 0;
    const admission = createAdmission({ perSecond: 100, loopDelay: () => delay, now: () => t });
    // The loop's delay refuses only while device handshakes are in flight: one is.
    expect(admission.decide()).toBeNull();
    delay = 5000;
    expect(admission.decide()).toEqual(expect.any(Number));
    delay = 0;
    t += 1000;
    expect(admission.decide()).toBeNull();
  });

  /**
   * FINDING. The admission's clock is the wall clock (`Date.now`, the default `now`). When it is
   * stepped back (NTP correcting a fast clock, a VM restored, a leap smear done badly), the
   * pace's bucket is "refilled" by a negative amount: an hour's step leaves it an hour's worth of
   * handshakes in debt, and every device handshake of this process is refused with
   * `rate_limited` for the next hour, each hub sent away again and again. The busy time the
   * answered rate is measured over goes negative the same way. A monotonic clock
   * (`performance.now()`, as the loop-delay monitor uses) or a bucket that never refills below
   * what it held would not.
   */
  test('a wall clock stepped back an hour does not refuse every device handshake for an hour', () => {
    let wall = 1_800_000_000_000;
    jest.spyOn(Date, 'now').mockImplementation(() => wall);
    const admission = createAdmission({ perSecond: 10, window: false });
    expect(admission.decide()).toBeNull();
    wall -= 3_600_000;
    // Two seconds (two bucketfuls) later, on the stepped clock.
    wall += 2000;
    const answers = Array.from({ length: 5 }, () => admission.decide());
    expect(answers).toEqual([null, null, null, null, null]);
  });
});

describe('the loop-delay monitor', () => {
  test('its timer never keeps the process alive, and stop clears it', () => {
    const intervals: NodeJS.Timeout[] = [];
    const real = global.setInterval;
    jest.spyOn(global, 'setInterval').mockImplementation(((...args: Parameters<typeof setInterval>) => {
      const timer = real(...args);
      intervals.push(timer);
      return timer;
    }) as typeof setInterval);
    const clear = jest.spyOn(global, 'clearInterval');
    const monitor = startLoopDelayMonitor();
    expect(intervals).toHaveLength(1);
    expect(intervals[0]?.hasRef()).toBe(false);
    monitor.stop();
    expect(clear).toHaveBeenCalledWith(intervals[0]);
  });
});
