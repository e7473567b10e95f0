import Redis from 'ioredis';
import type { DistributedConfig } from '../config';
import type { Logger } from '../logger';
import { openMongoCredentialStore } from '../infra/credentials/mongo';
import { createEsdbEventStore } from '../infra/eventstore/esdb';
import { SUBSCRIBER_OPTIONS } from '../infra/redis-subscriber';
import { coalesceWrites } from '../infra/redis-writes';
import { instrumentEventStore, type AppendObserver } from '../infra/eventstore/instrumented';
import { derivePrivacyKeys } from '../privacy/crypto';
import { createPrivateEventStore } from '../privacy/event-store';
import { createKeyring } from '../privacy/keyring';
import { redactedPlaintext, type PlaintextEraser } from '../privacy/plaintext';
import { openMongoReadModels } from '../projections/read-models';
import { createRedisWatermark } from '../projections/watermark';
import { checkKeyStore, PROJECTOR_LEASE_KEY, requireDataKeyEncryptionKey, type Infrastructure } from './adapters';
import { EVENTSTORE, MONGODB, REDIS, StoreUnreachableError, untilAnswered } from './store-probes';

/** Read at a distributed start to see that EventStoreDB answers; never written. */
const START_PROBE_STREAM = 'hhc-start-probe';

/**
 * The distributed mode's adapters: EventStoreDB, MongoDB and Redis. Loaded by
 * `connectInfrastructure` (adapters.ts) with a dynamic import, so that an embedded process
 * never loads their drivers.
 */
export async function connectDistributedInfrastructure(config: DistributedConfig, logger: Logger, appends: AppendObserver): Promise<Infrastructure> {
  const redisOptions = { maxRetriesPerRequest: null, lazyConnect: false } as const;
  // The commands of one turn of the event loop leave in one write (redis-writes.ts).
  const redis = coalesceWrites(new Redis(config.redisUrl, redisOptions));
  const subscriber = coalesceWrites(new Redis(config.redisUrl, { ...redisOptions, ...SUBSCRIBER_OPTIONS }));
  redis.on('error', (error: Error) => logger.warn({ err: error.message }, 'redis connection error'));
  subscriber.on('error', (error: Error) => logger.warn({ err: error.message }, 'redis subscriber connection error'));
  // Each store answers before the start goes on, or the start stops naming it (store-probes.ts).
  const startTimeoutMs = config.storeStartTimeoutSeconds * 1000;
  try {
    await untilAnswered(REDIS, () => redis.ping(), startTimeoutMs);
  } catch (error) {
    subscriber.disconnect();
    redis.disconnect();
    throw error;
  }
  // The `credentials` collection of the read models' database, on a client of its own.
  const credentials = await openMongoCredentialStore(config.mongodbUri).catch((error: unknown) => {
    subscriber.disconnect();
    redis.disconnect();
    throw new StoreUnreachableError(MONGODB, error);
  });
  const privacyKeys = derivePrivacyKeys(requireDataKeyEncryptionKey(config.secrets));
  try {
    await checkKeyStore(credentials, privacyKeys, logger);
  } catch (error) {
    subscriber.disconnect();
    redis.disconnect();
    throw error;
  }
  const keyring = createKeyring(credentials, privacyKeys.keyEncryptionKey);
  const esdb = createEsdbEventStore(config.eventStoreUrl);
  try {
    // A read of a stream nobody writes: answered (empty) by any EventStoreDB that is there.
    await untilAnswered(
      EVENTSTORE,
      async () => {
        for await (const event of esdb.readStream(START_PROBE_STREAM)) void event;
      },
      startTimeoutMs,
    );
  } catch (error) {
    await esdb.close().catch(() => undefined);
    await credentials.close().catch(() => undefined);
    subscriber.disconnect();
    redis.disconnect();
    throw error;
  }
  const eventStore = createPrivateEventStore(instrumentEventStore(esdb, appends), { keyring });
  // EventStoreDB cannot rewrite an event: what is left in the clear is found and reported.
  const plaintext: PlaintextEraser = async ({ subjects, streams }) => {
    const erased = new Set(subjects);
    const left: string[] = [];
    let leftEvents = 0;
    for (const stream of streams) {
      let here = 0;
      for await (const event of esdb.readStream(stream)) if (redactedPlaintext(event.type, stream, event.data, erased) !== null) here++;
      if (here > 0) left.push(stream);
      leftEvents += here;
    }
    return { rewritten: 0, left, leftEvents };
  };
  const readModels = await openMongoReadModels(config.mongodbUri, eventStore, {
    isProjectorRunning: async () => (await redis.exists(PROJECTOR_LEASE_KEY)) === 1,
  });
  const readStore = readModels.readStore;
  const watermark = await createRedisWatermark(redis, subscriber, readStore);
  return {
    eventStore,
    readStore,
    readModels,
    watermark,
    secrets: config.secrets,
    redis,
    credentials,
    keyring,
    privacyKeys,
    plaintext,
    snapshot: null,
    close: async () => {
      await watermark.close();
      await readStore.close();
      await credentials.close();
      await eventStore.close();
      subscriber.disconnect();
      redis.disconnect();
    },
  };
}
