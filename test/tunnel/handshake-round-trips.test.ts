import Redis from 'ioredis';
import { createUser, startTestService, type TestService } from '../support/harness';
import { connect, deviceToken, registerHub } from '../support/tunnel';

/**
 * What one device handshake asks of Redis in distributed mode, seen by the server itself
 * (`MONITOR` on the stack's private Redis): the commands the service sends, not those its
 * scripts run inside Redis, and the bytes they take (`INFO stats`).
 */

let service: TestService;
let redis: Redis;
beforeAll(async () => {
  service = await startTestService('distributed');
  redis = new Redis(service.redis?.url ?? '', { lazyConnect: true });
  await redis.connect();
}, 60_000);
afterAll(async () => {
  redis?.disconnect();
  await service?.stop();
});

const inputBytes = async (): Promise<number> => Number(/total_net_input_bytes:(\d+)/.exec(await redis.info('stats'))?.[1] ?? NaN);

/** The commands sent while `work` runs and the bytes Redis read meanwhile. */
async function watched(work: () => Promise<void>): Promise<{ commands: string[]; bytes: number }> {
  const monitor = await redis.monitor();
  const commands: string[] = [];
  monitor.on('monitor', (_time: string, args: string[], source: string) => {
    // Commands a script runs are shown with the source `lua`: Redis's work, not a round trip.
    if (!source.includes('lua')) commands.push(args.map((a) => a.slice(0, 24)).join(' '));
  });
  const before = await inputBytes();
  await work();
  // What the handshake leaves to be done after `connect`: the refund of its point (the limiter's
  // second call) and the status to the subscribers' room; then a moment for anything more.
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline && (commands.filter((c) => c.includes(':rl:')).length < 2 || commands.filter((c) => c.startsWith('spublish')).length < 2)) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  await new Promise((resolve) => setTimeout(resolve, 100));
  const after = await inputBytes();
  monitor.disconnect();
  return { commands: commands.filter((c) => !/^(info|monitor)\b/i.test(c)), bytes: after - before };
}

test('a device handshake takes the point of its address and gives it back, without reading the counter first', async () => {
  const owner = await createUser(service);
  // The first handshake of a process also gives Redis its scripts (once per connection).
  const first = await connect(service, await deviceToken(service, await registerHub(service, owner), owner));
  const hub = await registerHub(service, owner);
  const token = await deviceToken(service, hub, owner);
  await new Promise((resolve) => setTimeout(resolve, 300));
  let device: Awaited<ReturnType<typeof connect>> | undefined;
  const { commands, bytes } = await watched(async () => {
    device = await connect(service, token);
  });
  device?.socket.disconnect();
  first.socket.disconnect();
  process.stdout.write(`one device handshake: ${commands.length} commands, ${bytes} bytes to Redis\n  ${commands.join('\n  ')}\n`);
  // Only the commands on the handshake's own keys are judged: the process's periodic work (its
  // liveness key, the projector's lease) may run meanwhile.
  const limiter = commands.filter((c) => c.includes(':rl:'));
  // A consume and its refund (both one script call), and nothing else of the rate limiter (its
  // counter was read first with MULTI, GET, PTTL, EXEC).
  expect(limiter).toHaveLength(2);
  expect(limiter.every((c) => c.startsWith('evalsha '))).toBe(true);
  // The device's claim and lookup go by the scripts' hash: their text was sent with the first handshake.
  const claims = commands.filter((c) => c.includes(':tunnel:device:'));
  expect(claims).toHaveLength(2);
  expect(claims.every((c) => c.startsWith('evalsha '))).toBe(true);
}, 30_000);

test('a Redis that lost its scripts (a restart, SCRIPT FLUSH) is given them again: the handshake goes through', async () => {
  const owner = await createUser(service);
  const before = await connect(service, await deviceToken(service, await registerHub(service, owner), owner));
  await redis.script('FLUSH');
  const hub = await registerHub(service, owner);
  const device = await connect(service, await deviceToken(service, hub, owner));
  // The claim is recorded: the device is reachable from every process.
  expect(await redis.get(`hhc:tunnel:device:${hub.uuid}`)).toMatch(/^\d+ /);
  device.socket.disconnect();
  before.socket.disconnect();
}, 30_000);
