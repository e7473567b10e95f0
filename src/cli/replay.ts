/**
 * `npm run replay -- <command>`: the auditors' and operators' tool (decisions §9).
 *
 *   history <device> [--after N] [--limit N] [--include heartbeats] [--heartbeat-after N]
 *   state <device> [--at <ISO time>]
 *   rebuild
 *
 * Configuration is the service's (src/config.ts): distributed when EVENTSTORE_URL,
 * MONGODB_URI and REDIS_URL are set, else embedded on DATA_DIR. `history` and `state` print
 * the JSON the endpoints answer. In embedded mode they need a stopped service: the event log
 * is opened by one process at a time.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import Redis from 'ioredis';
import { deviceHistory, deviceStateAt, deviceStreamExists } from '../audit/device-audit';
import { deviceHistoryQuery, deviceStateQuery } from '../api/schemas/audit';
import { ConfigError, loadConfig, type Config } from '../config';
import { ValidationError } from '../domain/errors';
import { readableEventStore } from '../privacy/open-store';
import { EVENT_LOG_FILE_NAME, EventStoreLockedError, openEmbeddedEventStore } from '../infra/eventstore/embedded';
import { createEsdbEventStore } from '../infra/eventstore/esdb';
import type { EventStore } from '../infra/eventstore/port';
import { createMongoGenerationRegistry, generationPrefix } from '../infra/readstore/generations';
import { createMemoryReadStore } from '../infra/readstore/memory';
import { createMongoReadStore } from '../infra/readstore/mongo';
import { allProjections } from '../projections';
import { devicesProjection, findDevice } from '../projections/devices';
import { startProjector } from '../projections/projector';
import { openMemoryReadModels, openMongoReadModels } from '../projections/read-models';
import { parseInput } from '../api/validation';

const USAGE = `Usage: npm run replay -- <command>

  history <device> [--after N] [--limit N] [--include heartbeats] [--heartbeat-after N]
      The device's events, as GET /api/v1/devices/:id/history answers them.
  state <device> [--at <ISO 8601 time>]
      The device at that instant (now by default), as GET /api/v1/devices/:id/state answers it.
  rebuild
      Rebuilds every read model from the event store into a fresh generation and switches
      to it once it has caught up (distributed). Embedded: read models live in the memory of
      the service and are rebuilt at every start (from its start snapshot and the events
      after it); on a stopped DATA_DIR this replays the whole log into memory, ignoring the
      snapshot, and reports what it built; a running embedded service is rebuilt with
      POST /api/v1/admin/read-models/rebuild.

<device> is the device uuid, or the internal id of a device that is not deleted.
Configuration comes from the environment, as for the service (DATA_DIR, or EVENTSTORE_URL +
MONGODB_URI + REDIS_URL).`;

const GUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

class UsageError extends Error {}

class CliFailure extends Error {}

const PROJECTOR_LEASE_KEY = 'hhc:projector:lease';

interface Opened {
  readonly eventStore: EventStore;
  readonly close: () => Promise<void>;
}

async function openEventStore(config: Config): Promise<Opened> {
  if (config.mode === 'distributed') return readableEventStore(config, createEsdbEventStore(config.eventStoreUrl));
  // Opening creates a log; an auditor pointing at the wrong directory should hear so instead.
  if (!existsSync(join(config.dataDir, EVENT_LOG_FILE_NAME))) throw new CliFailure(`No event log in ${config.dataDir} (DATA_DIR)`);
  try {
    return await readableEventStore(config, await openEmbeddedEventStore(config.dataDir));
  } catch (error) {
    if (error instanceof EventStoreLockedError) {
      throw new CliFailure(
        `The service (${error.holder}) has ${config.dataDir} open; the embedded log is opened by one process at a time.\n` +
          'Ask the running service instead: GET /api/v1/devices/:id/history and /state, and ' +
          'POST /api/v1/admin/read-models/rebuild (admin), or stop it first.',
      );
    }
    throw error;
  }
}

/** The uuid of a device named by uuid, or by the internal id of a device the read models hold. */
async function resolveDevice(config: Config, eventStore: EventStore, key: string): Promise<string> {
  const lower = key.toLowerCase();
  if (GUID.test(lower) && (await deviceStreamExists(eventStore, lower))) return lower;
  let uuid: string | null = null;
  if (config.mode === 'distributed') {
    const registry = await createMongoGenerationRegistry(config.mongodbUri);
    try {
      const { generation } = await registry.read();
      const store = await createMongoReadStore(config.mongodbUri, { collectionPrefix: generationPrefix(generation) });
      uuid = (await findDevice(store, lower))?.uuid ?? null;
      await store.close();
    } finally {
      await registry.close();
    }
  } else {
    // Embedded read models live in the service's memory: fold the device read model here.
    const store = createMemoryReadStore();
    const projector = await startProjector(eventStore, store, [devicesProjection]);
    await projector.caughtUp;
    await projector.stop();
    uuid = (await findDevice(store, lower))?.uuid ?? null;
  }
  if (uuid === null) throw new CliFailure('Device not found');
  return uuid;
}

