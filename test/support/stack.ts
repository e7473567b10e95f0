import { startEsdbStandin, type EsdbStandin } from './esdb-standin';
import { startJongodb, type Jongodb } from './jongodb';
import { startPrivateRedis, type PrivateRedis } from './redis';

/**
 * Test stand-ins for the services distributed mode needs, on this machine: jongodb
 * (MongoDB wire protocol), a gRPC EventStoreDB stand-in, and a private redis-server.
 * Production uses real servers (docker-compose.yml).
 */
export interface Stack {
  readonly env: { readonly EVENTSTORE_URL: string; readonly MONGODB_URI: string; readonly REDIS_URL: string };
  /** The private Redis, for tests that kill or restart it. */
  readonly redis: PrivateRedis;
  /** The MongoDB and EventStoreDB stand-ins, for tests that stop them. */
  readonly mongo: Jongodb;
  readonly esdb: EsdbStandin;
  stop(): Promise<void>;
}

/** `mongo: 'standalone'` for clients behind a proxy (see startJongodb). */
export async function startStack(options: { readonly mongo?: 'replica-set' | 'standalone' } = {}): Promise<Stack> {
  const [esdb, mongo, redis] = await Promise.all([startEsdbStandin(), startJongodb(options.mongo === 'standalone' ? { replicaSet: false } : {}), startPrivateRedis()]);
  return {
    env: { EVENTSTORE_URL: esdb.url, MONGODB_URI: mongo.uri, REDIS_URL: redis.url },
    redis,
    mongo,
    esdb,
    stop: async () => {
      await Promise.allSettled([esdb.stop(), mongo.stop(), redis.stop()]);
    },
  };
}

/** `npm run stack`: three lines, then services until SIGTERM or SIGINT. */
async function main(): Promise<void> {
  const stack = await startStack();
  process.stdout.write(
    `EVENTSTORE_URL=${stack.env.EVENTSTORE_URL}\nMONGODB_URI=${stack.env.MONGODB_URI}\nREDIS_URL=${stack.env.REDIS_URL}\n`,
  );
  let stopping = false;
  const shutdown = (): void => {
    if (stopping) return;
    stopping = true;
    stack.stop().finally(() => process.exit(0));
  };
  process.on('SIGTERM', shutdown);
  process.on('SIGINT', shutdown);
  // Keep the process alive until a signal arrives.
  setInterval(() => undefined, 1 << 30);
}

if (require.main === module) {
  main().catch((error: unknown) => {
    process.stderr.write(`stack failed to start: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  });
}
