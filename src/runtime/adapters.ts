import type Redis from 'ioredis';
import type { Config, EmbeddedConfig, Secrets } from '../config';
import type { Logger } from '../logger';
import type { CredentialStore } from '../infra/credentials/port';
import { openFileCredentialStore } from '../infra/credentials/file';
import type { EventStore } from '../infra/eventstore/port';
import { openEmbeddedEventStore } from '../infra/eventstore/embedded';
import { instrumentEventStore, type AppendObserver } from '../infra/eventstore/instrumented';
import type { ReadStore } from '../infra/readstore/port';
import { derivePrivacyKeys, type PrivacyKeys } from '../privacy/crypto';
import { createPrivateEventStore } from '../privacy/event-store';
import { redactedPlaintext, type PlaintextEraser } from '../privacy/plaintext';
import { checkKeyEncryptionKey, createKeyring, KeyEncryptionKeyMismatchError, type Keyring } from '../privacy/keyring';
import { openMemoryReadModels, type ReadModels } from '../projections/read-models';
import { createLocalWatermark, type Watermark } from '../projections/watermark';
import { resolveEmbeddedSecrets } from '../secrets';
import { loadStartSnapshot, restoredPosition, snapshotFile, snapshotVersion, type StartSnapshot } from './snapshot';

/**
 * The one place that picks adapters from the configuration: the embedded log, memory read
 * models and a local watermark in embedded mode; EventStoreDB, MongoDB and Redis in
 * distributed mode. Everything else receives what this returns.
 */

export interface Infrastructure {
  readonly eventStore: EventStore;
  readonly readStore: ReadStore;
  /** Generations of the read models: `readStore` follows the current one. */
  readonly readModels: ReadModels;
  readonly watermark: Watermark;
  readonly secrets: Secrets;
  readonly redis: Redis | null;
  /** Password hashes: not events, not a read model (never rebuilt). */
  readonly credentials: CredentialStore;
  /** The data keys of crypto-shredding (decisions §11), kept in `credentials`. */
  readonly keyring: Keyring;
  readonly privacyKeys: PrivacyKeys;
  /**
   * Personal fields of an erased person that events written before sealing hold in the clear:
   * rewritten with them erased (embedded), found and reported (distributed).
   */
  readonly plaintext: PlaintextEraser;
  /** Embedded mode: the start snapshot restored (if any) and how to take a new one. Distributed: null. */
  readonly snapshot: StartSnapshot | null;
  readonly close: () => Promise<void>;
}

/** Held in Redis by the active projector (distributed mode); the rebuild asks whether one runs. */
export const PROJECTOR_LEASE_KEY = 'hhc:projector:lease';

/**
 * The key-encryption key against the key store's check value (src/privacy/keyring.ts), before
 * anything reads or seals: a key that is not the store's refuses the start with one clear log
 * line (which never holds a key), rather than serving with every personal read failing.
 */
export async function checkKeyStore(credentials: CredentialStore, keys: PrivacyKeys, logger: Logger): Promise<void> {
  try {
    if ((await checkKeyEncryptionKey(credentials, keys.keyEncryptionKey)) === 'stored') logger.info('key store: check value of DATA_KEY_ENCRYPTION_KEY stored');
  } catch (error) {
    if (error instanceof KeyEncryptionKeyMismatchError) logger.error(error.message);
    await credentials.close().catch(() => undefined);
    throw error;
  }
}

/** A file-system error (EEXIST, EACCES, EROFS, ENOTDIR, ...) met opening the data directory, named as the operator set it. */
function namingDataDir(dataDir: string): (error: unknown) => never {
  return (error: unknown) => {
    const code = (error as { code?: unknown } | null)?.code;
    if (error instanceof Error && typeof code === 'string' && code.startsWith('E')) {
      throw new Error(`DATA_DIR (${dataDir}): ${error.message}`, { cause: error });
    }
    throw error;
  };
}

export async function connectInfrastructure(config: Config, logger: Logger, appends: AppendObserver): Promise<Infrastructure> {
  if (config.mode === 'embedded') return connectEmbeddedInfrastructure(config, logger, appends).catch(namingDataDir(config.dataDir));
  // The drivers (ioredis, mongodb, @eventstore/db-client) load here, never in embedded mode.
  const { connectDistributedInfrastructure } = await import('./distributed-adapters');
  return connectDistributedInfrastructure(config, logger, appends);
}

async function connectEmbeddedInfrastructure(config: EmbeddedConfig, logger: Logger, appends: AppendObserver): Promise<Infrastructure> {
  const { secrets, file } = resolveEmbeddedSecrets(config);
  if (config.secrets.internalApiKeys === undefined) {
    logger.info({ file }, 'INTERNAL_API_KEYS not set: a generated key is kept in the secrets file');
  }
  const credentials = await openFileCredentialStore(config.dataDir);
  const privacyKeys = derivePrivacyKeys(requireDataKeyEncryptionKey(secrets));
  await checkKeyStore(credentials, privacyKeys, logger);
  const keyring = createKeyring(credentials, privacyKeys.keyEncryptionKey);
  const log = await openEmbeddedEventStore(config.dataDir, { log: (message) => logger.warn(message) });
  const eventStore = createPrivateEventStore(instrumentEventStore(log, appends), { keyring });
  const plaintext: PlaintextEraser = async ({ subjects, streams }) => {
    const erased = new Set(subjects);
    const { eventsRewritten } = await log.rewriteStreams(streams, (streamName, event) => {
      const data = redactedPlaintext(event.type, streamName, event.data, erased);
      return data === null ? null : { ...event, data };
    });
    return { rewritten: eventsRewritten, left: [], leftEvents: 0 };
  };
  const snapshotAt = snapshotFile(config.dataDir);
  const restored = await loadStartSnapshot(snapshotAt, snapshotVersion(config.version), eventStore, logger);
  const readModels = await openMemoryReadModels(eventStore, restored?.readModels);
  const readStore = readModels.readStore;
  const watermark = createLocalWatermark();
  // What the snapshot covers is applied: readiness and read-your-writes count from there, not from nothing.
  const applied = restored === null ? null : restoredPosition(restored);
  if (applied !== null) watermark.advance(applied);
  return {
    eventStore,
    readStore,
    readModels,
    watermark,
    secrets,
    redis: null,
    credentials,
    keyring,
    privacyKeys,
    plaintext,
    snapshot: { file: snapshotAt, restored, exportReadModels: () => readModels.exportServed() },
    close: async () => {
      await watermark.close();
      await readStore.close();
      await credentials.close();
      await eventStore.close();
    },
  };
}

export function requireDataKeyEncryptionKey(secrets: Secrets): string {
  if (secrets.dataKeyEncryptionKey === undefined) throw new Error('DATA_KEY_ENCRYPTION_KEY is not set');
  return secrets.dataKeyEncryptionKey;
}
