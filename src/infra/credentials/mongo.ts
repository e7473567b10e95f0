import type { Collection } from 'mongodb';
import { connectMongo } from '../mongo';
import { assertCredentialKey, assertHash, type CredentialStore } from './port';

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

/** Majority write concern: an acknowledged hash survives a primary failover. */
const WRITE_CONCERN = { w: 'majority', journal: true } as const;

export async function openMongoCredentialStore(
  uri: string,
  options: { readonly dbName?: string; readonly collectionName?: string } = {},
): Promise<CredentialStore> {
  const { client, db } = await connectMongo(uri, options.dbName);
  const collection: Collection<CredentialDoc> = db.collection<CredentialDoc>(options.collectionName ?? CREDENTIALS_COLLECTION);
  let closed = false;

  return {
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
