import type { ReadDoc, ReadStore } from '../../src/infra/readstore/port';
import { ACCESS_REVOCATIONS_COLLECTION } from '../../src/projections/access-revocations';
import { DEVICES_COLLECTION } from '../../src/projections/devices';
import { SESSIONS_COLLECTION } from '../../src/projections/sessions';
import { USERS_COLLECTION } from '../../src/projections/users';

/** The read-model collections the service keeps (a rebuild report names them too). */
export const READ_MODEL_COLLECTIONS: readonly string[] = [USERS_COLLECTION, SESSIONS_COLLECTION, DEVICES_COLLECTION, ACCESS_REVOCATIONS_COLLECTION];

export type Snapshot = Record<string, Array<{ doc: ReadDoc; guard: string | null }>>;

/** Every document of the given collections with its guard, in id order: two equal snapshots are identical read models. */
export async function snapshotReadModels(store: ReadStore, collections: readonly string[] = READ_MODEL_COLLECTIONS): Promise<Snapshot> {
  const snapshot: Snapshot = {};
  for (const name of [...new Set(collections)].sort()) {
    const collection = store.collection<ReadDoc>(name);
    const docs = await collection.find({ sort: [{ field: 'id', order: 'asc' }] });
    snapshot[name] = await Promise.all(docs.map(async (doc) => ({ doc, guard: await collection.getGuard(doc.id) })));
  }
  return snapshot;
}
