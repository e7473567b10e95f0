import type { ExpiryHandler, ExpiryScheduler } from '../../src/presence/scheduler';
import { RETRY_AFTER_FAILURE_MS } from '../../src/presence/scheduler';

/**
 * The expiry scheduler contract, run against every adapter on real time with short delays:
 * - a job fires at its time (never before, soon after), once;
 * - one job per key: scheduling a key that has a job keeps that job as it is;
 * - the handler's answer re-delays the job, null ends it, a throw retries it after a pause;
 * - a schedule that overlaps a run which then ends the job is not lost;
 * - close stops firing.
 */
export interface OpenedScheduler {
  readonly scheduler: ExpiryScheduler;
  readonly cleanup: () => Promise<void>;
}

/** Late firing allowed by the contract's tests (the presence requirement is 10 s; adapters do far better). */
const LATE_MS = 750;

interface Fire {
  readonly key: string;
  readonly at: number;
}

async function until(condition: () => boolean | Promise<boolean>, timeoutMs = 5000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

export function expirySchedulerContract(name: string, open: () => Promise<OpenedScheduler>): void {
  describe(`ExpiryScheduler contract: ${name}`, () => {
    let opened: OpenedScheduler;
    let fires: Fire[];
    let handler: ExpiryHandler;

    const start = (h: ExpiryHandler): Promise<void> => {
      handler = h;
      return opened.scheduler.start(async (key) => {
        fires.push({ key, at: Date.now() });
        return handler(key);
      });
    };
    const firesOf = (key: string): Fire[] => fires.filter((f) => f.key === key);

    beforeEach(async () => {
      fires = [];
      opened = await open();
    });

    afterEach(async () => {
      await opened.cleanup();
    });

    test('fires a job at its time, not before, once', async () => {
      await start(async () => null);
      const at = Date.now() + 300;
      await opened.scheduler.schedule('a', at);
      expect(await opened.scheduler.size()).toBe(1);
      await until(() => fires.length === 1);
      expect(fires[0]?.at).toBeGreaterThanOrEqual(at);
      expect(fires[0]?.at).toBeLessThan(at + LATE_MS);
      await sleep(300);
      expect(fires).toHaveLength(1);
    });

    test('a time in the past fires at once', async () => {
      await start(async () => null);
      const now = Date.now();
      await opened.scheduler.schedule('late', now - 60_000);
      await until(() => fires.length === 1);
      expect(fires[0]?.at).toBeLessThan(now + LATE_MS);
    });

    test('scheduling a key that has a job keeps that one job', async () => {
      // Started only after the three calls: on a busy machine they can take longer than the
      // job's 300 ms, and a job that has fired and ended is rightly made anew by the next call.
      const at = Date.now() + 300;
      await opened.scheduler.schedule('a', at);
      await opened.scheduler.schedule('a', at + 5000);
      await opened.scheduler.schedule('a', at - 200);
      expect(await opened.scheduler.size()).toBe(1);
      await start(async () => null);
      await until(() => fires.length === 1);
      expect(fires[0]?.at).toBeGreaterThanOrEqual(at);
      await sleep(400);
      expect(fires).toHaveLength(1);
    });

    test('the answer re-delays the job to that time; null ends it', async () => {
      const answers: Array<number | null> = [];
      await start(async () => answers.shift() ?? null);
      const t0 = Date.now();
      answers.push(t0 + 500, t0 + 800, null);
      await opened.scheduler.schedule('a', t0 + 200);
      await until(() => fires.length === 3);
      const offsets = fires.map((f) => f.at - t0);
      expect(offsets[0]).toBeGreaterThanOrEqual(200);
      expect(offsets[1]).toBeGreaterThanOrEqual(500);
      expect(offsets[2]).toBeGreaterThanOrEqual(800);
      expect(offsets[2]).toBeLessThan(800 + LATE_MS);
      // The third run answered null: the job ends once that run is over (BullMQ: once the
      // worker has told Redis), which is waited for.
      await until(async () => answers.length === 0 && (await opened.scheduler.size()) === 0);
    });

    test('a failed run fires again after the retry pause', async () => {
      let calls = 0;
      await start(async () => {
        calls++;
        if (calls === 1) throw new Error('event store unreachable');
        return null;
      });
      await opened.scheduler.schedule('a', Date.now());
      await until(() => fires.length === 2, RETRY_AFTER_FAILURE_MS + 3000);
      const [first, second] = fires;
      expect((second?.at ?? 0) - (first?.at ?? 0)).toBeGreaterThanOrEqual(RETRY_AFTER_FAILURE_MS - 50);
    });

    test('a schedule that overlaps a run which then ends the job fires the key again', async () => {
      let release: () => void = () => undefined;
      let calls = 0;
      await start(async () => {
        calls++;
        if (calls === 1) await new Promise<void>((resolve) => (release = resolve));
        return null;
      });
      await opened.scheduler.schedule('a', Date.now());
      await until(() => calls === 1);
      // While the run decides "offline", the device comes back and is scheduled again.
      const again = opened.scheduler.schedule('a', Date.now() + 200);
      await sleep(100);
      release();
      await again;
      await until(() => calls === 2);
      await sleep(300);
      expect(calls).toBe(2);
    });

    test('many keys due together each fire once, in time', async () => {
      await start(async () => null);
      const at = Date.now() + 500;
      const keys = Array.from({ length: 200 }, (_, i) => `device-${i}`);
      await Promise.all(keys.map((key) => opened.scheduler.schedule(key, at)));
      await until(() => fires.length >= keys.length, 10_000);
      await sleep(200);
      expect(fires).toHaveLength(keys.length);
      expect(new Set(fires.map((f) => f.key)).size).toBe(keys.length);
      expect(Math.min(...fires.map((f) => f.at))).toBeGreaterThanOrEqual(at);
      expect(Math.max(...fires.map((f) => f.at))).toBeLessThan(at + 3000);
      expect(firesOf('device-7')).toHaveLength(1);
    });

    test('fires nothing after close', async () => {
      await start(async () => null);
      await opened.scheduler.schedule('a', Date.now() + 200);
      await opened.scheduler.close();
      await sleep(500);
      expect(fires).toEqual([]);
    });
  });
}
