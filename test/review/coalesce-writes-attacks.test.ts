import { Socket } from 'node:net';
import Redis, { Command, type RedisOptions } from 'ioredis';
import { coalesceWrites } from '../../src/infra/redis-writes';
import { readsProcessed, startPrivateRedis, type PrivateRedis } from '../support/redis';

/**
 * Attacks on one write per turn (src/infra/redis-writes.ts), on a private Redis: every
 * command answered, once, in order, whatever happens to the connection or to Redis while
 * the socket is corked; and a lone command still leaves within the turn it was made in.
 */

let redis: PrivateRedis;
const clients: Redis[] = [];
const unhandled: unknown[] = [];
const onUnhandled = (reason: unknown): void => {
  unhandled.push(reason);
};

const track = (client: Redis): Redis => {
  client.on('error', () => undefined);
  clients.push(client);
  return client;
};
const ready = async (client: Redis): Promise<Redis> => {
  if (client.status !== 'ready') await new Promise((resolve) => client.once('ready', resolve));
  return client;
};
const connect = async (coalesced: boolean, options: RedisOptions = {}): Promise<Redis> => {
  const plain = new Redis(redis.port, '127.0.0.1', { maxRetriesPerRequest: null, retryStrategy: () => 50, ...options });
  return ready(track(coalesced ? coalesceWrites(plain) : plain));
};
const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
const busy = (ms: number): void => {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    // the event loop is held
  }
};

beforeAll(async () => {
  redis = await startPrivateRedis();
  process.on('unhandledRejection', onUnhandled);
});
afterAll(async () => {
  process.off('unhandledRejection', onUnhandled);
  for (const c of clients) c.disconnect();
  await redis.stop();
});
beforeEach(() => {
  unhandled.length = 0;
});
afterEach(() => {
  expect(unhandled).toEqual([]);
});

describe('a lone command leaves within the turn it was made in', () => {
  /**
   * Whether the client's socket has handed everything to the kernel: not corked, nothing
   * buffered. Read by a timer made due for the next turn (it runs before that turn's I/O and
   * check phase): no clock is compared, so a slow machine cannot make it pass or fail.
   */
  const flushedByNextTurnTimers = (client: Redis, make: () => void): Promise<boolean> =>
    new Promise((resolve) => {
      make();
      setTimeout(() => resolve(client.stream.writableCorked === 0 && client.stream.writableLength === 0), 0);
      busy(3); // the timer is due when the next turn starts
    });

  test('made in a setImmediate callback (the watermark and revocation publishes are)', async () => {
    const client = await connect(true);
    const flushed = await new Promise<boolean>((resolve) => setImmediate(() => void flushedByNextTurnTimers(client, () => void client.time()).then(resolve)));
    expect(flushed).toBe(true);
  });

  test('several made in one setImmediate callback still leave together', async () => {
    const client = await connect(true);
    const probe = await connect(false);
    const readsBefore = await readsProcessed(probe);
    const answers = await new Promise<number[]>((resolve, reject) => {
      setImmediate(() => {
        Promise.all(Array.from({ length: 50 }, () => client.incr('immediate-batch')))
          .then(resolve)
          .catch(reject);
      });
    });
    const readsAfter = await readsProcessed(probe);
    expect(answers).toEqual(Array.from({ length: 50 }, (_, i) => i + 1));
    expect(readsAfter - readsBefore - 1).toBeLessThanOrEqual(2);
  });

  test('made in a timer callback', async () => {
    const client = await connect(true);
    const flushed = await new Promise<boolean>((resolve) => setTimeout(() => void flushedByNextTurnTimers(client, () => void client.time()).then(resolve), 1));
    expect(flushed).toBe(true);
  });

  test('made in an I/O callback (an answer from Redis)', async () => {
    const client = await connect(true);
    const other = await connect(false);
    const flushed = await new Promise<boolean>((resolve) => {
      other.ping(() => void flushedByNextTurnTimers(client, () => void client.time()).then(resolve));
    });
    expect(flushed).toBe(true);
  });

  // The one phase left: a command made in a socket's 'close' handler (and so at a device's
  // disconnection) leaves in the next turn's check phase, one turn later, still answered.
  test("made in a socket's close handler: out by the next turn's check phase, and answered", async () => {
    const client = await connect(true);
    const other = new Socket();
    other.on('error', () => undefined);
    const [flushed, answer] = await new Promise<[boolean, Promise<string>]>((resolve) => {
      other.once('close', () => {
        const answer = client.echo('closing');
        // The uncork was scheduled first: this immediate runs after it, in the same check phase.
        setImmediate(() => resolve([client.stream.writableCorked === 0 && client.stream.writableLength === 0, answer]));
      });
      other.connect(redis.port, '127.0.0.1', () => other.destroy());
    });
    expect(flushed).toBe(true);
    await expect(answer).resolves.toBe('closing');
  });

  test('made from a nextTick and a microtask queued inside the setImmediate that uncorks', async () => {
    const client = await connect(true);
    await client.ping(); // corks now and uncorks in this turn's check phase
    const answers = await Promise.all([
      new Promise((resolve, reject) => setImmediate(() => process.nextTick(() => void client.incr('late').then(resolve, reject)))),
      new Promise((resolve, reject) => setImmediate(() => queueMicrotask(() => void client.incr('late').then(resolve, reject)))),
    ]);
    expect([...answers].sort()).toEqual([1, 2]);
  });
});

