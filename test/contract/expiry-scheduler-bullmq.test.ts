import { randomUUID } from 'node:crypto';
import { createBullmqExpiryScheduler } from '../../src/presence/bullmq-scheduler';
import type { ExpiryScheduler } from '../../src/presence/scheduler';
import { startPrivateRedis, type PrivateRedis } from '../support/redis';
import { expirySchedulerContract } from './expiry-scheduler.contract';

/** BullMQ against a private redis-server (the shared one is never touched); a fresh queue per test. */
let redis: PrivateRedis;

beforeAll(async () => {
  redis = await startPrivateRedis();
});

afterAll(async () => {
  await redis?.stop();
});

const open = (queueName: string): ExpiryScheduler => createBullmqExpiryScheduler({ redisUrl: redis.url, queueName, lockDurationMs: 2000 });

expirySchedulerContract('BullMQ (private redis-server)', async () => {
  const scheduler = open(`contract-${randomUUID()}`);
  return { scheduler, cleanup: () => scheduler.close() };
});

describe('BullMQ expiry scheduler', () => {
  const until = async (condition: () => boolean, timeoutMs = 8000): Promise<void> => {
    const deadline = Date.now() + timeoutMs;
    while (!condition()) {
      if (Date.now() > deadline) throw new Error('condition not met in time');
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  };

  test('jobs live in Redis: a worker that starts later fires what another scheduled', async () => {
    const queueName = `handover-${randomUUID()}`;
    const first = open(queueName);
    await first.schedule('a', Date.now() + 300);
    await first.close();

    const fired: number[] = [];
    const second = open(queueName);
    try {
      expect(await second.size()).toBe(1);
      await second.start(async () => {
        fired.push(Date.now());
        return null;
      });
      await until(() => fired.length === 1);
    } finally {
      await second.close();
    }
  });

  test('two workers on one queue: every job runs on one of them, once per due time', async () => {
    const queueName = `pair-${randomUUID()}`;
    const workers = [open(queueName), open(queueName)];
    const runs = new Map<string, number>();
    const byWorker = [0, 0];
    let concurrentSameKey = 0;
    const active = new Set<string>();
    try {
      await Promise.all(
        workers.map((w, i) =>
          w.start(async (key) => {
            if (active.has(key)) concurrentSameKey++;
            active.add(key);
            await new Promise((resolve) => setTimeout(resolve, 5));
            active.delete(key);
            runs.set(key, (runs.get(key) ?? 0) + 1);
            byWorker[i] = (byWorker[i] ?? 0) + 1;
            // Each job fires twice: re-delayed once, then ended.
            return (runs.get(key) ?? 0) < 2 ? Date.now() + 100 : null;
          }),
        ),
      );
      const keys = Array.from({ length: 100 }, (_, i) => `k${i}`);
      const at = Date.now() + 200;
      await Promise.all(keys.map((key, i) => (workers[i % 2] as ExpiryScheduler).schedule(key, at)));
      await until(() => [...runs.values()].filter((n) => n === 2).length === keys.length);
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect([...runs.values()].every((n) => n === 2)).toBe(true);
      expect(concurrentSameKey).toBe(0);
      expect(byWorker.every((n) => n > 0)).toBe(true);
    } finally {
      await Promise.all(workers.map((w) => w.close()));
    }
  });
});
