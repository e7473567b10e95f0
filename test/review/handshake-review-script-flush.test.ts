/**
 * The tunnel cluster's device scripts go by their SHA1 (ioredis `defineCommand`: EVALSHA, the
 * whole text with EVAL once per connection and again after NOSCRIPT). Checked here against a
 * private redis-server, by what Redis itself saw (`MONITOR`), for every way Redis can lose its
 * scripts: `SCRIPT FLUSH` on the same connection, and a restart (a new connection). The refresh
 * of connected devices is a *pipeline*: ioredis answers its NOSCRIPT by sending the command
 * again with the text outside the pipeline (node_modules/ioredis/built/Script.js `execute`),
 * and the pipeline waits for that answer; these tests hold it to that.
 */
import Redis from 'ioredis';
import { randomUUID } from 'node:crypto';
import { createLogger } from '../../src/logger';
import type { TunnelCluster } from '../../src/tunnel/cluster';
import { createRedisCluster } from '../../src/tunnel/redis-cluster';
import { startPrivateRedis, type PrivateRedis } from '../support/redis';

const TTL_MS = 60_000;

let server: PrivateRedis;
let cluster: TunnelCluster;
let redis: Redis;

beforeAll(async () => {
  server = await startPrivateRedis();
  cluster = await createRedisCluster({ url: server.url, adapter: 'sharded', logger: createLogger('silent'), prefix: 'review', deviceTtlMs: TTL_MS });
  redis = new Redis(server.url, { maxRetriesPerRequest: null });
}, 30_000);

afterAll(async () => {
  redis?.disconnect();
  await cluster?.close();
  await server?.stop();
});

/** The commands of the device scripts Redis receives while `work` runs (not those a script runs). */
async function watched(work: () => Promise<void>): Promise<string[]> {
  const monitor = await redis.monitor();
  const commands: string[] = [];
  monitor.on('monitor', (_time: string, args: string[], source: string) => {
    if (!source.includes('lua') && /^eval/i.test(args[0] ?? '')) commands.push(`${args[0]?.toLowerCase()} ${args[2] ?? ''} ${args[3] ?? ''}`);
  });
  // MONITOR is in effect once its connection answers a command.
  await redis.ping();
  await work();
  await redis.ping();
  await new Promise((resolve) => setTimeout(resolve, 100));
  monitor.disconnect();
  return commands;
}

const deviceKey = (uuid: string): string => `review:device:${uuid}`;

/** Shortens a device's record, so that a refresh shows by its PTTL. */
async function shorten(uuid: string): Promise<void> {
  expect(await redis.pexpire(deviceKey(uuid), 5_000)).toBe(1);
}

test('after SCRIPT FLUSH, a pipelined refresh of many devices is given the script again and every record is refreshed', async () => {
  const devices: Array<{ uuid: string; claim: number }> = [];
  for (let i = 0; i < 20; i++) {
    const uuid = randomUUID();
    devices.push({ uuid, claim: await cluster.claimDevice(uuid, `socket-${i}`) });
  }
  // Once by hash: the connection has the script.
  await cluster.refreshDevices(devices);
  for (const d of devices) await shorten(d.uuid);
  await redis.script('FLUSH');

  const commands = await watched(() => cluster.refreshDevices(devices));
  // Every refresh first went by hash (NOSCRIPT), then the text went once and the rest by hash again.
  expect(commands.filter((c) => c.startsWith('evalsha'))).toHaveLength(20 + 19);
  expect(commands.filter((c) => c.startsWith('eval '))).toHaveLength(1);
  for (const d of devices) {
    expect(await redis.pttl(deviceKey(d.uuid))).toBeGreaterThan(TTL_MS - 5_000);
    expect(await redis.get(deviceKey(d.uuid))).toMatch(new RegExp(`^${d.claim} `));
  }
});

test('after SCRIPT FLUSH, a claim, a lookup and a release each go through', async () => {
  const uuid = randomUUID();
  await redis.script('FLUSH');
  const claim = await cluster.claimDevice(uuid, 'socket-a');
  expect(await redis.get(deviceKey(uuid))).toMatch(new RegExp(`^${claim} `));
  await redis.script('FLUSH');
  // A device of another owner is looked up (this process's own answers come from memory).
  const other = randomUUID();
  await redis.set(deviceKey(other), `123 ${randomUUID()}:socket-x`);
  expect(await cluster.remoteDevice(other)).toEqual({ connected: false, claim: 123 });
  await redis.script('FLUSH');
  await cluster.releaseDevice(uuid, claim);
  expect(await redis.exists(deviceKey(uuid))).toBe(0);
});

test('after a restart of Redis (empty, a new connection), the pipelined refresh writes the lost records again', async () => {
  const devices: Array<{ uuid: string; claim: number }> = [];
  for (let i = 0; i < 5; i++) {
    const uuid = randomUUID();
    devices.push({ uuid, claim: await cluster.claimDevice(uuid, `socket-${i}`) });
  }
  await server.restart();
  // ioredis reconnects with a backoff; the refresh waits in its offline queue meanwhile.
  await cluster.refreshDevices(devices);
  for (const d of devices) {
    expect(await redis.get(deviceKey(d.uuid))).toMatch(new RegExp(`^${d.claim} `));
    expect(await redis.pttl(deviceKey(d.uuid))).toBeGreaterThan(TTL_MS - 5_000);
  }
  // And the scripts are by hash again afterwards.
  const commands = await watched(() => cluster.refreshDevices(devices));
  expect(commands.every((c) => c.startsWith('evalsha'))).toBe(true);
  expect(commands).toHaveLength(5);
}, 30_000);
