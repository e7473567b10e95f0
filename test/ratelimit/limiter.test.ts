import Redis from 'ioredis';
import { randomUUID } from 'node:crypto';
import {
  createMemoryRateLimiter,
  createRedisRateLimiter,
  DEFAULT_LIMITS,
  parseRateLimits,
  type RateLimiter,
  type Tier,
  type TierLimit,
} from '../../src/ratelimit/limiter';
import { startPrivateRedis, type PrivateRedis } from '../support/redis';

const limits: Record<Tier, TierLimit> = { ...DEFAULT_LIMITS, login: { points: 3, durationSeconds: 60 }, general: { points: 2, durationSeconds: 1 } };

function limiterContract(name: string, open: () => Promise<{ limiter: RateLimiter; cleanup: () => Promise<void> }>): void {
  describe(`rate limiter contract: ${name}`, () => {
    let limiter: RateLimiter;
    let cleanup: () => Promise<void>;
    beforeAll(async () => ({ limiter, cleanup } = await open()));
    afterAll(() => cleanup());

    test('the allowed number passes with a falling remaining count; the next is refused', async () => {
      const key = randomUUID();
      const seen = [];
      for (let i = 0; i < 3; i++) seen.push(await limiter.consume('login', key));
      expect(seen.map((d) => [d.allowed, d.remaining, d.limit])).toEqual([
        [true, 2, 3],
        [true, 1, 3],
        [true, 0, 3],
      ]);
      const refused = await limiter.consume('login', key);
      expect(refused.allowed).toBe(false);
      expect(refused.remaining).toBe(0);
      expect(refused.retryAfter).toBeGreaterThanOrEqual(1);
      expect(refused.retryAfter).toBeLessThanOrEqual(60);
      const nowSeconds = Math.floor(Date.now() / 1000);
      expect(refused.resetAt).toBeGreaterThan(nowSeconds);
      expect(refused.resetAt).toBeLessThanOrEqual(nowSeconds + 61);
    });

    test('keys and tiers are counted separately', async () => {
      const a = randomUUID();
      for (let i = 0; i < 3; i++) await limiter.consume('login', a);
      expect((await limiter.consume('login', a)).allowed).toBe(false);
      expect((await limiter.consume('login', randomUUID())).allowed).toBe(true);
      expect((await limiter.consume('refresh', a)).allowed).toBe(true);
    });

    test('a refund gives one point of the open window back', async () => {
      const key = randomUUID();
      for (let i = 0; i < 3; i++) await limiter.consume('login', key);
      await limiter.refund('login', key);
      expect(await limiter.consume('login', key)).toMatchObject({ allowed: true, remaining: 0 });
      expect((await limiter.consume('login', key)).allowed).toBe(false);
    });

    test('the window resets', async () => {
      const key = randomUUID();
      await limiter.consume('general', key);
      await limiter.consume('general', key);
      expect((await limiter.consume('general', key)).allowed).toBe(false);
      await new Promise((r) => setTimeout(r, 1100));
      expect((await limiter.consume('general', key)).allowed).toBe(true);
    });
  });
}

limiterContract('memory', async () => {
  const limiter = createMemoryRateLimiter(limits);
  return { limiter, cleanup: async () => undefined };
});

