import Redis from 'ioredis';
import { createRedisLease } from '../../src/projections/lease';
import { createLocalWatermark, createRedisWatermark } from '../../src/projections/watermark';
import { createMemoryReadStore } from '../../src/infra/readstore/memory';
import { startPrivateRedis, type PrivateRedis } from '../support/redis';
import { startTcpProxy } from '../support/tcp-proxy';

const pos = (n: number) => ({ commit: BigInt(n), prepare: BigInt(n) });

describe('projector lease in Redis', () => {
  let redis: PrivateRedis;
  const clients: Redis[] = [];
  const client = (): Redis => {
    const c = new Redis(redis.url, { maxRetriesPerRequest: 1 });
    c.on('error', () => undefined);
    clients.push(c);
    return c;
  };

  beforeAll(async () => {
    redis = await startPrivateRedis();
  });
  afterAll(async () => {
    for (const c of clients) c.disconnect();
    await redis.stop();
  });

  test('one holder at a time; the standby takes over when the holder stops renewing', async () => {
    // A lease long against a stalled event loop on a busy machine: the holder gives its lease
    // up once no renewal has answered within its time, so a short one (a few hundred ms) is
    // lost, rightly, whenever this process is not scheduled for that long.
    const ttlMs = 2000;
    const a = createRedisLease(client(), 'lease:test1', ttlMs);
    const standby = client();
    const bids = jest.spyOn(standby, 'eval');
    const b = createRedisLease(standby, 'lease:test1', ttlMs);
    await a.acquire();
    let bAcquired = false;
    const bWaiting = b.acquire().then(() => (bAcquired = true));
    // The standby bids every bidEveryMs: wait until it has been refused over more than a lease
    // time (a bid after the last refused one has gone out), so the holder has renewed meanwhile.
    const refusedBids = Math.floor(ttlMs / b.bidEveryMs) + 2;
    while (bids.mock.calls.length <= refusedBids && !bAcquired) await new Promise((r) => setTimeout(r, 20));
    expect(bAcquired).toBe(false);
    expect(a.isHeld()).toBe(true);

    await a.release();
    await bWaiting;
    expect(b.isHeld()).toBe(true);
    await b.release();
  });

  test('a holder cut off from Redis stops holding before anyone else can take the lease; each tenure has a greater epoch', async () => {
    const proxy = await startTcpProxy(redis.port);
    try {
      // The holder's connection waits for ever, as the service's do (maxRetriesPerRequest: null).
      const cutOff = new Redis(proxy.url(redis.url), { maxRetriesPerRequest: null });
      cutOff.on('error', () => undefined);
      clients.push(cutOff);
      const a = createRedisLease(cutOff, 'lease:cut', 600);
      const b = createRedisLease(client(), 'lease:cut', 600);
      await a.acquire();
      const first = a.epoch();
      expect(first).toEqual(expect.any(Number));
      let aLostAt: number | null = null;
      void a.lost().then(() => (aLostAt = Date.now()));

      proxy.blackhole();
      await b.acquire();
      const takenAt = Date.now();
      // When the other process holds it, the cut-off one has stopped already, and says so.
      expect(aLostAt).not.toBeNull();
      expect(aLostAt ?? Infinity).toBeLessThanOrEqual(takenAt);
      expect(a.isHeld()).toBe(false);
      expect(a.epoch()).toBeNull();
      expect(b.epoch()).toBeGreaterThan(first ?? Infinity);
      await b.release();
    } finally {
      proxy.heal({ reset: true });
      await proxy.close();
    }
  }, 20_000);

  test('a holder that loses its key learns it has lost the lease', async () => {
    const raw = client();
    const a = createRedisLease(client(), 'lease:test2', 300);
    await a.acquire();
    await raw.set('lease:test2', 'somebody-else');
    await a.lost();
    expect(a.isHeld()).toBe(false);
  });
});

describe('read-your-writes watermark', () => {
  test('locally: a waiter resolves once the position is reached, or false at the timeout', async () => {
    const w = createLocalWatermark();
    const waiting = w.waitFor(pos(10), 1000);
    w.advance(pos(5));
    w.advance(pos(12));
    expect(await waiting).toBe(true);
    expect(await w.waitFor(pos(12), 10)).toBe(true);
    expect(await w.waitFor(pos(13), 20)).toBe(false);
    await w.close();
  });

  test('across processes: a position published by the projector reaches another process through Redis', async () => {
    const redis = await startPrivateRedis();
    const conns = Array.from({ length: 4 }, () => new Redis(redis.url));
    const [pubA, subA, pubB, subB] = conns as [Redis, Redis, Redis, Redis];
    const store = createMemoryReadStore();
    const projectorSide = await createRedisWatermark(pubA, subA, store);
    const apiSide = await createRedisWatermark(pubB, subB, store);
    try {
      const waiting = apiSide.waitFor(pos(42), 2000);
      projectorSide.advance(pos(42));
      expect(await waiting).toBe(true);
      expect(apiSide.current()).toEqual(pos(42));
    } finally {
      await projectorSide.close();
      await apiSide.close();
      for (const c of conns) c.disconnect();
      await redis.stop();
    }
  });

  test('a missed message is covered by polling the stored checkpoint', async () => {
    const redis = await startPrivateRedis();
    const conns = Array.from({ length: 2 }, () => new Redis(redis.url));
    const [pub, sub] = conns as [Redis, Redis];
    const store = createMemoryReadStore();
    const apiSide = await createRedisWatermark(pub, sub, store, 20);
    try {
      const waiting = apiSide.waitFor(pos(7), 2000);
      await store.setCheckpoint('projector', '7/7');
      expect(await waiting).toBe(true);
    } finally {
      await apiSide.close();
      for (const c of conns) c.disconnect();
      await redis.stop();
    }
  });
});
