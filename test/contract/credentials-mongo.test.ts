import { randomBytes } from 'node:crypto';
import { MongoClient, type Db } from 'mongodb';
import { CREDENTIALS_COLLECTION, openMongoCredentialStore } from '../../src/infra/credentials/mongo';
import type { CredentialStore } from '../../src/infra/credentials/port';
import { startJongodb, type Jongodb } from '../support/jongodb';
import { credentialStoreContract } from './credentials.contract';

/** Against a real MongoDB when MONGODB_URI is set, otherwise against jongodb. */
const realServer = process.env.MONGODB_URI;
const dbName = `credentials_contract_${randomBytes(6).toString('hex')}`;
let jongodb: Jongodb | undefined;
let uri: string;
let admin: MongoClient;
let db: Db;
let opened = 0;

beforeAll(async () => {
  if (realServer !== undefined && realServer !== '') uri = realServer;
  else {
    jongodb = await startJongodb();
    uri = jongodb.uri;
  }
  admin = new MongoClient(uri);
  await admin.connect();
  db = admin.db(dbName);
});

afterAll(async () => {
  if (jongodb === undefined) await db?.dropDatabase();
  await admin?.close();
  await jongodb?.stop();
});

credentialStoreContract(realServer ? 'MongoDB (MONGODB_URI)' : 'MongoDB wire protocol (jongodb)', async () => {
  opened += 1;
  const collectionName = `credentials_${opened}`;
  const stores: CredentialStore[] = [await openMongoCredentialStore(uri, { dbName, collectionName })];
  return {
    store: stores[0] as CredentialStore,
    reopen: async () => {
      const store = await openMongoCredentialStore(uri, { dbName, collectionName });
      stores.push(store);
      return store;
    },
    cleanup: async () => {
      for (const store of stores) await store.close();
      await db.collection(collectionName).deleteMany({});
    },
  };
});

describe('MongoDB credential store: stored shape', () => {
  it('keeps one document per user and version in `credentials`', async () => {
    const store = await openMongoCredentialStore(uri, { dbName });
    try {
      await store.put('u1', 3, '$argon2id$three');
      const raw = await db.collection<{ _id: string }>(CREDENTIALS_COLLECTION).findOne({ _id: 'u1:3' });
      expect(raw).toMatchObject({ _id: 'u1:3', userId: 'u1', passwordVersion: 3, hash: '$argon2id$three' });
    } finally {
      await store.close();
      await db.collection(CREDENTIALS_COLLECTION).deleteMany({});
    }
  });
});
