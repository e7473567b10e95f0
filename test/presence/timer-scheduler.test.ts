import { createTimerExpiryScheduler } from '../../src/presence/timer-scheduler';
import { RETRY_AFTER_FAILURE_MS, type ExpiryScheduler } from '../../src/presence/scheduler';
import { ManualTimers, settle } from '../support/manual-timers';

/** The in-process scheduler's logic on a manual clock: no real waiting. */

describe('in-process expiry scheduler (manual clock)', () => {
  let timers: ManualTimers;
  let scheduler: ExpiryScheduler;
  let fired: Array<{ key: string; at: number }>;
  let answer: (key: string) => Promise<number | null>;

  beforeEach(async () => {
    timers = new ManualTimers();
    fired = [];
    answer = async () => null;
    scheduler = createTimerExpiryScheduler({ timers, concurrency: 2 });
    await scheduler.start(async (key) => {
      fired.push({ key, at: timers.now() });
      return answer(key);
    });
  });

  afterEach(() => scheduler.close());

  test('fires each job at its time, earliest first, and never before', async () => {
    const t0 = timers.now();
    await scheduler.schedule('b', t0 + 2000);
    await scheduler.schedule('a', t0 + 1000);
    await timers.advance(999);
    expect(fired).toEqual([]);
    await timers.advance(1);
    expect(fired).toEqual([{ key: 'a', at: t0 + 1000 }]);
    await timers.advance(1000);
    expect(fired).toEqual([
      { key: 'a', at: t0 + 1000 },
      { key: 'b', at: t0 + 2000 },
    ]);
    expect(await scheduler.size()).toBe(0);
  });

  test('a second schedule of a pending key keeps the one job as it is', async () => {
    const t0 = timers.now();
    await scheduler.schedule('a', t0 + 1000);
    await scheduler.schedule('a', t0 + 5000);
    await scheduler.schedule('a', t0 + 500);
    expect(await scheduler.size()).toBe(1);
    await timers.advance(10_000);
    expect(fired).toEqual([{ key: 'a', at: t0 + 1000 }]);
  });

  test('a run that answers a time fires again then; null ends the job', async () => {
    const t0 = timers.now();
    const answers = [t0 + 3000, t0 + 7000, null];
    answer = async () => answers.shift() ?? null;
    await scheduler.schedule('a', t0 + 1000);
    await timers.advance(20_000);
    expect(fired.map((f) => f.at - t0)).toEqual([1000, 3000, 7000]);
    expect(await scheduler.size()).toBe(0);
    expect(timers.armed()).toBe(0);
  });

  test('a time in the past fires at once', async () => {
    await scheduler.schedule('late', timers.now() - 60_000);
    await timers.advance(0);
    expect(fired.map((f) => f.key)).toEqual(['late']);
  });

  test('a failed run fires again after the retry pause', async () => {
    const t0 = timers.now();
    let calls = 0;
    answer = async () => {
      calls++;
      if (calls === 1) throw new Error('event store unreachable');
      return null;
    };
    await scheduler.schedule('a', t0);
    await timers.advance(RETRY_AFTER_FAILURE_MS - 1);
    expect(calls).toBe(1);
    await timers.advance(1);
    expect(calls).toBe(2);
  });

  test('a schedule while the key runs is not lost when that run ends the job', async () => {
    const t0 = timers.now();
    let release: (value: number | null) => void = () => undefined;
    let calls = 0;
    answer = () => {
      calls++;
      if (calls > 1) return Promise.resolve(null);
      return new Promise<number | null>((resolve) => (release = resolve));
    };
    await scheduler.schedule('a', t0);
    await timers.advance(0);
    expect(calls).toBe(1);
    // The device went online again while the job was deciding it offline.
    await scheduler.schedule('a', t0 + 5000);
    release(null);
    await settle();
    expect(await scheduler.size()).toBe(1);
    await timers.advance(5000);
    expect(fired.map((f) => f.at - t0)).toEqual([0, 5000]);
  });

  test('runs at most `concurrency` handlers at once and drains the rest in order', async () => {
    const t0 = timers.now();
    const releases: Array<() => void> = [];
    let running = 0;
    let maxRunning = 0;
    answer = () =>
      new Promise<number | null>((resolve) => {
        running++;
        maxRunning = Math.max(maxRunning, running);
        releases.push(() => {
          running--;
          resolve(null);
        });
      });
    for (const key of ['a', 'b', 'c', 'd', 'e']) await scheduler.schedule(key, t0 + 100);
    await timers.advance(100);
    expect(fired.map((f) => f.key)).toEqual(['a', 'b']);
    while (releases.length > 0) {
      releases.shift()?.();
      await settle();
    }
    expect(fired.map((f) => f.key)).toEqual(['a', 'b', 'c', 'd', 'e']);
    expect(maxRunning).toBe(2);
  });

  test('keeps one timer armed however many jobs are pending', async () => {
    const t0 = timers.now();
    for (let i = 0; i < 1000; i++) await scheduler.schedule(`k${i}`, t0 + 1000 + i);
    expect(timers.armed()).toBe(1);
    await timers.advance(2000);
    expect(fired).toHaveLength(1000);
    expect(fired.every((f, i) => f.at === t0 + 1000 + i)).toBe(true);
  });

  test('fires nothing after close', async () => {
    await scheduler.schedule('a', timers.now() + 1000);
    await scheduler.close();
    await timers.advance(5000);
    expect(fired).toEqual([]);
    await expect(scheduler.schedule('b', timers.now())).rejects.toThrow('closed');
  });
});

describe('in-process expiry scheduler: the queueing order kept in small numbers', () => {
  test('jobs due at the same time still fire first come, first served once the order is numbered again', async () => {
    const timers = new ManualTimers();
    const fired: string[] = [];
    // Numbered again whenever the order reaches 3: several times over these jobs.
    const scheduler = createTimerExpiryScheduler({ timers, concurrency: 1, orderBelow: 3 });
    await scheduler.start(async (key) => {
      fired.push(key);
      return null;
    });
    try {
      const t0 = timers.now();
      const keys = ['a', 'b', 'c', 'd', 'e', 'f', 'g'];
      // Later ones first, then a tie at t0 + 100 in the order scheduled, then earlier ones.
      await scheduler.schedule('late', t0 + 500);
      for (const key of keys) await scheduler.schedule(key, t0 + 100);
      await scheduler.schedule('early', t0 + 50);
      expect(scheduler.deadlines()).toEqual(new Map([['late', t0 + 500], ...keys.map((key): [string, number] => [key, t0 + 100]), ['early', t0 + 50]]));
      await timers.advance(1000);
      expect(fired).toEqual(['early', ...keys, 'late']);
    } finally {
      await scheduler.close();
    }
  });

  test('a job that fires again is queued behind those already due at its new time', async () => {
    const timers = new ManualTimers();
    const fired: Array<[string, number]> = [];
    const scheduler = createTimerExpiryScheduler({ timers, concurrency: 1, orderBelow: 2 });
    const t0 = timers.now();
    await scheduler.start(async (key) => {
      fired.push([key, timers.now() - t0]);
      return key === 'a' && fired.filter(([k]) => k === 'a').length === 1 ? t0 + 300 : null;
    });
    try {
      await scheduler.schedule('a', t0 + 100);
      await scheduler.schedule('b', t0 + 300);
      await scheduler.schedule('c', t0 + 300);
      await timers.advance(1000);
      expect(fired).toEqual([
        ['a', 100],
        ['b', 300],
        ['c', 300],
        ['a', 300],
      ]);
      expect(await scheduler.size()).toBe(0);
    } finally {
      await scheduler.close();
    }
  });
});
