import { createMemoryRateLimiter, DEFAULT_LIMITS, type Tier, type TierLimit } from '../../src/ratelimit/limiter';
import { MemoryWindows, SWEEP_EVERY_MS } from '../../src/ratelimit/memory-windows';

/** A monotonic clock the test moves. */
function manualClock(start = 1_000): { now: () => number; advance: (ms: number) => void } {
  let at = start;
  return { now: () => at, advance: (ms) => (at += ms) };
}

describe('memory windows (embedded rate-limit counters)', () => {
  test('a window starts at the first point, counts every point in it, and a new one starts when it ends', () => {
    const clock = manualClock();
    const windows = new MemoryWindows(60_000, clock.now);
    expect(windows.consume('a')).toEqual({ points: 1, msLeft: 60_000 });
    clock.advance(59_999);
    expect(windows.consume('a')).toEqual({ points: 2, msLeft: 1 });
    clock.advance(1);
    expect(windows.consume('a')).toEqual({ points: 1, msLeft: 60_000 });
    expect(windows.consume('b')).toEqual({ points: 1, msLeft: 60_000 });
  });

  test('a refund gives one point of the open window back, never below zero, and gives nothing to a key with no open window', () => {
    const clock = manualClock();
    const windows = new MemoryWindows(1_000, clock.now);
    windows.consume('a');
    windows.consume('a');
    windows.refund('a');
    expect(windows.consume('a').points).toBe(2);
    windows.refund('a');
    windows.refund('a');
    windows.refund('a');
    expect(windows.consume('a').points).toBe(1);
    // No window: nothing was counted, so nothing is given (no credit for later points).
    windows.refund('never');
    expect(windows.consume('never').points).toBe(1);
    clock.advance(1_000);
    windows.refund('a');
    expect(windows.consume('a').points).toBe(1);
  });

  test('ended windows are let go by a sweep, open ones are kept', () => {
    const clock = manualClock();
    const windows = new MemoryWindows(5_000, clock.now);
    for (let i = 0; i < 1_000; i++) windows.consume(`old-${i}`);
    clock.advance(4_000);
    windows.consume('young');
    clock.advance(1_000);
    windows.sweep();
    expect(windows.size).toBe(1);
    expect(windows.consume('young').points).toBe(2);
    windows.close();
  });

  test('the sweep runs by itself while there are windows, and does not keep the process alive', () => {
    jest.useFakeTimers();
    try {
      const clock = manualClock();
      const windows = new MemoryWindows(1_000, clock.now);
      windows.consume('a');
      expect(jest.getTimerCount()).toBe(1);
      // Many keys, one timer.
      for (let i = 0; i < 100; i++) windows.consume(`k${i}`);
      expect(jest.getTimerCount()).toBe(1);
      clock.advance(1_000);
      jest.advanceTimersByTime(SWEEP_EVERY_MS);
      expect(windows.size).toBe(0);
      // Nothing left: no timer left either.
      expect(jest.getTimerCount()).toBe(0);
    } finally {
      jest.useRealTimers();
    }
    const windows = new MemoryWindows(1_000);
    windows.consume('a');
    const sweeper = (windows as unknown as { sweeper: NodeJS.Timeout }).sweeper;
    expect(sweeper.hasRef()).toBe(false);
    windows.close();
  });
});

describe('memory windows: times kept in small whole numbers', () => {
  test('a window open when the times move to a later base goes on counting and ends when it would have', () => {
    const clock = manualClock(5_000.75);
    // The times move to a later base every 10 s of this clock.
    const windows = new MemoryWindows(6_000, clock.now, 10_000);
    expect(windows.consume('a')).toEqual({ points: 1, msLeft: 6_000 });
    clock.advance(7_000);
    expect(windows.consume('b')).toEqual({ points: 1, msLeft: 6_000 });
    clock.advance(4_000);
    // Past the base: moved; `a` ended 5 s ago, `b` has 2 s left.
    expect(windows.consume('b')).toEqual({ points: 2, msLeft: 2_000 });
    expect(windows.consume('a')).toEqual({ points: 1, msLeft: 6_000 });
    clock.advance(1_999);
    expect(windows.consume('b')).toEqual({ points: 3, msLeft: 1 });
    clock.advance(1);
    expect(windows.consume('b')).toEqual({ points: 1, msLeft: 6_000 });
    // Many bases later, the same rule.
    for (let i = 0; i < 5; i++) {
      clock.advance(3_000);
      expect(windows.consume('c').points).toBe(i % 2 === 0 ? 1 : 2);
    }
    windows.sweep();
    windows.close();
  });
});

describe('the embedded limiter on memory windows', () => {
  const limits: Record<Tier, TierLimit> = { ...DEFAULT_LIMITS, heartbeat: { points: 2, durationSeconds: 60 } };

  test('decisions: remaining falls, the refused one says when to come back, on a clock of its own', async () => {
    const clock = manualClock();
    const limiter = createMemoryRateLimiter(limits, clock.now);
    expect(await limiter.consume('heartbeat', 'd')).toMatchObject({ allowed: true, limit: 2, remaining: 1, retryAfter: 0 });
    clock.advance(30_500);
    expect(await limiter.consume('heartbeat', 'd')).toMatchObject({ allowed: true, remaining: 0 });
    const refused = await limiter.consume('heartbeat', 'd');
    expect(refused).toMatchObject({ allowed: false, limit: 2, remaining: 0, retryAfter: 30 });
    const nowSeconds = Date.now() / 1000;
    expect(refused.resetAt).toBeGreaterThanOrEqual(Math.floor(nowSeconds + 29));
    expect(refused.resetAt).toBeLessThanOrEqual(Math.ceil(nowSeconds + 30) + 1);
    // Points past the limit count too (as in Redis): a refund of one of them still leaves it refused.
    await limiter.refund('heartbeat', 'd');
    expect((await limiter.consume('heartbeat', 'd')).allowed).toBe(false);
    clock.advance(29_500);
    expect(await limiter.consume('heartbeat', 'd')).toMatchObject({ allowed: true, remaining: 1 });
  });

  test('a wall clock stepped back does not stretch a window: it runs on the monotonic clock', async () => {
    const clock = manualClock();
    const limiter = createMemoryRateLimiter(limits, clock.now);
    const realNow = Date.now;
    try {
      await limiter.consume('heartbeat', 'd');
      await limiter.consume('heartbeat', 'd');
      Date.now = () => realNow() - 3_600_000;
      const refused = await limiter.consume('heartbeat', 'd');
      expect(refused.retryAfter).toBe(60);
      clock.advance(60_000);
      expect((await limiter.consume('heartbeat', 'd')).allowed).toBe(true);
    } finally {
      Date.now = realNow;
    }
  });

  test('tiers keep separate windows for one key', async () => {
    const clock = manualClock();
    const limiter = createMemoryRateLimiter({ ...limits, login: { points: 1, durationSeconds: 60 } }, clock.now);
    expect((await limiter.consume('login', 'k')).allowed).toBe(true);
    expect((await limiter.consume('login', 'k')).allowed).toBe(false);
    expect((await limiter.consume('heartbeat', 'k')).allowed).toBe(true);
  });
});
