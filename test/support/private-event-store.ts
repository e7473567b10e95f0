import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openFileCredentialStore } from '../../src/infra/credentials/file';
import type { CredentialStore } from '../../src/infra/credentials/port';
import type { EventStore } from '../../src/infra/eventstore/port';
import { derivePrivacyKeys } from '../../src/privacy/crypto';
import { createPrivateEventStore } from '../../src/privacy/event-store';
import { createKeyring, type Keyring } from '../../src/privacy/keyring';

/**
 * A private event store over a raw log, with a file credential store and a keyring, in a fresh
 * directory for each test. A test may replace `credentials`, `keyring` and `store` (a reopen):
 * what is there after the test is what gets closed.
 */
export interface PrivateEventStoreFixture {
  dir: string;
  raw: EventStore;
  credentials: CredentialStore;
  keyring: Keyring;
  store: EventStore;
}

/**
 * Call at the top of a describe block: it registers its own beforeEach/afterEach. `openRaw`
 * opens the raw log for the test's directory.
 */
export function privateEventStoreEachTest(prefix: string, openRaw: (dir: string) => EventStore | Promise<EventStore>): PrivateEventStoreFixture {
  const fixture = {} as PrivateEventStoreFixture;
  beforeEach(async () => {
    fixture.dir = mkdtempSync(join(tmpdir(), prefix));
    fixture.raw = await openRaw(fixture.dir);
    fixture.credentials = await openFileCredentialStore(fixture.dir);
    fixture.keyring = createKeyring(fixture.credentials, derivePrivacyKeys('k'.repeat(40)).keyEncryptionKey);
    fixture.store = createPrivateEventStore(fixture.raw, { keyring: fixture.keyring });
  });
  afterEach(async () => {
    await fixture.raw.close();
    await fixture.credentials.close();
    rmSync(fixture.dir, { recursive: true, force: true });
  });
  return fixture;
}