function print(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

function parseCommandLine(argv: readonly string[]) {
  try {
    return parseArgs({
      args: [...argv],
      allowPositionals: true,
      options: {
        after: { type: 'string' },
        limit: { type: 'string' },
        include: { type: 'string' },
        'heartbeat-after': { type: 'string' },
        at: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (error) {
    throw new UsageError(error instanceof Error ? error.message : String(error));
  }
}

async function run(argv: readonly string[]): Promise<void> {
  const { positionals, values } = parseCommandLine(argv);
  const [command, device, ...rest] = positionals;
  if (values.help === true || command === undefined) throw new UsageError();
  if (rest.length > 0) throw new UsageError(`Unexpected arguments: ${rest.join(' ')}`);

  const config = loadConfig();
  if (command === 'history' || command === 'state') {
    if (device === undefined) throw new UsageError(`${command} needs a device`);
    const { eventStore, close } = await openEventStore(config);
    try {
      const uuid = await resolveDevice(config, eventStore, device);
      if (command === 'history') {
        const query = parseInput(deviceHistoryQuery, {
          ...(values.after !== undefined ? { after: values.after } : {}),
          ...(values.limit !== undefined ? { limit: values.limit } : {}),
          ...(values.include !== undefined ? { include: values.include } : {}),
          ...(values['heartbeat-after'] !== undefined ? { heartbeatAfter: values['heartbeat-after'] } : {}),
        });
        print(
          await deviceHistory(eventStore, uuid, {
            after: query.after,
            limit: query.limit,
            includeHeartbeats: query.include === 'heartbeats',
            heartbeatAfter: query.heartbeatAfter,
          }),
        );
      } else {
        const query = parseInput(deviceStateQuery, values.at !== undefined ? { at: values.at } : {});
        print(await deviceStateAt(eventStore, uuid, query.at ?? new Date().toISOString()));
      }
    } finally {
      await close();
    }
    return;
  }

  if (command === 'rebuild') {
    if (device !== undefined) throw new UsageError('rebuild takes no arguments');
    const { eventStore, close } = await openEventStore(config);
    try {
      if (config.mode === 'embedded') {
        const readModels = await openMemoryReadModels(eventStore);
        const report = await readModels.rebuild(allProjections());
        await readModels.close();
        process.stderr.write(
          'Embedded mode: read models live in the memory of the service and are rebuilt at every start (from its snapshot and the events after it); ' +
            'this replayed the log into memory to check it. Nothing was switched.\n',
        );
        print(report);
        return;
      }
      const redis = new Redis(config.redisUrl, { maxRetriesPerRequest: 1, lazyConnect: true });
      redis.on('error', () => undefined);
      try {
        const readModels = await openMongoReadModels(config.mongodbUri, eventStore, {
          isProjectorRunning: async () => (await redis.exists(PROJECTOR_LEASE_KEY)) === 1,
        });
        try {
          print(await readModels.rebuild(allProjections()));
        } finally {
          await readModels.close();
        }
      } finally {
        redis.disconnect();
      }
    } finally {
      await close();
    }
    return;
  }
  throw new UsageError(`Unknown command: ${command}`);
}

run(process.argv.slice(2))
  .then(() => process.exit(0))
  .catch((error: unknown) => {
    if (error instanceof UsageError) {
      if (error.message !== '') process.stderr.write(`${error.message}\n\n`);
      process.stderr.write(`${USAGE}\n`);
      process.exit(2);
    }
    if (error instanceof ValidationError) {
      process.stderr.write(`${error.problems.map((p) => p.message).join('\n')}\n`);
      process.exit(2);
    }
    if (error instanceof ConfigError || error instanceof CliFailure) {
      process.stderr.write(`${error.message}\n`);
      process.exit(1);
    }
    process.stderr.write(`replay failed: ${error instanceof Error ? error.message : String(error)}\n`);
    process.exit(1);
  });
