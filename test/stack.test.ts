import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { MongoClient } from 'mongodb';
import Redis from 'ioredis';
import { createEsdbEventStore } from '../src/infra/eventstore/esdb';

describe('npm run stack', () => {
  test('prints exactly the three URLs, serves them, and stops them all on SIGTERM', async () => {
    const child = spawn('npm', ['run', '--silent', 'stack'], { cwd: join(__dirname, '..'), stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let stdout = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    const deadline = Date.now() + 30_000;
    while (stdout.split('\n').filter((l) => l.length > 0).length < 3) {
      if (Date.now() > deadline) throw new Error(`stack printed: ${stdout}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    await new Promise((r) => setTimeout(r, 200));
    const lines = stdout.split('\n').filter((l) => l.length > 0);
    expect(lines.map((l) => l.split('=')[0])).toEqual(['EVENTSTORE_URL', 'MONGODB_URI', 'REDIS_URL']);
    const env = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)])) as Record<string, string>;

    const redis = new Redis(env.REDIS_URL ?? '', { maxRetriesPerRequest: 1, retryStrategy: () => null });
    redis.on('error', () => undefined);
    expect(await redis.ping()).toBe('PONG');
    redis.disconnect();
    const mongo = await MongoClient.connect(env.MONGODB_URI ?? '');
    expect((await mongo.db().command({ ping: 1 })).ok).toBe(1);
    await mongo.close();
    const es = createEsdbEventStore(env.EVENTSTORE_URL ?? '');
    expect(await es.headPosition()).toBeNull();
    await es.close();

    process.kill(-(child.pid ?? 0), 'SIGTERM');
    await exited;
    // Every service is gone shortly after: Redis refuses connections.
    const reachable = async (): Promise<boolean> => {
      const probe = new Redis(env.REDIS_URL ?? '', { maxRetriesPerRequest: 0, retryStrategy: () => null, lazyConnect: true });
      probe.on('error', () => undefined);
      try {
        await probe.connect();
        return true;
      } catch {
        return false;
      } finally {
        probe.disconnect();
      }
    };
    const stopDeadline = Date.now() + 10_000;
    while ((await reachable()) && Date.now() < stopDeadline) await new Promise((r) => setTimeout(r, 100));
    expect(await reachable()).toBe(false);
  }, 60_000);
});
