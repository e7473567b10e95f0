/**
 * Round trips counted at the clients, for `npm run bench:scale`: MongoDB commands (the
 * driver's command monitoring, on every client this process opens), EventStoreDB client
 * calls (each call of `@eventstore/db-client` that goes to the server), and Redis commands
 * (the server's `INFO commandstats`, so every process's connections count).
 *
 * Install before the service starts: clients opened earlier are not counted.
 */
import { EventStoreDBClient } from '@eventstore/db-client';
import Redis from 'ioredis';
import { MongoClient } from 'mongodb';

export type Counts = Readonly<Record<string, number>>;

export interface RoundTripCounters {
  /** Every counter so far, by store and operation (`mongo.find`, `esdb.readStream`, `redis.evalsha`, …). */
  snapshot(): Promise<Counts>;
  close(): Promise<void>;
}

/** The EventStoreDB client calls that each make a request to the server. */
const ESDB_CALLS = ['appendToStream', 'readStream', 'readAll', 'subscribeToAll', 'setStreamMetadata', 'getStreamMetadata', 'deleteStream'] as const;

/** Commands the counting itself (and connection set-up) sends: not the service's work. */
const REDIS_IGNORED = new Set(['info', 'hello', 'client', 'select', 'config', 'command', 'ping']);
const MONGO_IGNORED = new Set(['hello', 'ismaster', 'isMaster', 'saslStart', 'saslContinue', 'endSessions', 'ping', 'buildInfo']);

let installed = false;
const local = new Map<string, number>();
const bump = (key: string): void => {
  local.set(key, (local.get(key) ?? 0) + 1);
};

function installClientCounters(): void {
  if (installed) return;
  installed = true;
  const connect = MongoClient.prototype.connect;
  MongoClient.prototype.connect = function (this: MongoClient) {
    // Command monitoring is read when connections are made, which is after this.
    // (a setter of the driver's MongoClient that its typings leave out)
    (this as unknown as { monitorCommands: boolean }).monitorCommands = true;
    this.on('commandStarted', (event) => {
      if (!MONGO_IGNORED.has(event.commandName)) bump(`mongo.${event.commandName}`);
    });
    return connect.call(this);
  } as typeof connect;
  const prototype = EventStoreDBClient.prototype as unknown as Record<string, (...args: unknown[]) => unknown>;
  for (const name of ESDB_CALLS) {
    const original = prototype[name];
    if (original === undefined) continue;
    prototype[name] = function (this: unknown, ...args: unknown[]) {
      bump(`esdb.${name}`);
      return original.apply(this, args);
    };
  }
}

async function redisCommandStats(redis: Redis): Promise<Map<string, number>> {
  const text = await redis.info('commandstats');
  const stats = new Map<string, number>();
  for (const match of text.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    const name = (match[1] as string).toLowerCase();
    if (!REDIS_IGNORED.has(name.split('|')[0] as string)) stats.set(`redis.${name}`, Number(match[2]));
  }
  return stats;
}

/** Starts counting. `redisUrl`: the Redis whose commands to count (the stack's private one). */
export function startRoundTripCounters(redisUrl: string | null): RoundTripCounters {
  installClientCounters();
  const redis = redisUrl === null ? null : new Redis(redisUrl, { maxRetriesPerRequest: 2 });
  return {
    async snapshot() {
      const all: Record<string, number> = Object.fromEntries(local);
      if (redis !== null) for (const [key, calls] of await redisCommandStats(redis)) all[key] = calls;
      return all;
    },
    async close() {
      redis?.disconnect();
    },
  };
}

/** What happened between two snapshots. */
export function difference(after: Counts, before: Counts): Counts {
  const result: Record<string, number> = {};
  for (const [key, value] of Object.entries(after)) {
    const delta = value - (before[key] ?? 0);
    if (delta !== 0) result[key] = delta;
  }
  return result;
}

/** Sum per store (`mongo`, `esdb`, `redis`). */
export function byStore(counts: Counts): { mongo: number; esdb: number; redis: number } {
  const totals = { mongo: 0, esdb: 0, redis: 0 };
  for (const [key, value] of Object.entries(counts)) {
    const store = key.split('.')[0] as keyof typeof totals;
    if (store in totals) totals[store] += value;
  }
  return totals;
}
