import Redis from 'ioredis';
import { SUBSCRIBER_OPTIONS } from '../../src/infra/redis-subscriber';
import { startPrivateRedis, type PrivateRedis } from '../support/redis';

/**
 * A subscribing connection survives Redis restarts when something subscribes in the moment
 * between a reconnection and ioredis's readiness check (as the tunnel adapter does when a
 * room appears). With the check, Redis refuses its `INFO` on a connection already in
 * subscriber mode, ioredis drops the connection and never becomes ready again.
 */
describe('Redis subscriber connections', () => {
  let redis: PrivateRedis;
  beforeAll(async () => {
    redis = await startPrivateRedis();
  });
  afterAll(async () => {
    await redis?.stop();
  });

  const restartsWithSubscriptionsOnConnect = async (options: typeof SUBSCRIBER_OPTIONS | Record<string, never>): Promise<{ ready: boolean; refused: string[]; received: string[] }> => {
    const sub = new Redis(redis.url, { maxRetriesPerRequest: null, retryStrategy: () => 50, connectionName: 'test:sub', ...options });
    const refused: string[] = [];
    sub.on('error', (error: Error) => {
      if (!/ECONNREFUSED|ECONNRESET|Connection is closed/.test(error.message)) refused.push(error.message);
    });
    const received: string[] = [];
    sub.on('message', (_channel: string, message: string) => received.push(message));
    let connects = 0;
    sub.on('connect', () => {
      sub.subscribe(`room-${connects++}`).catch((error: Error) => refused.push(error.message));
    });
    const readyWithin = async (ms: number): Promise<void> => {
      const deadline = Date.now() + ms;
      while (sub.status !== 'ready' && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    };
    await readyWithin(5000);
    for (let i = 0; i < 3; i++) {
      await redis.kill();
      await redis.restart();
      await readyWithin(5000);
    }
    const ready = sub.status === 'ready';
    if (ready) {
      // Subscriptions made before the restarts are back, and deliver.
      const pub = new Redis(redis.url);
      await pub.publish('room-0', 'after restarts');
      const deadline = Date.now() + 5000;
      while (received.length === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
      pub.disconnect();
    }
    sub.disconnect();
    return { ready, refused, received };
  };

  test('with SUBSCRIBER_OPTIONS it is ready again after each restart, and its subscriptions deliver', async () => {
    const outcome = await restartsWithSubscriptionsOnConnect(SUBSCRIBER_OPTIONS);
    expect(outcome.refused).toEqual([]);
    expect(outcome.ready).toBe(true);
    expect(outcome.received).toEqual(['after restarts']);
  }, 60_000);

  test("with ioredis's readiness check (the default) the same connection is refused and stays down", async () => {
    const outcome = await restartsWithSubscriptionsOnConnect({});
    expect(outcome.ready).toBe(false);
    expect(outcome.refused.some((message) => /subscriber mode|Can't execute 'info'/.test(message))).toBe(true);
  }, 60_000);
});