describe('Redis counters', () => {
  let redis: PrivateRedis;
  const clients: Redis[] = [];
  /** A connected client: the limiter fails open until its client is ready. */
  const connect = async (): Promise<Redis> => {
    const c = new Redis(redis.url, { maxRetriesPerRequest: null, retryStrategy: () => 50 });
    c.on('error', () => undefined);
    clients.push(c);
    await new Promise((resolve) => c.once('ready', resolve));
    return c;
  };
  beforeAll(async () => {
    redis = await startPrivateRedis();
  });
  afterAll(async () => {
    for (const c of clients) c.disconnect();
    await redis.stop();
  });

  limiterContract('redis', async () => ({ limiter: createRedisRateLimiter(await connect(), limits, () => undefined), cleanup: async () => undefined }));

  test('two limiters on one Redis (two processes) share one budget', async () => {
    const a = createRedisRateLimiter(await connect(), limits, () => undefined);
    const b = createRedisRateLimiter(await connect(), limits, () => undefined);
    const key = randomUUID();
    await a.consume('login', key);
    await b.consume('login', key);
    await a.consume('login', key);
    expect((await b.consume('login', key)).allowed).toBe(false);
  });

  test('while Redis is down requests pass (fail open, reported), and counting resumes when it is back', async () => {
    const errors: Tier[] = [];
    const client = await connect();
    const limiter = createRedisRateLimiter(client, limits, (tier) => errors.push(tier));
    const key = randomUUID();
    await redis.kill();
    await new Promise((r) => setTimeout(r, 100));
    for (let i = 0; i < 5; i++) expect((await limiter.consume('login', key)).allowed).toBe(true);
    expect(errors.length).toBeGreaterThanOrEqual(5);
    expect(errors[0]).toBe('login');

    await redis.restart();
    const deadline = Date.now() + 5000;
    while (client.status !== 'ready' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    const counted = [];
    for (let i = 0; i < 4; i++) counted.push((await limiter.consume('login', key)).allowed);
    expect(counted).toEqual([true, true, true, false]);
  });

  test('the pause after a stall ends on time though the wall clock is stepped back (it runs on the monotonic clock)', async () => {
    const errors: Error[] = [];
    const limiter = createRedisRateLimiter(await connect(), limits, (_tier, error) => errors.push(error), { timeoutMs: 300, pauseMs: 800 });
    redis.pause();
    try {
      expect((await limiter.consume('login', randomUUID())).allowed).toBe(true);
    } finally {
      redis.resume();
    }
    expect(errors.map((e) => e.name)).toEqual(['StoreTimeoutError']);
    const realNow = Date.now;
    try {
      Date.now = () => realNow() - 3_600_000;
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      errors.length = 0;
      // Asked again (no StorePausedError), and counted.
      const key = randomUUID();
      expect((await limiter.consume('login', key)).remaining).toBe(2);
      expect(errors).toEqual([]);
    } finally {
      Date.now = realNow;
    }
  });

  test('a stalled Redis (connected, answering nothing) holds no request: let through after the timeout, then not asked for a while', async () => {
    const errors: Error[] = [];
    // The timeout and the pause are long against a stall of this process on a busy machine: a
    // request Redis answers must not be taken for stalled, and the third request below must come
    // while the pause lasts. Its end is waited for, not slept through.
    const guard = { timeoutMs: 1000, pauseMs: 3000 };
    const limiter = createRedisRateLimiter(await connect(), limits, (_tier, error) => errors.push(error), guard);
    const key = randomUUID();
    expect((await limiter.consume('login', key)).remaining).toBe(2);
    redis.pause();
    try {
      // Redis answers nothing now: both are let through by the timeout (a StoreTimeoutError each).
      const decisions = await Promise.all([limiter.consume('login', key), limiter.consume('general', key)]);
      expect(decisions.map((d) => d.allowed)).toEqual([true, true]);
      expect(errors.map((e) => e.name)).toEqual(['StoreTimeoutError', 'StoreTimeoutError']);
      // Now Redis is not asked: the next request passes without waiting for it (while it is still stopped).
      expect((await limiter.consume('login', key)).allowed).toBe(true);
      expect(errors.map((e) => e.name)).toEqual(['StoreTimeoutError', 'StoreTimeoutError', 'StorePausedError']);
    } finally {
      redis.resume();
    }
    // The pause ends by itself: a request on a key of its own is answered by Redis again, with no error.
    for (;;) {
      const before = errors.length;
      expect((await limiter.consume('general', randomUUID())).allowed).toBe(true);
      if (errors.length === before) break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    // Redis counts again, including the stalled call it answered late (3 points: 2 left, 1
    // taken late, the last one now); the one let through unasked was not counted.
    expect(await limiter.consume('login', key)).toMatchObject({ allowed: true, remaining: 0 });
    expect((await limiter.consume('login', key)).allowed).toBe(false);
  });
});

describe('RATE_LIMITS overrides', () => {
  test('parses tier=points/seconds and keeps the defaults elsewhere', () => {
    const parsed = parseRateLimits('login=3/2, register=1/5');
    expect(parsed.login).toEqual({ points: 3, durationSeconds: 2 });
    expect(parsed.register).toEqual({ points: 1, durationSeconds: 5 });
    expect(parsed.general).toEqual({ points: 100, durationSeconds: 60 });
  });

  test.each(['nope=1/2', 'login=0/5', 'login=5', 'login=a/b'])('refuses %s', (spec) => {
    expect(() => parseRateLimits(spec)).toThrow();
  });

  test('the defaults are the interface table', () => {
    expect(DEFAULT_LIMITS.login).toEqual({ points: 5, durationSeconds: 60 });
    expect(DEFAULT_LIMITS.refresh).toEqual({ points: 10, durationSeconds: 60 });
    expect(DEFAULT_LIMITS.auth).toEqual({ points: 5, durationSeconds: 60 });
    expect(DEFAULT_LIMITS.register).toEqual({ points: 10, durationSeconds: 3600 });
    expect(DEFAULT_LIMITS.heartbeat).toEqual({ points: 10, durationSeconds: 60 });
    expect(DEFAULT_LIMITS.general).toEqual({ points: 100, durationSeconds: 60 });
    expect(DEFAULT_LIMITS.tunnelMessage).toEqual({ points: 50, durationSeconds: 10 });
    expect(DEFAULT_LIMITS.tunnelSubscribe).toEqual({ points: 10, durationSeconds: 60 });
    expect(DEFAULT_LIMITS.sync).toEqual({ points: 1000, durationSeconds: 60 });
  });
});
