/**
 * Part 3 of `npm run bench:scale`: what an online hub costs in Redis memory, measured on a
 * private redis-server (`INFO memory` before and after): its presence-expiry job (the
 * service's own BullMQ scheduler, one delayed job per online device) and a tunnel room
 * subscribed through sharded pub/sub (`SSUBSCRIBE`, what the sharded Socket.IO adapter does
 * per room in use on a process).
 *
 * BENCH_REDIS_KEYS (20,000) jobs and channels.
 */
import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import { createBullmqExpiryScheduler } from '../src/presence/bullmq-scheduler';
import { startPrivateRedis } from '../test/support/redis';

export interface RedisMemory {
  readonly count: number;
  readonly bytesPerJob: number;
  readonly bytesPerRoom: number;
}

async function usedMemory(redis: Redis): Promise<number> {
  const info = await redis.info('memory');
  const match = /^used_memory:(\d+)/m.exec(info);
  return Number(match?.[1] ?? 0);
}

export async function measureRedisMemory(): Promise<RedisMemory> {
  const count = Number(process.env.BENCH_REDIS_KEYS ?? 20_000);
  const server = await startPrivateRedis();
  const probe = new Redis(server.url);
  const subscriber = new Redis(server.url);
  const scheduler = createBullmqExpiryScheduler({ redisUrl: server.url });
  try {
    const beforeJobs = await usedMemory(probe);
    // Due in an hour: they stay delayed while measured (no worker is started).
    const at = Date.now() + 3_600_000;
    for (let i = 0; i < count; i += 500) {
      await Promise.all(Array.from({ length: Math.min(500, count - i) }, () => scheduler.schedule(randomUUID(), at)));
    }
    const afterJobs = await usedMemory(probe);
    for (let i = 0; i < count; i += 500) {
      const channels = Array.from({ length: Math.min(500, count - i) }, () => `device:${randomUUID()}`);
      await subscriber.ssubscribe(...channels);
    }
    const afterRooms = await usedMemory(probe);
    return { count, bytesPerJob: Math.round((afterJobs - beforeJobs) / count), bytesPerRoom: Math.round((afterRooms - afterJobs) / count) };
  } finally {
    await scheduler.close();
    subscriber.disconnect();
    probe.disconnect();
    await server.stop();
  }
}

export function redisMemoryTable(m: RedisMemory): string {
  return [
    '| what | measured | Redis memory per item |',
    '| --- | ---: | ---: |',
    `| presence-expiry job (BullMQ delayed job, one per online device) | ${m.count.toLocaleString('en-US')} | ${m.bytesPerJob.toLocaleString('en-US')} B |`,
    `| tunnel room subscribed by a process (sharded pub/sub channel) | ${m.count.toLocaleString('en-US')} | ${m.bytesPerRoom.toLocaleString('en-US')} B |`,
  ].join('\n');
}
