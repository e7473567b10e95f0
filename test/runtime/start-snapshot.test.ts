import { randomUUID } from 'node:crypto';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createPresenceCommands } from '../../src/commands/presence';
import { EVENT_LOG_FILE_NAME } from '../../src/infra/eventstore/embedded';
import { formatPosition } from '../../src/infra/eventstore/port';
import { createMemoryReadStore } from '../../src/infra/readstore/memory';
import { createLogger } from '../../src/logger';
import { allProjections } from '../../src/projections';
import { startProjector } from '../../src/projections/projector';
import { startExpiryRole } from '../../src/presence/expiry-role';
import { createTimerExpiryScheduler } from '../../src/presence/timer-scheduler';
import type { ReadDoc } from '../../src/infra/readstore/port';
import { readSnapshotFile } from '../../src/infra/snapshot/file';
import { SNAPSHOT_FILE_NAME, snapshotVersion, writeStartSnapshot, type SnapshotBody } from '../../src/runtime/snapshot';
import { api, CRM_KEY, createUser, startTestService, type TestService } from '../support/harness';
import { ManualTimers } from '../support/manual-timers';
import { runReplay } from '../support/replay';
import { snapshotReadModels, type Snapshot } from '../support/snapshot';

/**
 * Embedded starts from a snapshot (src/runtime/snapshot.ts): a start that loads the snapshot
 * and applies the events after it ends where a start that replays the whole log does (read
 * models, presence deadlines, access revocations); every unusable snapshot (missing, stale,
 * damaged, truncated) is said so in the log and replayed past; a write interrupted by a
 * crash is harmless; and a rebuild from the log alone equals the read models a snapshot
 * start serves.
 */

const REVOKED = 'Token has been revoked';
let nextSyncId = 700_000 + Math.floor(Math.random() * 100_000);

interface Customer {
  readonly syncId: number;
  readonly id: string;
  readonly email: string;
}

const dirs: string[] = [];
const running: TestService[] = [];

function dataDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'hhc-snapshot-'));
  dirs.push(dir);
  return dir;
}

async function start(dir: string, env: Record<string, string> = {}): Promise<TestService> {
  const service = await startTestService('embedded', { DATA_DIR: dir, ...env });
  running.push(service);
  return service;
}

async function stop(service: TestService): Promise<void> {
  running.splice(running.indexOf(service), 1);
  await service.stop();
}