describe('every answer arrives, once and in order', () => {
  test('twenty thousand commands of one turn', async () => {
    const client = await connect(true);
    const n = 20_000;
    const answers = await Promise.all(Array.from({ length: n }, () => client.incr('many')));
    expect(answers).toEqual(Array.from({ length: n }, (_, i) => i + 1));
  });

  test('values of megabytes in one write, the connection still answering after', async () => {
    const client = await connect(true);
    const values = Array.from({ length: 6 }, (_, i) => Buffer.alloc(4 * 1024 * 1024 + i, 97 + i));
    const written = await Promise.all(values.map((value, i) => client.set(`big-${i}`, value)));
    expect(written).toEqual(values.map(() => 'OK'));
    const read = await Promise.all(values.map((_, i) => client.getBuffer(`big-${i}`)));
    read.forEach((value, i) => expect(value?.equals(values[i] as Buffer)).toBe(true));
    expect(await client.strlen('big-5')).toBe(4 * 1024 * 1024 + 5);
  });

  test('pipelines, transactions and plain commands interleaved in one turn', async () => {
    const client = await connect(true);
    // The answers' values say the order Redis ran them in (a pipeline's promise settles later than
    // a plain command's, with or without coalescing).
    const results = await Promise.all([
      client.incr('mix'),
      client.pipeline().incr('mix').incr('mix').exec(),
      client.incr('mix'),
      client.multi().incr('mix').incr('mix').exec(),
      client.incr('mix'),
      client.multi({ pipeline: false }),
      client.incr('mix'),
      client.exec(),
      client.incr('mix'),
    ]);
    expect(results[0]).toBe(1);
    expect(results[1]).toEqual([
      [null, 2],
      [null, 3],
    ]);
    expect(results[2]).toBe(4);
    expect(results[3]).toEqual([
      [null, 5],
      [null, 6],
    ]);
    expect(results[4]).toBe(7);
    expect(results[6]).toBe('QUEUED');
    expect(results[7]).toEqual([[null, 8]]);
    expect(results[8]).toBe(9);
  });

  test('Lua device scripts (defineCommand) among plain commands, the script unknown to Redis at first', async () => {
    const client = await connect(true);
    await client.script('FLUSH');
    client.defineCommand('bump', { numberOfKeys: 1, lua: "return redis.call('INCRBY', KEYS[1], ARGV[1])" });
    const bump = (client as unknown as { bump(key: string, by: number): Promise<number> }).bump.bind(client);
    const answers = await Promise.all([bump('lua', 1), client.incr('lua'), bump('lua', 10), client.get('lua')]);
    expect(answers).toEqual([1, 2, 12, '12']);
  });

  test('an error thrown synchronously by one command leaves the others of its turn answered', async () => {
    const client = await connect(true);
    const broken = new Command('get', ['k']);
    broken.toWritable = () => {
      throw new Error('cannot be written');
    };
    const before = client.incr('sync-throw');
    expect(() => client.sendCommand(broken)).toThrow('cannot be written');
    const after = client.incr('sync-throw');
    await expect(Promise.all([before, after])).resolves.toEqual([1, 2]);
    await nextTurn();
    await expect(client.incr('sync-throw')).resolves.toBe(3);
    expect(client.stream.writableCorked).toBe(0);
  });

  test('a blocking command among others: answered when its list is pushed', async () => {
    const client = await connect(true);
    const pusher = await connect(true);
    const [popped, , counted] = await Promise.all([
      client.blpop('queue', 5),
      sleep(50).then(() => pusher.rpush('queue', 'job')),
      client.incr('after-blpop'),
    ]);
    expect(popped).toEqual(['queue', 'job']);
    expect(counted).toBe(1);
  });

  test('MONITOR sees the commands of one turn in the order they were made', async () => {
    const client = await connect(true);
    const monitor = track(await client.monitor());
    const seen: string[] = [];
    monitor.on('monitor', (_time: string, args: string[]) => {
      if (args[1]?.startsWith('mon-') === true) seen.push(args[1]);
    });
    await Promise.all(Array.from({ length: 100 }, (_, i) => client.set(`mon-${i}`, '1')));
    await sleep(50);
    expect(seen).toEqual(Array.from({ length: 100 }, (_, i) => `mon-${i}`));
  });
});

