import Redis from 'ioredis';
import { coalesceWrites } from '../../src/infra/redis-writes';
import { readsProcessed, startPrivateRedis, type PrivateRedis } from '../support/redis';

/**
 * One write per turn of the event loop (src/infra/redis-writes.ts), on a private Redis: what
 * Redis reads is counted by Redis itself (`INFO stats`, `total_reads_processed`).
 */

let redis: PrivateRedis;
const clients: Redis[] = [];
const connect = async (coalesced: boolean): Promise<Redis> => {
  const plain = new Redis(redis.url, { maxRetriesPerRequest: null, retryStrategy: () => 50 });
  const client = coalesced ? coalesceWrites(plain) : plain;
  client.on('error', () => undefined);
  clients.push(client);
  if (client.status !== 'ready') await new Promise((resolve) => client.once('ready', resolve));
  return client;
};

/** Redis's reads while `work` runs, less the probe's own INFO. */
const readsDuring = async (probe: Redis, work: () => Promise<unknown>): Promise<number> => {
  const before = await readsProcessed(probe);
  await work();
  return (await readsProcessed(probe)) - before - 1;
};

beforeAll(async () => {
  redis = await startPrivateRedis();
});
afterAll(async () => {
  for (const c of clients) c.disconnect();
  await redis.stop();
});

test('fifty commands made in one turn leave in one write at its end, and reach Redis in one read', async () => {
  const probe = await connect(false);
  const coalesced = await connect(true);
  let heldInTheTurn = 0;
  const reads = await readsDuring(probe, () => {
    const answers = Promise.all(Array.from({ length: 50 }, () => coalesced.incr('coalesced')));
    // Still in the turn: nothing has gone to the kernel yet, all fifty wait in the corked socket.
    // (Counting Redis's reads of an uncorked client says nothing: a busy Redis reads many writes at once.)
    if (coalesced.stream.writableCorked === 1) heldInTheTurn = coalesced.stream.writableLength;
    return answers;
  });
  expect(heldInTheTurn).toBeGreaterThanOrEqual(50 * '*2\r\n$4\r\nincr\r\n$9\r\ncoalesced\r\n'.length);
  expect(coalesced.stream.writableCorked).toBe(0);
  expect(reads).toBeLessThanOrEqual(2);
  expect(await probe.get('coalesced')).toBe('50');
});

test('answers come back to their commands, in order, whatever their kinds', async () => {
  const client = await connect(true);
  const answers = await Promise.all([
    client.set('k', 'one'),
    client.get('k'),
    client.append('k', '-two'),
    client.get('k'),
    client.hset('h', 'f', 'v'),
    client.hgetall('h'),
    client.del('k', 'h'),
    client.exists('k'),
    client.eval('return ARGV[1]', 0, 'script'),
  ]);
  expect(answers).toEqual(['OK', 'one', 7, 'one-two', 1, { f: 'v' }, 2, 0, 'script']);
});

test('commands of later turns, a pipeline and a transaction in between, are all answered', async () => {
  const client = await connect(true);
  for (let turn = 0; turn < 20; turn += 1) {
    await new Promise((resolve) => setImmediate(resolve));
    const [, piped, multi] = await Promise.all([
      client.incr('turns'),
      client.pipeline().incr('piped').get('piped').exec(),
      client.multi().incr('multi').exec(),
    ]);
    expect(piped?.[1]?.[1]).toBe(String(turn + 1));
    expect(multi?.[0]?.[1]).toBe(turn + 1);
  }
  expect(await client.get('turns')).toBe('20');
});

test('a subscriber connection still subscribes and hears what is published', async () => {
  const subscriber = await connect(true);
  const publisher = await connect(true);
  const heard = new Promise<string>((resolve) => subscriber.once('message', (_channel: string, message: string) => resolve(message)));
  await subscriber.subscribe('room');
  await publisher.publish('room', 'hello');
  await expect(heard).resolves.toBe('hello');
  await subscriber.unsubscribe('room');
});

test('Redis killed and started again: commands made meanwhile are answered once it is back, none lost', async () => {
  const client = await connect(true);
  await client.set('before', '1');
  await redis.kill();
  const pending = Promise.all(Array.from({ length: 10 }, (_, i) => client.set(`during-${i}`, String(i))));
  await new Promise((resolve) => setTimeout(resolve, 100));
  await redis.restart();
  await expect(pending).resolves.toEqual(Array.from({ length: 10 }, () => 'OK'));
  expect(await client.mget(Array.from({ length: 10 }, (_, i) => `during-${i}`))).toEqual(Array.from({ length: 10 }, (_, i) => String(i)));
});
