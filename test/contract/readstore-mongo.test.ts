import { randomBytes } from 'node:crypto';
import { MongoClient, type Db } from 'mongodb';
import { createMongoReadStore } from '../../src/infra/readstore/mongo';
import type { ReadDoc, ReadStore } from '../../src/infra/readstore/port';
import { startJongodb, type Jongodb } from '../support/jongodb';
import { readStoreContract } from './readstore.contract';

/**
 * Against a real MongoDB when MONGODB_URI is set, otherwise against jongodb (the stand-in
 * on machines where MongoDB cannot be installed). One fresh database per run; each test
 * gets its own collection prefix and is cleared with deleteMany (jongodb has no drop).
 */
const realServer = process.env.MONGODB_URI;
const dbName = `readstore_contract_${randomBytes(6).toString('hex')}`;
let jongodb: Jongodb | undefined;
let uri: string;
let admin: MongoClient;
let db: Db;
let openedCount = 0;

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

/** Opens a store under a fresh prefix and remembers the collections it touched, to clear them afterwards. */
async function openStore(): Promise<{ store: ReadStore; prefix: string; cleanup: () => Promise<void> }> {
  openedCount += 1;
  const prefix = `t${openedCount}_`;
  const inner = await createMongoReadStore(uri, { dbName, collectionPrefix: prefix });
  const touched = new Set<string>(['checkpoints']);
  const store: ReadStore = {
    collection: <T extends ReadDoc>(name: string) => {
      touched.add(name);
      return inner.collection<T>(name);
    },
    getCheckpoint: (name) => inner.getCheckpoint(name),
    setCheckpoint: (name, value) => inner.setCheckpoint(name, value),
    advanceCheckpoint: (name, value, guard) => inner.advanceCheckpoint(name, value, guard),
    ping: () => inner.ping(),
    close: () => inner.close(),
  };
  const cleanup = async (): Promise<void> => {
    await inner.close();
    for (const name of touched) await db.collection(`${prefix}${name}`).deleteMany({});
  };
  return { store, prefix, cleanup };
}

readStoreContract(realServer ? 'MongoDB (MONGODB_URI)' : 'MongoDB wire protocol (jongodb)', openStore);

describe('MongoDB read store: stored shape', () => {
  let opened: Awaited<ReturnType<typeof openStore>>;

  beforeEach(async () => {
    opened = await openStore();
  });

  afterEach(async () => {
    await opened.cleanup();
  });

  it('stores the id as _id and the guard in _guard, and strips both on read', async () => {
    const devices = opened.store.collection<{ id: string; name: string }>('devices');
    await devices.put({ id: 'd1', name: 'lamp' }, '0007');
    const raw = await db.collection<{ _id: string }>(`${opened.prefix}devices`).findOne({ _id: 'd1' });
    expect(raw).toEqual({ _id: 'd1', name: 'lamp', _guard: '0007' });
    expect(await devices.get('d1')).toEqual({ id: 'd1', name: 'lamp' });
    expect(await devices.find()).toEqual([{ id: 'd1', name: 'lamp' }]);
  });

  it('stores checkpoints as {_id: name, value}', async () => {
    await opened.store.setCheckpoint('projector', '5');
    const raw = await db.collection<{ _id: string }>(`${opened.prefix}checkpoints`).findOne({ _id: 'projector' });
    expect(raw).toEqual({ _id: 'projector', value: '5' });
  });

  it('refuses documents carrying the reserved fields, and the checkpoints collection name', async () => {
    const docs = opened.store.collection<ReadDoc & Record<string, unknown>>('docs');
    await expect(docs.put({ id: 'a', _guard: '9' }, '1')).rejects.toThrow(/reserved/);
    await expect(docs.put({ id: 'a', _id: 'b' }, '1')).rejects.toThrow(/reserved/);
    await expect(docs.find({ where: { _guard: { lt: 'z' } } })).rejects.toThrow(/reserved/);
    expect(await docs.count()).toBe(0);
    expect(() => opened.store.collection('checkpoints')).toThrow(/reserved/);
  });
});
