import Redis from 'ioredis';
import { createMemoryReadStore } from '../../src/infra/readstore/memory';
import type { GlobalPosition } from '../../src/infra/eventstore/port';
import { createRedisWatermark, type Watermark } from '../../src/projections/watermark';
import { startPrivateRedis, type PrivateRedis } from '../support/redis';

/**
 * The read-your-writes watermark across processes follows the projector's position on a
 * Redis channel. Its subscription must survive the connection's start: ioredis writes a
 * SUBSCRIBE issued after the TCP connect but before its own ready check, which that
 * subscription then makes fail; the connection is reopened without it. An API process
 * whose watermark lost it never saw the projector's progress again, and its readiness
 * stayed "behind" (test/api/readiness.test.ts failed that way one run in a few).
 */

const pos = (n: number): GlobalPosition => ({ commit: BigInt(n), prepare: BigInt(n) });

let redis: PrivateRedis;
const connections: Redis[] = [];
const watermarks: Watermark[] = [];

beforeAll(async () => {
  redis = await startPrivateRedis();
});
afterEach(async () => {
  for (const w of watermarks.splice(0)) await w.close();
  for (const c of connections.splice(0)) c.disconnect();
});
afterAll(async () => {
  await redis?.stop();
});

function connect(): Redis {
  const connection = new Redis(redis.url, { maxRetriesPerRequest: null });
  connection.on('error', () => undefined);
  connections.push(connection);
  return connection;
}

test('a watermark created in the window between connect and ready still hears the projector', async () => {
  const store = createMemoryReadStore();
  const projectorSide = await createRedisWatermark(connect(), connect(), store);
  watermarks.push(projectorSide);

  const publisher = connect();
  const subscriber = connect();
  // The moment ioredis has its TCP connection and has not yet run its ready check.
  const created = new Promise<Watermark>((resolve, reject) => {
    subscriber.once('connect', () => {
      createRedisWatermark(publisher, subscriber, store).then(resolve, reject);
    });
  });
  const apiSide = await created;
  watermarks.push(apiSide);

  // Nothing in the stored checkpoint: only the published position can reach the API side.
  projectorSide.advance(pos(42));
  expect(await apiSide.waitFor(pos(42), 5000)).toBe(true);
  expect(apiSide.current()).toEqual(pos(42));
});

test('after its Redis connection is cut, the watermark subscribes again and catches up from the stored checkpoint', async () => {
  const store = createMemoryReadStore();
  const projectorSide = await createRedisWatermark(connect(), connect(), store);
  watermarks.push(projectorSide);
  const subscriber = connect();
  const apiSide = await createRedisWatermark(connect(), subscriber, store);
  watermarks.push(apiSide);

  // The projector applies position 5 while the API side is disconnected: the message is lost.
  const reconnected = new Promise<void>((resolve) => subscriber.once('ready', () => resolve()));
  subscriber.disconnect(true);
  await store.setCheckpoint('projector', '5/5');
  await reconnected;
  // Nobody waits (no polling): the reconnection itself reads the checkpoint.
  for (let i = 0; i < 100 && apiSide.current() === null; i++) await new Promise((resolve) => setTimeout(resolve, 20));
  expect(apiSide.current()).toEqual(pos(5));

  projectorSide.advance(pos(9));
  expect(await apiSide.waitFor(pos(9), 5000)).toBe(true);
});
