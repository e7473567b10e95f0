import Redis from 'ioredis';
import { redisOneAtATime } from '../../src/infra/redis-one-at-a-time';
import { startPrivateRedis, type PrivateRedis } from '../support/redis';

/** Leases in a real Redis: what keeps a user's ownership changes one at a time across API processes. */

let redis: PrivateRedis;
const clients: Redis[] = [];
const client = async (): Promise<Redis> => {
  const c = new Redis(redis.url, { maxRetriesPerRequest: null, retryStrategy: () => 50 });
  c.on('error', () => undefined);
  clients.push(c);
  await new Promise((resolve) => c.once('ready', resolve));
  return c;
};
const tick = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

beforeAll(async () => {
  redis = await startPrivateRedis();
});
afterAll(async () => {
  for (const c of clients) c.disconnect();
  await redis.stop();
});

const options = { leaseMs: 5_000, waitMs: 5_000, callTimeoutMs: 500, pauseMs: 2_000 };

test('two processes (two clients): work on one key never overlaps, on other keys it does; the lease is given back', async () => {
  const [a, b] = [redisOneAtATime(await client(), 'test', options), redisOneAtATime(await client(), 'test', options)];
  let running = 0;
  let most = 0;
  const work = async (): Promise<void> => {
    running += 1;
    most = Math.max(most, running);
    await tick(30);
    running -= 1;
  };
  await Promise.all(Array.from({ length: 8 }, (_, i) => (i % 2 === 0 ? a : b).run('user-1', work)));
  expect(most).toBe(1);

  let together = 0;
  let peak = 0;
  const other = async (): Promise<void> => {
    together += 1;
    peak = Math.max(peak, together);
    await tick(50);
    together -= 1;
  };
  await Promise.all([a.run('user-2', other), b.run('user-3', other)]);
  expect(peak).toBe(2);
  const probe = await client();
  expect(await probe.keys('hhc:lease:test:*')).toEqual([]);
});

test('a failure in the work gives the lease back too', async () => {
  const c = await client();
  const a = redisOneAtATime(c, 'fail', options);
  await expect(a.run('k', () => Promise.reject(new Error('no')))).rejects.toThrow('no');
  expect(await c.exists('hhc:lease:fail:k')).toBe(0);
});

test('a lease its holder never gave back (a process killed) lets the next in once it lapses', async () => {
  const c = await client();
  await c.set('hhc:lease:lapse:k', 'a dead holder', 'PX', 300);
  const a = redisOneAtATime(c, 'lapse', options);
  const started = Date.now();
  await a.run('k', async () => undefined);
  expect(Date.now() - started).toBeGreaterThanOrEqual(250);
});

test('Redis not answering: the work runs without the lease, after at most the call timeout, and says so', async () => {
  const c = await client();
  const unguarded: string[] = [];
  const a = redisOneAtATime(c, 'down', { ...options, callTimeoutMs: 200 }, (key) => unguarded.push(key));
  redis.pause();
  try {
    const started = Date.now();
    await expect(a.run('k', async () => 'done')).resolves.toBe('done');
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(unguarded).toEqual(['k']);
    // Not asked again for a while: the next work runs at once.
    const next = Date.now();
    await a.run('k2', async () => undefined);
    expect(Date.now() - next).toBeLessThan(150);
    expect(unguarded).toEqual(['k', 'k2']);
  } finally {
    redis.resume();
  }
  // The lease the timed-out call took once Redis went on is given back at once: nobody waits for it to lapse.
  for (let i = 0; i < 50 && (await c.exists('hhc:lease:down:k')) === 1; i++) await tick(20);
  expect(await c.exists('hhc:lease:down:k')).toBe(0);
});
