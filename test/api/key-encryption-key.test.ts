import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { MongoClient } from 'mongodb';
import { loadConfig } from '../../src/config';
import { CREDENTIALS_FILE } from '../../src/infra/credentials/file';
import { createLogger } from '../../src/logger';
import { KEY_CHECK_SUBJECT, KeyEncryptionKeyMismatchError } from '../../src/privacy/keyring';
import { startService } from '../../src/service';
import { api, CRM_KEY, MODES, startTestService, type Mode, type TestService } from '../support/harness';

/**
 * A wrong or changed key-encryption key, and a damaged data key (decisions §11, README
 * "Personal data"): the key store keeps a check value (a constant sealed under the key), and a
 * start with a key that does not open it refuses, with one clear log line that holds no key;
 * a data key that is kept but does not open answers 503 for that person's reads only (never
 * 500; the service stays ready for everyone else), and the CRM's erasure of that person still
 * destroys the key and finishes.
 */

const OTHER_KEY = `another-key-encryption-key-${'z'.repeat(40)}`;

async function sync(service: TestService, id: number, email: string): Promise<{ status: number; userId: string }> {
  const res = await api(service, 'POST', '/auth/sync-customer', {
    headers: { 'X-Internal-Api-Key': CRM_KEY },
    body: { id, first_name: 'Kim', last_name: 'Keyholder', email, active: true },
  });
  return { status: res.status, userId: (res.body as { user?: { id?: string } }).user?.id ?? '' };
}

