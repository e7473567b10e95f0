import { createMongoGenerationRegistry, generationPrefix } from '../../src/infra/readstore/generations';
import { createMongoReadStore } from '../../src/infra/readstore/mongo';
import { snapshotReadModels, type Snapshot } from '../support/snapshot';

/**
 * Distributed mode: the read models as stored in MongoDB, every document with its guard,
 * compared the way the rebuild test compares them (test/api/rebuild.test.ts): the served
 * generation before a rebuild against the generation the rebuild filled from the events.
 */
export interface StoredModels {
  /** The generation served now. */
  served(): Promise<number>;
  snapshot(generation: number): Promise<Snapshot>;
}

export function storedModels(mongoUri: string): StoredModels {
  return {
    async served() {
      const registry = await createMongoGenerationRegistry(mongoUri);
      try {
        return (await registry.read()).generation;
      } finally {
        await registry.close();
      }
    },
    async snapshot(generation) {
      const store = await createMongoReadStore(mongoUri, { collectionPrefix: generationPrefix(generation) });
      try {
        return await snapshotReadModels(store);
      } finally {
        await store.close();
      }
    },
  };
}