describe('subscriber connections', () => {
  test('a flood of subscriptions and unsubscriptions in one turn, then a publication heard once', async () => {
    const subscriber = await connect(true, { enableReadyCheck: false });
    const publisher = await connect(true);
    const channels = Array.from({ length: 2000 }, (_, i) => `flood-${i}`);
    const heard: string[] = [];
    subscriber.on('message', (channel: string, message: string) => heard.push(`${channel}:${message}`));
    const counts = await Promise.all([
      ...channels.map((channel) => subscriber.subscribe(channel)),
      ...channels.slice(0, 1000).map((channel) => subscriber.unsubscribe(channel)),
      subscriber.subscribe('final'),
    ]);
    expect(counts.at(-1)).toBe(1001);
    expect(await publisher.publish('final', 'x')).toBe(1);
    expect(await publisher.publish('flood-1500', 'y')).toBe(1);
    expect(await publisher.publish('flood-10', 'z')).toBe(0);
    await sleep(50);
    expect(heard).toEqual(['final:x', 'flood-1500:y']);
  });

  test('sharded SSUBSCRIBE in a turn with other subscriptions', async () => {
    const subscriber = await connect(true, { enableReadyCheck: false });
    const publisher = await connect(true);
    const heard = new Promise<string>((resolve) => subscriber.once('smessage', (_channel: string, message: string) => resolve(message)));
    await Promise.all([subscriber.subscribe('plain'), subscriber.ssubscribe('shard'), subscriber.psubscribe('pat-*')]);
    expect(await publisher.spublish('shard', 'sharded')).toBe(1);
    await expect(heard).resolves.toBe('sharded');
  });
});

describe('faults while the socket is corked', () => {
  test('disconnect() in the turn of a command: the command still reaches Redis', async () => {
    const client = await connect(true);
    const probe = await connect(false);
    void client.set('left-behind', 'sent').catch(() => undefined);
    client.disconnect();
    await sleep(100);
    expect(await probe.get('left-behind')).toBe('sent');
  });

  test('quit() in the turn of commands: all answered, then the connection ends', async () => {
    const client = await connect(true);
    const answers = await Promise.all([client.set('q', '1'), client.incr('q'), client.quit()]);
    expect(answers).toEqual(['OK', 2, 'OK']);
    await sleep(50);
    expect(client.status).toBe('end');
  });

  test('Redis paused (SIGSTOP) and resumed in the turn of the commands: all answered', async () => {
    const client = await connect(true);
    const pending = Promise.all(Array.from({ length: 100 }, (_, i) => client.set(`paused-${i}`, String(i))));
    redis.pause();
    await sleep(200);
    redis.resume();
    await expect(pending).resolves.toEqual(Array.from({ length: 100 }, () => 'OK'));
  });

  test('Redis killed in the turn of the commands and started again: each answered once', async () => {
    const client = await connect(true);
    const pending = Promise.all(Array.from({ length: 50 }, (_, i) => client.incr(`killed-${i}`)));
    const killed = redis.kill(); // the signal leaves now, before the socket is uncorked
    await killed;
    await sleep(100);
    await redis.restart();
    await expect(pending).resolves.toEqual(Array.from({ length: 50 }, () => 1));
    await expect(client.incr('killed-0')).resolves.toBe(2);
  });

  test('commands made while connecting and while reconnecting are answered once it is ready', async () => {
    const client = track(coalesceWrites(new Redis(redis.port, '127.0.0.1', { maxRetriesPerRequest: null, retryStrategy: () => 50 })));
    const early = client.incr('early');
    await ready(client);
    await expect(early).resolves.toBe(1);
    await redis.kill();
    await sleep(60);
    const during: Promise<number>[] = [];
    const made = new Set<string>();
    const everyTurn = setInterval(() => {
      made.add(client.status);
      during.push(client.incr('during-reconnect'));
    }, 5);
    await sleep(100);
    await redis.restart();
    await ready(client);
    await sleep(30);
    clearInterval(everyTurn);
    const answers = await Promise.all(during);
    expect(made.has('reconnecting') || made.has('connecting') || made.has('connect')).toBe(true);
    expect(answers).toEqual(answers.map((_, i) => i + 1));
  });

  test('commandTimeout while Redis stalls: the late command rejects, later commands get their own answers', async () => {
    const client = await connect(true, { commandTimeout: 100 });
    await client.set('t', 'value');
    redis.pause();
    const timedOut = client.get('t');
    await expect(timedOut).rejects.toThrow(/timed out/i);
    redis.resume();
    await sleep(50);
    await expect(Promise.all([client.incr('after-timeout'), client.get('t')])).resolves.toEqual([1, 'value']);
  });

  test('a socket left corked never outlives its turn', async () => {
    const client = await connect(true);
    void client.ping();
    expect(client.stream.writableCorked).toBe(1);
    await nextTurn();
    await nextTurn();
    expect(client.stream.writableCorked).toBe(0);
  });
});