/** Starts a service process on `env` with its log captured; resolves with the start's outcome. */
async function startCaptured(env: Record<string, string>): Promise<{ outcome: unknown; logs: string; stop: () => Promise<void> }> {
  let logs = '';
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      logs += chunk.toString();
      done();
    },
  });
  const config = loadConfig({ PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', ...env });
  try {
    const service = await startService(config, createLogger(config.logLevel, sink));
    return { outcome: 'started', logs, stop: () => service.stop() };
  } catch (error) {
    return { outcome: error, logs, stop: () => Promise.resolve() };
  }
}

/** The key store's wrapped data key of `subject` replaced by a damaged one (one byte changed). */
async function damageDataKey(service: TestService, subject: string): Promise<void> {
  const damage = (wrapped: string): string => `${wrapped.slice(0, 20)}${wrapped[20] === 'A' ? 'B' : 'A'}${wrapped.slice(21)}`;
  if (service.mode === 'embedded') {
    const file = join(service.env.DATA_DIR ?? '', CREDENTIALS_FILE);
    const lines = readFileSync(file, 'utf8').split('\n');
    let changed = 0;
    const out = lines.map((line) => {
      if (line.length === 0) return line;
      const parsed = JSON.parse(line) as { k?: string; w?: string };
      if (parsed.k !== subject || parsed.w === undefined) return line;
      changed++;
      return JSON.stringify({ ...parsed, w: damage(parsed.w) });
    });
    expect(changed).toBe(1);
    writeFileSync(file, out.join('\n'));
    return;
  }
  const client = await MongoClient.connect(service.env.MONGODB_URI ?? '');
  try {
    const keys = client.db().collection<{ _id: string; wrapped: string }>('credentials');
    const doc = await keys.findOne({ _id: `key:${subject}` });
    expect(doc).not.toBeNull();
    await keys.updateOne({ _id: `key:${subject}` }, { $set: { wrapped: damage(doc?.wrapped ?? '') } });
  } finally {
    await client.close();
  }
}

async function keyStoreHolds(service: TestService, subject: string): Promise<boolean> {
  if (service.mode === 'embedded') return readFileSync(join(service.env.DATA_DIR ?? '', CREDENTIALS_FILE), 'utf8').includes(`"k":"${subject}"`);
  const client = await MongoClient.connect(service.env.MONGODB_URI ?? '');
  try {
    return (await client.db().collection<{ _id: string }>('credentials').countDocuments({ _id: `key:${subject}` })) > 0;
  } finally {
    await client.close();
  }
}

describe.each<Mode>(MODES)('the key-encryption key and damaged data keys (%s mode)', (mode) => {
  let dir: string;
  let first: TestService | null = null;
  let second: TestService | null = null;
  const ids = { next: 900_000 + Math.floor(Math.random() * 90_000) };

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'hhc-kek-'));
    first = await startTestService(mode, mode === 'embedded' ? { DATA_DIR: dir } : {});
  }, 60_000);
  afterEach(async () => {
    await second?.stop();
    await first?.stop();
    second = null;
    first = null;
    rmSync(dir, { recursive: true, force: true });
  });

  test('a start with another key-encryption key than the key store was written with refuses, with one clear log line and no key in it', async () => {
    const service = first as TestService;
    expect((await sync(service, ids.next++, `kim.${randomUUID()}@example.org`)).status).toBe(201);
    expect(await keyStoreHolds(service, KEY_CHECK_SUBJECT)).toBe(true);
    // Embedded: one process per DATA_DIR; the key comes from DATA_DIR unless the environment gives one.
    if (mode === 'embedded') await service.stop();
    if (mode === 'embedded') first = null;
    const refused = await startCaptured({ ...service.env, DATA_KEY_ENCRYPTION_KEY: OTHER_KEY });
    expect(refused.outcome).toBeInstanceOf(KeyEncryptionKeyMismatchError);
    expect(refused.logs).toContain('DATA_KEY_ENCRYPTION_KEY is not the key this key store was written with');
    expect(refused.logs).not.toContain(OTHER_KEY);
    const original = mode === 'embedded' ? (JSON.parse(readFileSync(join(dir, 'secrets.json'), 'utf8')) as { dataKeyEncryptionKey: string }).dataKeyEncryptionKey : (service.env.DATA_KEY_ENCRYPTION_KEY ?? '');
    expect(original.length).toBeGreaterThanOrEqual(32);
    expect(refused.logs).not.toContain(original);
    // The right key still starts (the refused start left the stores as they were).
    const again = await startCaptured(service.env);
    expect(again.outcome).toBe('started');
    await again.stop();
  }, 60_000);

  test("a damaged data key: that person's reads are 503 (not 500), everyone else's answer, and the CRM's erasure destroys it and finishes", async () => {
    const damagedEmail = `kim.damaged.${randomUUID()}@example.org`;
    const damagedSyncId = ids.next++;
    const damaged = await sync(first as TestService, damagedSyncId, damagedEmail);
    const intact = await sync(first as TestService, ids.next++, `kim.intact.${randomUUID()}@example.org`);
    expect([damaged.status, intact.status]).toEqual([201, 201]);
    await damageDataKey(first as TestService, `user:${damaged.userId}`);
    // A process that has not cached the key: embedded, the next start on the same DATA_DIR; distributed, another process.
    if (mode === 'embedded') {
      await first?.stop();
      first = null;
      second = await startTestService(mode, { DATA_DIR: dir });
    } else {
      second = await (first as TestService).startAnother();
    }
    const service = second;
    const token = (userId: string) => service.tokens.signAccess({ sub: userId, email: 'ignored@example.org', role: 'user' });
    const ready = await fetch(`${service.baseUrl}/api/v1/health/ready`);
    expect(ready.status).toBe(200);

    expect(await api(service, 'GET', '/users/me/export', { token: token(damaged.userId) })).toMatchObject({ status: 503, body: { message: 'Service unavailable' } });
    expect((await api(service, 'GET', '/users/me/export', { token: token(intact.userId) })).status).toBe(200);

    expect(await api(service, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id: damagedSyncId } })).toMatchObject({
      status: 200,
      body: { erased: true, userId: damaged.userId },
    });
    expect(await keyStoreHolds(service, `user:${damaged.userId}`)).toBe(false);
    // Erased through: the address is free again (released by the address the read model held), the person's history reads "[erased]".
    const resynced = await sync(service, damagedSyncId, damagedEmail);
    expect(resynced.status).toBe(201);
    expect(resynced.userId).not.toBe(damaged.userId);
    const history = [];
    for await (const event of service.eventStore.readStream(`user-${damaged.userId}`)) history.push(event);
    expect(history.find((e) => e.type === 'UserSynced')?.data).toMatchObject({ userId: damaged.userId, email: '[erased]' });
    expect(service.logs()).not.toContain('unhandled error');
  }, 90_000);
});
