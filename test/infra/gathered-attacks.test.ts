import { randomBytes } from 'node:crypto';
/**
 * Attacks on gathered reads (src/infra/gathered.ts) and the gathered data-key read of the MongoDB
 * credential store: synchronous failures, reads asked while a batch is in flight, erasure racing a
 * batch, a keyring eviction while its read waits, a connection dropped under a batch.
 */
import { gathered } from '../../src/infra/gathered';
import { openMongoCredentialStore } from '../../src/infra/credentials/mongo';
import { DATA_KEY_TOMBSTONE, type CredentialStore } from '../../src/infra/credentials/port';
import { createKeyring, userSubject } from '../../src/privacy/keyring';
import { startJongodb, type Jongodb } from '../support/jongodb';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy';

let jongodb: Jongodb;
let proxy: TcpProxy;
let uri: string;
const opened: CredentialStore[] = [];
const open = async (): Promise<CredentialStore> => {
  const store = await openMongoCredentialStore(uri, { dbName: `gather_${randomBytes(4).toString('hex')}` });
  opened.push(store);
  return store;
};
beforeAll(async () => {
  jongodb = await startJongodb({ replicaSet: false });
  const u = new URL(jongodb.uri);
  proxy = await startTcpProxy(Number(u.port));
  uri = `mongodb://127.0.0.1:${proxy.port}/?directConnection=true&serverMonitoringMode=poll&serverSelectionTimeoutMS=1500&heartbeatFrequencyMS=500`;
});
afterAll(async () => {
  for (const store of opened) await store.close().catch(() => undefined);
  await proxy.close();
  await jongodb.stop();
});

test('a reader that throws synchronously fails each caller once; the next turn reads again', async () => {
  let calls = 0;
  const read = gathered<number>((keys) => {
    calls += 1;
    if (calls === 1) throw new Error('sync');
    return Promise.resolve(new Map(keys.map((k) => [k, k.length])));
  });
  const settled = await Promise.allSettled([read('a'), read('bb'), read('a')]);
  expect(settled.map((s) => s.status)).toEqual(['rejected', 'rejected', 'rejected']);
  expect(await Promise.all([read('a'), read('bb')])).toEqual([1, 2]);
});

test('reads asked while a batch is in flight go in a new batch, asked after they were', async () => {
  const batches: string[][] = [];
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const read = gathered<string>(async (keys) => {
    batches.push([...keys]);
    if (batches.length === 1) await gate;
    return new Map(keys.map((k) => [k, `${k}@${batches.length}`]));
  });
  const first = read('x');
  await new Promise((r) => setImmediate(r));
  const second = read('x');
  await new Promise((r) => setImmediate(r));
  release();
  expect(await first).toBe('x@2');
  expect(await second).toBe('x@2');
  expect(batches).toEqual([['x'], ['x']]);
});

test('a subject erased in the turn its read is gathered with others: tombstone for it, keys for the others', async () => {
  const store = await open();
  for (let i = 0; i < 300; i++) await store.putDataKey(`device:d${i}`, { id: `k${i}`, wrapped: `w${i}` });
  await store.putDataKey('user:gone', { id: 'kg', wrapped: 'wg' });
  const forgetting = store.forget({ userId: 'gone', dataKeySubjects: ['user:gone'], tombstones: ['user:gone'] });
  const reads = Promise.all(['user:gone', ...Array.from({ length: 300 }, (_, i) => `device:d${i}`)].map((s) => store.getDataKey(s)));
  await forgetting;
  const answers = await reads;
  // Racing the erasure, either is what a single read could answer; after it, the tombstone.
  expect([{ id: 'kg', wrapped: 'wg' }, DATA_KEY_TOMBSTONE]).toContainEqual(answers[0]);
  expect(answers.slice(1)).toEqual(Array.from({ length: 300 }, (_, i) => ({ id: `k${i}`, wrapped: `w${i}` })));
  expect(await store.getDataKey('user:gone')).toEqual(DATA_KEY_TOMBSTONE);
});

test('keyring: a key read gathered while the subject is destroyed is not kept once the erasure is known', async () => {
  const kek = randomBytes(32);
  const storeA = await open();
  const a = createKeyring(storeA, kek);
  const subject = userSubject('u1');
  const made = await a.keyFor(subject);
  // Another keyring over the same store (another process's view): nothing cached, its read gathered while A destroys.
  const b = createKeyring(storeA, kek);
  const pendingB = b.keyById(made.keyId);
  await a.destroy([subject], 'u1');
  // The erasure's UserErased reaches B after the keys are gone (it is appended after the destroy).
  b.evict(subject);
  const got = await pendingB;
  // Racing the destroy, B's read may have seen the key or not, as a single read could.
  expect(got === null || Buffer.isBuffer(got)).toBe(true);
  // Once the erasure is known, nothing of it is held or read again.
  expect(b.heldKeyFor(subject)).toBeUndefined();
  expect(await b.keyById(made.keyId)).toBeNull();
  expect(await a.keyById(made.keyId)).toBeNull();
  await expect(a.keyFor(subject)).rejects.toThrow(/erased/);
});

test('a batch whose connection drops settles every caller (rejected or answered), and the next read works', async () => {
  const store = await open();
  await store.putDataKey('device:p', { id: 'kp', wrapped: 'wp' });
  const reads = Array.from({ length: 50 }, (_, i) => store.getDataKey(i % 2 === 0 ? 'device:p' : `device:n${i}`));
  await new Promise((r) => setImmediate(r));
  proxy.drop();
  proxy.setDown(true);
  const settled = await Promise.allSettled(reads);
  proxy.setDown(false);
  expect(settled).toHaveLength(50);
  await new Promise((r) => setTimeout(r, 1000));
  expect(await store.getDataKey('device:p')).toEqual({ id: 'kp', wrapped: 'wp' });
}, 20_000);
