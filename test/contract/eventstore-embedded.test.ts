import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import { eventStoreContract } from './eventstore.contract';

eventStoreContract('embedded log', async () => {
  const dataDir = await mkdtemp(join(tmpdir(), 'hhc-eventstore-contract-'));
  const store = await openEmbeddedEventStore(dataDir);
  return {
    store,
    cleanup: async () => {
      await store.close();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
});