afterAll(async () => {
  for (const service of running.splice(0)) await service.stop();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

async function sync(service: TestService, customer: { syncId: number; email: string }, active: boolean) {
  const res = await api(service, 'POST', '/auth/sync-customer', {
    headers: { 'X-Internal-Api-Key': CRM_KEY },
    body: { id: customer.syncId, first_name: 'Ada', last_name: 'Lovelace', email: customer.email, active },
  });
  if (res.status !== 200 && res.status !== 201) throw new Error(`sync-customer answered ${res.status}`);
  return (res.body as { user: { id: string } }).user.id;
}

async function customer(service: TestService): Promise<Customer> {
  const syncId = nextSyncId++;
  const email = `snap.${syncId}@example.com`;
  return { syncId, email, id: await sync(service, { syncId, email }, true) };
}

/** Users, devices with heartbeats (online), renames and a deactivation. */
async function workload(service: TestService, devices: number): Promise<{ owner: Awaited<ReturnType<typeof createUser>>; uuids: string[] }> {
  const owner = await createUser(service);
  const uuids: string[] = [];
  for (let i = 0; i < devices; i++) {
    const uuid = randomUUID();
    expect((await api(service, 'POST', '/devices/register', { token: owner.accessToken, body: { uuid, deviceId: `HUB-${i}`, name: `Hub ${i}` } })).status).toBe(201);
    const token = ((await api(service, 'POST', `/devices/auth/${uuid}`, { token: owner.accessToken })).body as { token: string }).token;
    expect((await api(service, 'POST', `/devices/heartbeat/${uuid}`, { token })).status).toBe(200);
    if (i % 2 === 0) expect((await api(service, 'PUT', `/devices/${uuid}`, { token: owner.accessToken, body: { name: `Renamed ${i}` } })).status).toBe(200);
    uuids.push(uuid);
  }
  return { owner, uuids };
}

/** The deadlines the expiry role schedules from this service's read models (on a clock that never fires them). */
async function presenceDeadlines(service: TestService): Promise<Record<string, number>> {
  const scheduler = createTimerExpiryScheduler({ timers: new ManualTimers() });
  const role = await startExpiryRole({
    eventStore: service.eventStore,
    readStore: service.readStore,
    scheduler,
    presence: createPresenceCommands({ eventStore: service.eventStore, clock: { now: () => new Date() }, offlineAfterSeconds: 300 }),
    offlineAfterSeconds: 300,
    logger: createLogger('silent'),
  });
  await role.ready;
  const deadlines = Object.fromEntries([...scheduler.deadlines()].sort(([a], [b]) => a.localeCompare(b)));
  await role.stop();
  return deadlines;
}

async function status(service: TestService, token: string): Promise<number | string> {
  const res = await api(service, 'GET', '/users/me', { token });
  return res.status === 401 ? (res.body as { message: string }).message : res.status;
}

/** What a start rebuilt: read models and presence deadlines. */
async function startState(service: TestService): Promise<{ readModels: Snapshot; deadlines: Record<string, number> }> {
  return { readModels: await snapshotReadModels(service.readStore), deadlines: await presenceDeadlines(service) };
}

/** A full replay of the same log: the snapshot set aside for the start, put back after. */
async function fullReplayState(dir: string): Promise<{ readModels: Snapshot; deadlines: Record<string, number> }> {
  const file = join(dir, SNAPSHOT_FILE_NAME);
  const kept = `${file}.kept`;
  copyFileSync(file, kept);
  rmSync(file);
  const service = await start(dir);
  try {
    expect(service.logs()).toContain('start snapshot: none; replaying the whole log');
    return await startState(service);
  } finally {
    await stop(service);
    copyFileSync(kept, file);
    rmSync(kept);
  }
}

describe('embedded start snapshots', () => {
  jest.setTimeout(120_000);

  it('a start from the snapshot, with events written after it, equals a start that replays the whole log', async () => {
    const dir = dataDir();
    const first = await start(dir);
    const comeback = await customer(first);
    await sync(first, comeback, false);
    const { owner } = await workload(first, 3);
    const deactivated = await customer(first);
    const oldToken = first.tokens.signAccess({ sub: deactivated.id, email: deactivated.email, role: 'user' });
    await sync(first, deactivated, false);
    const reactivated = await customer(first);
    const reactivatedOldToken = first.tokens.signAccess({ sub: reactivated.id, email: reactivated.email, role: 'user' });
    await sync(first, reactivated, false);
    await sync(first, reactivated, true);
    await stop(first);
    const file = join(dir, SNAPSHOT_FILE_NAME);
    expect(existsSync(file)).toBe(true);
    const early = readFileSync(file);

    // More history after that snapshot, then the snapshot of before it put back.
    const second = await start(dir);
    await workload(second, 2);
    const laterUser = await customer(second);
    const laterToken = second.tokens.signAccess({ sub: laterUser.id, email: laterUser.email, role: 'user' });
    await sync(second, laterUser, false);
    await sync(second, comeback, true);
    await stop(second);
    writeFileSync(file, early);

    const fromSnapshot = await start(dir);
    expect(fromSnapshot.logs()).toContain('start snapshot: loaded; applying the events after it');
    // Only what came after the snapshot was applied, not the history before it.
    const applied = Number(/"eventsApplied":(\d+),[^\n]*"msg":"projector caught up"/.exec(fromSnapshot.logs())?.[1]);
    const total = await countEvents(fromSnapshot);
    expect(applied).toBeGreaterThan(0);
    expect(applied).toBeLessThan(total / 2);
    const restored = await startState(fromSnapshot);
    // Access revocations: the deactivated users (before and after the snapshot) are refused,
    // the reactivated user's tokens from before the deactivation too (kept by the snapshot).
    expect(await status(fromSnapshot, oldToken)).toBe(REVOKED);
    expect(await status(fromSnapshot, laterToken)).toBe(REVOKED);
    expect(await status(fromSnapshot, reactivatedOldToken)).toBe(REVOKED);
    expect(await status(fromSnapshot, owner.accessToken)).toBe(200);
    // Inactive in the snapshot, reactivated after it: a token issued now works.
    const comebackToken = fromSnapshot.tokens.signAccess({ sub: comeback.id, email: comeback.email, role: 'user' });
    expect(await status(fromSnapshot, comebackToken)).toBe(200);
    await stop(fromSnapshot);

    const replayed = await fullReplayState(dir);
    expect(Object.keys(restored.deadlines)).toHaveLength(5);
    expect(restored).toEqual(replayed);
    expect(restored.readModels.users?.length).toBeGreaterThanOrEqual(4);
    const replay = await start(dir);
    expect(await status(replay, oldToken)).toBe(REVOKED);
    expect(await status(replay, laterToken)).toBe(REVOKED);
    expect(await status(replay, owner.accessToken)).toBe(200);
    await stop(replay);
  });

  describe('an unusable snapshot is said so and the whole log is replayed', () => {
    let dir: string;
    let reference: Snapshot;
    let good: Buffer;

    beforeAll(async () => {
      dir = dataDir();
      const service = await start(dir);
      await workload(service, 2);
      await stop(service);
      good = readFileSync(join(dir, SNAPSHOT_FILE_NAME));
      reference = (await fullReplayState(dir)).readModels;
    });

    const startWith = async (snapshot: Buffer | null, env: Record<string, string> = {}): Promise<TestService> => {
      const file = join(dir, SNAPSHOT_FILE_NAME);
      if (snapshot === null) rmSync(file, { force: true });
      else writeFileSync(file, snapshot);
      return start(dir, env);
    };

    const cases: ReadonlyArray<[string, () => Buffer | null, Record<string, string>, string]> = [
      ['missing', () => null, {}, 'start snapshot: none; replaying the whole log'],
      ['truncated', () => good.subarray(0, good.length - 10), {}, 'start snapshot: truncated; replaying the whole log'],
      ['damaged (checksum)', () => flipLastDocumentByte(good), {}, '"detail":"checksum mismatch"'],
      ['stale (another build)', () => good, { APP_VERSION: 'another-build' }, 'start snapshot: stale; replaying the whole log'],
    ];

    it.each(cases)('%s', async (_name, snapshot, env, line) => {
      const service = await startWith(snapshot(), env);
      try {
        expect(service.logs()).toContain(line);
        expect(service.logs()).not.toContain('start snapshot: loaded');
        expect(await snapshotReadModels(service.readStore)).toEqual(reference);
      } finally {
        await stop(service);
      }
    });

    it('stale: a snapshot that covers more than the log holds (a log restored from an older backup)', async () => {
      const shortLog = dataDir();
      copyFileSync(join(dir, EVENT_LOG_FILE_NAME), join(shortLog, EVENT_LOG_FILE_NAME));
      const longer = await start(dir);
      await workload(longer, 1);
      await stop(longer);
      copyFileSync(join(dir, SNAPSHOT_FILE_NAME), join(shortLog, SNAPSHOT_FILE_NAME));
      // A backup of the log goes with the key store and its key, or every personal field reads as erased.
      for (const kept of ['credentials.jsonl', 'secrets.json']) copyFileSync(join(dir, kept), join(shortLog, kept));

      const service = await start(shortLog);
      expect(service.logs()).toContain('start snapshot: stale; replaying the whole log');
      expect(service.logs()).toContain('but the log ends at');
      expect(await snapshotReadModels(service.readStore)).toEqual(reference);
      await stop(service);
    });
  });

  it('a snapshot write interrupted by a crash (its .tmp left behind) is harmless', async () => {
    const dir = dataDir();
    const service = await start(dir);
    await workload(service, 2);
    const head = await service.eventStore.headPosition();
    await stop(service);
    const file = join(dir, SNAPSHOT_FILE_NAME);
    // The shutdown wrote the last one: it covers the whole log.
    expect(await readSnapshotFile(file)).toMatchObject({ kind: 'ok', header: { position: head === null ? null : formatPosition(head) } });
    const good = readFileSync(file);
    writeFileSync(`${file}.tmp`, good.subarray(0, Math.floor(good.length / 2)));

    const next = await start(dir);
    expect(next.logs()).toContain('start snapshot: removed a snapshot write interrupted by a crash');
    expect(next.logs()).toContain('start snapshot: loaded');
    expect(next.logs()).toMatch(/"eventsApplied":0,[^\n]*"msg":"projector caught up"/);
    const restored = await snapshotReadModels(next.readStore);
    // Nothing applied since the start, yet the projector counts as caught up: the snapshot's
    // position is applied (readiness fails once a head has been unapplied for 5 s).
    expect((await api(next, 'GET', '/health/ready')).status).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 5500));
    expect((await api(next, 'GET', '/health/ready')).status).toBe(200);
    await stop(next);
    expect(existsSync(`${file}.tmp`)).toBe(false);
    expect(restored).toEqual((await fullReplayState(dir)).readModels);
  });

  it('is written while the service runs, after SNAPSHOT_EVERY_EVENTS appends', async () => {
    const dir = dataDir();
    const service = await start(dir, { SNAPSHOT_EVERY_EVENTS: '5', SNAPSHOT_INTERVAL_SECONDS: '3600' });
    const file = join(dir, SNAPSHOT_FILE_NAME);
    await until(() => existsSync(file));
    const atStart = readFileSync(file);
    await workload(service, 3);
    await until(() => !readFileSync(file).equals(atStart));
    // A crash now (no shutdown snapshot): the start finds the periodic one.
    const periodic = readFileSync(file);
    await stop(service);
    writeFileSync(file, periodic);
    const next = await start(dir);
    expect(next.logs()).toContain('start snapshot: loaded');
    expect(await snapshotReadModels(next.readStore)).toEqual((await fullReplayStateOf(next)));
    await stop(next);
  });

  it('a rebuild from the log alone equals what a snapshot start serves', async () => {
    const dir = dataDir();
    const first = await start(dir);
    await workload(first, 3);
    await stop(first);
    const service = await start(dir);
    expect(service.logs()).toContain('start snapshot: loaded');
    const admin = await createUser(service, { role: 'admin' });
    const before = await snapshotReadModels(service.readStore);
    const res = await api(service, 'POST', '/admin/read-models/rebuild', { token: admin.accessToken });
    expect(res.status).toBe(200);
    expect((res.body as { generation: number }).generation).toBe(1);
    expect(await snapshotReadModels(service.readStore)).toEqual(before);
    await stop(service);
  });

  it('the rebuild endpoint and `npm run replay -- rebuild` never read the snapshot: a forged one is rebuilt away', async () => {
    const dir = dataDir();
    const first = await start(dir);
    await workload(first, 2);
    const admin = await createUser(first, { role: 'admin' });
    await stop(first);
    const reference = (await fullReplayState(dir)).readModels;
    // A well-formed snapshot (right version, checksum and position) holding a user the log never had.
    const file = join(dir, SNAPSHOT_FILE_NAME);
    const read = await readSnapshotFile(file);
    if (read.kind !== 'ok') throw new Error(`no snapshot: ${read.kind}`);
    const body = read.body as SnapshotBody;
    const users = body.readModels.collections.users ?? [];
    const forgedUser = { doc: { ...(users[0]?.doc as ReadDoc), id: 'forged-user', email: 'forged@example.com' }, guard: users[0]?.guard ?? '' };
    const forged: SnapshotBody = { ...body, readModels: { ...body.readModels, collections: { ...body.readModels.collections, users: [...users, forgedUser] } } };
    await writeStartSnapshot(file, snapshotVersion('dev'), forged);

    const cli = await runReplay({ DATA_DIR: dir }, ['rebuild']);
    expect(cli.code).toBe(0);
    expect((JSON.parse(cli.stdout) as { collections: Record<string, number> }).collections.users).toBe(reference.users?.length);

    const service = await start(dir);
    expect(service.logs()).toContain('start snapshot: loaded');
    // The start trusts its cache…
    expect(await service.readStore.collection('users').get('forged-user')).not.toBeNull();
    // …a rebuild goes back to the log.
    expect((await api(service, 'POST', '/admin/read-models/rebuild', { token: admin.accessToken })).status).toBe(200);
    expect(await service.readStore.collection('users').get('forged-user')).toBeNull();
    expect(await snapshotReadModels(service.readStore)).toEqual(reference);
    await stop(service);
  });
});

/** The read models of a full replay of the log the service has (it keeps running). */
async function fullReplayStateOf(service: TestService): Promise<Snapshot> {
  const store = createMemoryReadStore();
  const projector = await startProjector(service.eventStore, store, allProjections());
  await projector.caughtUp;
  await projector.stop();
  return snapshotReadModels(store);
}

/** A byte of the body changed where it is still valid JSON: only the checksum can tell. */
function flipLastDocumentByte(bytes: Buffer): Buffer {
  const copy = Buffer.from(bytes);
  const at = copy.lastIndexOf(Buffer.from('Hub'));
  copy[at] = 'J'.charCodeAt(0);
  return copy;
}

async function until(done: () => boolean, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!done()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** Every event of the log (what a full replay applies). */
async function countEvents(service: TestService): Promise<number> {
  let count = 0;
  const subscription = service.eventStore.subscribe();
  for await (const item of subscription) {
    if (item.kind === 'caught-up') break;
    count++;
  }
  await subscription.close();
  return count;
}
