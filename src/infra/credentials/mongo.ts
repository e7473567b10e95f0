import type { Collection } from 'mongodb';
import { connectMongo } from '../mongo';
import { gathered } from '../gathered';
import { assertCredentialKey, assertHash, DATA_KEY_TOMBSTONE, tombstoneSubject, type CredentialStore, type StoredDataKey } from './port';

/**
 * The distributed credential store: the MongoDB collection `credentials`, one document per
 * stored hash, `_id` = `<userId>:<version>`. It lives beside the read models but is not one:
 * a read-model rebuild never touches it.
 */
export const CREDENTIALS_COLLECTION = 'credentials';

interface CredentialDoc {
  _id: string;
  userId: string;
  passwordVersion: number;
  hash: string;
  storedAt: Date;
}

/** A data key (src/privacy/keyring.ts): `_id` = `key:<subject>`. */
interface DataKeyDoc {
  _id: string;
  keyId: string;
  wrapped: string;
  storedAt: Date;
}

/** Majority write concern: an acknowledged hash survives a primary failover. */
const WRITE_CONCERN = { w: 'majority', journal: true } as const;

export async function openMongoCredentialStore(
  uri: string,
  options: { readonly dbName?: string; readonly collectionName?: string } = {},
): Promise<CredentialStore> {
  const { client, db } = await connectMongo(uri, options.dbName);
  const collection: Collection<CredentialDoc> = db.collection<CredentialDoc>(options.collectionName ?? CREDENTIALS_COLLECTION);
  const dataKeys: Collection<DataKeyDoc> = db.collection<DataKeyDoc>(options.collectionName ?? CREDENTIALS_COLLECTION);
  let closed = false;
  const asStored = (doc: DataKeyDoc | null): StoredDataKey | null =>
    doc !== null && typeof doc.keyId === 'string' && typeof doc.wrapped === 'string' ? { id: doc.keyId, wrapped: doc.wrapped } : null;

  // The subjects' keys and tombstones read in one turn of the event loop, in one query: a
  // crowd of device handshakes (the hubs of a process that died) each folds its device's
  // events, and each needs its device's key (src/infra/gathered.ts).
  const readDataKeys = gathered(async (subjects) => {
    const docs = await dataKeys.find({ _id: { $in: subjects.flatMap((subject) => [`key:${subject}`, `key:${tombstoneSubject(subject)}`]) } }).toArray();
    const byId = new Map(docs.map((doc) => [doc._id, doc]));
    const found = new Map<string, StoredDataKey>();
    for (const subject of subjects) {
      const key = byId.get(`key:${subject}`) ?? null;
      const stored = asStored(key) ?? (key !== null || byId.has(`key:${tombstoneSubject(subject)}`) ? DATA_KEY_TOMBSTONE : null);
      if (stored !== null) found.set(subject, stored);
    }
    return found;
  });

  return {
    getDataKey: (subject) => readDataKeys(subject),
    async putDataKey(subject, stored) {
      let kept: StoredDataKey | null = null;
      try {
        await dataKeys.insertOne({ _id: `key:${subject}`, keyId: stored.id, wrapped: stored.wrapped, storedAt: new Date() }, { writeConcern: WRITE_CONCERN });
        kept = stored;
      } catch (error) {
        // Another process stored the subject's key first: that one is the key.
        if ((error as { code?: unknown }).code !== 11000) throw error;
        kept = asStored(await dataKeys.findOne({ _id: `key:${subject}` }));
      }
      // Erased for good (forget writes the tombstone before it deletes the keys): a key stored
      // after the tombstone is taken back; one stored before it goes with the erasure's delete.
      if ((await dataKeys.countDocuments({ _id: `key:${tombstoneSubject(subject)}` })) > 0) {
        if (kept === stored) await dataKeys.deleteOne({ _id: `key:${subject}`, keyId: stored.id }, { writeConcern: WRITE_CONCERN });
        return DATA_KEY_TOMBSTONE;
      }
      if (kept === null) throw new Error(`no data key kept for ${subject}`);
      return kept;
    },
    async forget({ userId, dataKeySubjects, tombstones = [] }) {
      if (userId !== undefined) await collection.deleteMany({ userId }, { writeConcern: WRITE_CONCERN });
      for (const subject of tombstones) {
        await dataKeys.updateOne(
          { _id: `key:${tombstoneSubject(subject)}` },
          { $setOnInsert: { keyId: DATA_KEY_TOMBSTONE.id, wrapped: DATA_KEY_TOMBSTONE.wrapped, storedAt: new Date() } },
          { upsert: true, writeConcern: WRITE_CONCERN },
        );
      }
      const removed = [...new Set([...dataKeySubjects, ...tombstones])];
      if (removed.length > 0) {
        await dataKeys.deleteMany({ _id: { $in: removed.map((s) => `key:${s}`) } }, { writeConcern: WRITE_CONCERN });
      }
    },
    async put(userId, passwordVersion, hash) {
      assertCredentialKey(userId, passwordVersion);
      assertHash(hash);
      await collection.replaceOne(
        { _id: `${userId}:${passwordVersion}` },
        { userId, passwordVersion, hash, storedAt: new Date() },
        { upsert: true, writeConcern: WRITE_CONCERN },
      );
    },
    async get(userId, passwordVersion) {
      assertCredentialKey(userId, passwordVersion);
      const doc = await collection.findOne({ _id: `${userId}:${passwordVersion}` });
      return typeof doc?.hash === 'string' ? doc.hash : null;
    },
    async ping() {
      if (closed) throw new Error('credential store is closed');
      await db.command({ ping: 1 });
    },
    async close() {
      if (closed) return;
      closed = true;
      await client.close();
    },
  };
}
