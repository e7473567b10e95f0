/**
 * One write per turn (src/infra/redis-writes.ts) against ioredis as it is: the CPU a
 * handshake-shaped sequence of Redis commands costs this process and Redis, many of them at
 * once, as a process taking over a dead one's hubs makes them. Rounds alternate the two
 * clients on a private `redis-server`; medians are printed.
 *
 *   npm run bench:redis-writes            (BENCH_HANDSHAKES=4000 BENCH_CONCURRENCY=200 BENCH_ROUNDS=5)
 *
 * A "handshake" here is eight commands, one after another as a handshake awaits them (a
 * script call, a subscription check, a claim, a lookup, two publications, a counter and its
 * refund), with `BENCH_CONCURRENCY` of them in flight: each turn of the event loop then has
 * the next command of many handshakes to send.
 */
import Redis from 'ioredis';
import { coalesceWrites } from '../src/infra/redis-writes';
import { startPrivateRedis } from '../test/support/redis';

const HANDSHAKES = Number(process.env.BENCH_HANDSHAKES ?? 4000);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 200);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);

const SCRIPT = "redis.call('SET', KEYS[1], ARGV[1], 'PX', 90000) return redis.call('GET', KEYS[1])";

async function handshake(client: Redis, n: number): Promise<void> {
  const key = `bench:device:${n}`;
  await client.eval(SCRIPT, 1, key, 'owner');
  await client.incr(`bench:limit:${n % 500}`);
  await client.ping();
  await client.set(key, 'claimed', 'PX', 90_000);
  await client.get(key);
  await client.publish(`bench:notice:${n % 16}`, key);
  await client.publish(`bench:status:${n % 16}`, 'online');
  await client.decr(`bench:limit:${n % 500}`);
}

/** This process's and Redis's CPU per handshake, in microseconds. */
async function round(client: Redis, probe: Redis): Promise<{ own: number; redis: number }> {
  const redisCpu = async (): Promise<number> => {
    const info = await probe.info('cpu');
    const field = (name: string): number => Number(new RegExp(`${name}:([\\d.]+)`).exec(info)?.[1] ?? 0);
    return field('used_cpu_sys') + field('used_cpu_user');
  };
  const redisBefore = await redisCpu();
  const before = process.cpuUsage();
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < HANDSHAKES) await handshake(client, next++);
    }),
  );
  const used = process.cpuUsage(before);
  const redisAfter = await redisCpu();
  return { own: (used.user + used.system) / HANDSHAKES, redis: ((redisAfter - redisBefore) * 1e6) / HANDSHAKES };
}

const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? NaN;

async function main(): Promise<void> {
  const redis = await startPrivateRedis();
  const connect = async (coalesced: boolean): Promise<Redis> => {
    const plain = new Redis(redis.url, { maxRetriesPerRequest: null });
    const client = coalesced ? coalesceWrites(plain) : plain;
    await new Promise((resolve) => client.once('ready', resolve));
    return client;
  };
  try {
    const probe = await connect(false);
    const clients = { plain: await connect(false), coalesced: await connect(true) };
    // Warm-up: the script loaded, the code compiled.
    await round(clients.plain, probe);
    await round(clients.coalesced, probe);
    const results = { plain: [] as Array<{ own: number; redis: number }>, coalesced: [] as Array<{ own: number; redis: number }> };
    for (let r = 0; r < ROUNDS; r++) {
      results.plain.push(await round(clients.plain, probe));
      results.coalesced.push(await round(clients.coalesced, probe));
    }
    const row = (name: 'plain' | 'coalesced'): { own: number; redis: number } => ({
      own: median(results[name].map((x) => x.own)),
      redis: median(results[name].map((x) => x.redis)),
    });
    const plain = row('plain');
    const coalesced = row('coalesced');
    console.log(`${HANDSHAKES} handshakes of 8 commands, ${CONCURRENCY} at once, medians of ${ROUNDS} rounds (CPU per handshake):`);
    console.log(`  ioredis as it is:   this process ${plain.own.toFixed(0)} µs, Redis ${plain.redis.toFixed(0)} µs`);
    console.log(`  one write per turn: this process ${coalesced.own.toFixed(0)} µs, Redis ${coalesced.redis.toFixed(0)} µs`);
    console.log(`  ratio: this process ${(coalesced.own / plain.own).toFixed(2)}, Redis ${(coalesced.redis / plain.redis).toFixed(2)}`);
    for (const client of [probe, clients.plain, clients.coalesced]) client.disconnect();
  } finally {
    await redis.stop();
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
