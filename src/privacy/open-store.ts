import type { Config } from '../config';
import { openFileCredentialStore } from '../infra/credentials/file';
import { openMongoCredentialStore } from '../infra/credentials/mongo';
import type { CredentialStore } from '../infra/credentials/port';
import type { EventStore } from '../infra/eventstore/port';
import { resolveEmbeddedSecrets } from '../secrets';
import { derivePrivacyKeys } from './crypto';
import { createPrivateEventStore } from './event-store';
import { checkKeyEncryptionKey, createKeyring } from './keyring';

/**
 * A raw event store made readable the way the service reads it (opened personal fields,
 * upcast versions), for tools that open the stores themselves (`npm run replay`).
 */
export async function readableEventStore(config: Config, raw: EventStore): Promise<{ eventStore: EventStore; close: () => Promise<void> }> {
  const secret = config.mode === 'embedded' ? resolveEmbeddedSecrets(config).secrets.dataKeyEncryptionKey : config.secrets.dataKeyEncryptionKey;
  if (secret === undefined) throw new Error('DATA_KEY_ENCRYPTION_KEY is not set');
  const credentials: CredentialStore =
    config.mode === 'embedded' ? await openFileCredentialStore(config.dataDir) : await openMongoCredentialStore(config.mongodbUri);
  const { keyEncryptionKey } = derivePrivacyKeys(secret);
  try {
    await checkKeyEncryptionKey(credentials, keyEncryptionKey);
  } catch (error) {
    await credentials.close();
    throw error;
  }
  const keyring = createKeyring(credentials, keyEncryptionKey);
  return {
    eventStore: createPrivateEventStore(raw, { keyring }),
    close: async () => {
      await raw.close();
      await credentials.close();
    },
  };
}
