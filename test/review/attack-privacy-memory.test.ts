import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { SubscribeAck } from '../../src/tunnel/events';
import { api, CRM_KEY, GENEROUS_RATE_LIMITS } from '../support/harness';
import { deviceMarkers, heapSnapshotEnv, heldBy, marker, startWatched, stopWatched, type DeviceMarkers, type Watched } from '../support/heap-snapshot';
import { PROCESS_TEST_TIMEOUT_MS, startServerProcess, TEST_SECRETS, type ServerProcess } from '../support/server';
import { startStack, type Stack } from '../support/stack';
import { connect, handshakeFrom, refusal, request, type Probe } from '../support/tunnel';

/**
 * Decisions §11 from outside, in the heap of a real service process: after a person's erasure
 * nothing the process keeps in memory holds their e-mail, names, CRM fields, their sessions'
 * address and user agent, or their hubs' name, address and metadata — whatever the person did
 * before (signed in through a proxy, refreshed, failed a login, asked for a reset, exported,
 * connected a hub). The texts looked for are written by the test alone.
 *
 * Defect (fixed): the rate-limit counters kept by client IP held the address in clear in memory
 * after the erasure of the person whose sessions came from it — in embedded mode the memory
 * counters were keyed `ip:<address>` (no keyed names there), and in distributed mode the keyed
 * names' cache (src/privacy/counter-keys.ts) kept the last 10,000 addresses with no end in time.
 * Both modes now name those counters by the keyed hash, and every revocation (an erasure among
 * them) empties the cache of names, in every API process (each hears it on its revocation feed).
 *
 * Held: the e-mail, names, CRM fields and user agent of a person who signed in, refreshed, failed
 * a login, asked for a reset, exported and connected a hub; a co-owner's erasure leaves the hub
 * and its data to the owner left; a restart on the same data directory brings nothing back.
 */

type Target = Pick<ServerProcess, 'baseUrl'>;

const PASSWORD = 'correct horse battery staple';

/** A unique-local IPv6 address no one else uses: written whole, as a proxy would forward it. */
const address = (): string => `fd${randomBytes(1).toString('hex')}:${Array.from({ length: 7 }, () => randomBytes(2).toString('hex')).join(':')}`;

/** A service trusting X-Forwarded-For, as behind a proxy: each person's requests come from an address of their own. */
const startBehindProxy = (env: Record<string, string>): Promise<Watched> => startWatched({ TRUST_PROXY: 'true', ...env });

const notStarted = (): never => {
  throw new Error('the service has not started');
};

let nextSyncId = 700_000 + Math.floor(Math.random() * 90_000);

interface Person {
  readonly email: string;
  readonly firstName: string;
  readonly lastName: string;
  readonly company: string;
  readonly language: string;
  /** Where their requests come from (X-Forwarded-For) and with what user agent. */
  readonly ip: string;
  readonly userAgent: string;
}

const personMarkers = (): Person => ({
  email: `erased.${randomUUID()}@example.org`,
  firstName: marker('RvFirst'),
  lastName: marker('RvLast'),
  company: marker('RvCompany'),
  language: marker('RvLang'),
  ip: address(),
  userAgent: marker('RvAgent/'),
});

const from = (p: Person): Record<string, string> => ({ 'X-Forwarded-For': p.ip, 'User-Agent': p.userAgent });

/** A person synced from the CRM who set a password through a reset, signed in and refreshed, from their own address. */
async function signedIn(s: ServerProcess, p: Person): Promise<{ id: string; syncId: number; access: string; refresh: string }> {
  const syncId = nextSyncId++;
  const synced = await api(s, 'POST', '/auth/sync-customer', {
    headers: { 'X-Internal-Api-Key': CRM_KEY },
    body: { id: syncId, first_name: p.firstName, last_name: p.lastName, email: p.email, active: true, company_name: p.company, contract_language: p.language },
  });
  expect(synced.status).toBe(201);
  const id = (synced.body as { user: { id: string } }).user.id;
  expect((await api(s, 'POST', '/auth/password-reset/request', { headers: from(p), body: { email: p.email } })).status).toBe(202);
  let reset: string | undefined;
  for (let i = 0; i < 200 && reset === undefined; i++) {
    reset = new RegExp(`(${id}\\.[A-Za-z0-9_-]{43})`).exec(s.output())?.[1];
    if (reset === undefined) await new Promise((r) => setTimeout(r, 50));
  }
  expect((await api(s, 'POST', '/auth/password-reset/confirm', { headers: from(p), body: { token: reset, password: PASSWORD } })).status).toBe(200);
  expect((await api(s, 'POST', '/auth/login', { headers: from(p), body: { email: p.email, password: 'not the password' } })).status).toBe(401);
  const login = await api(s, 'POST', '/auth/login', { headers: from(p), body: { email: p.email, password: PASSWORD } });
  expect(login.status).toBe(201);
  const refreshed = await api(s, 'POST', '/auth/refresh', { headers: from(p), body: { refreshToken: (login.body as { refreshToken: string }).refreshToken } });
  expect(refreshed.status).toBe(201);
  const { accessToken, refreshToken } = refreshed.body as { accessToken: string; refreshToken: string };
  return { id, syncId, access: accessToken, refresh: refreshToken };
}

async function markedHub(s: Target, ownerToken: string, m: DeviceMarkers, headers: Record<string, string> = {}): Promise<{ id: string; uuid: string; hubToken: string }> {
  const uuid = randomUUID();
  const registered = await api(s, 'POST', '/devices/register', { token: ownerToken, headers, body: { uuid, deviceId: 'RV-1', name: m.name, ipAddress: m.ip, metadata: { note: m.metadata } } });
  expect(registered.status).toBe(201);
  const issued = await api(s, 'POST', `/devices/auth/${uuid}`, { token: ownerToken, headers });
  expect(issued.status).toBe(201);
  const hubToken = (issued.body as { token: string }).token;
  expect((await api(s, 'POST', `/devices/heartbeat/${uuid}`, { token: hubToken, headers, body: { ipAddress: m.laterIp, metadata: { note: m.laterMetadata } } })).status).toBe(200);
  return { id: (registered.body as { id: string }).id, uuid, hubToken };
}

describe('an erased person who used the service in every way leaves nothing in the heap (embedded, a service process)', () => {
  jest.setTimeout(PROCESS_TEST_TIMEOUT_MS);
  let dataDir: string;
  let service: Watched | undefined;
  const open: Probe[] = [];
  /** What an erasure of a test before took: looked for again after a restart. */
  const erasedEarlier: string[] = [];
  const gone: Array<{ uuid: string; hubToken: string }> = [];
  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'hhc-review-privacy-'));
    service = await startBehindProxy({ DATA_DIR: dataDir });
  }, PROCESS_TEST_TIMEOUT_MS);
  afterAll(async () => {
    open.forEach((p) => p.close());
    await stopWatched(service).finally(() => rmSync(dataDir, { recursive: true, force: true }));
  });
  const watched = (): Watched => service ?? notStarted();

  test('signed in through a proxy, refreshed, failed a login, exported, connected a hub; erased by DELETE /users/me', async () => {
    const s = watched().process;
    const p = personMarkers();
    const m = deviceMarkers();
    const me = await signedIn(s, p);
    const hub = await markedHub(s, me.access, m, from(p));
    expect((await api(s, 'GET', '/users/me', { token: me.access, headers: from(p) })).status).toBe(200);
    expect((await api(s, 'GET', '/devices', { token: me.access, headers: from(p) })).status).toBe(200);
    expect((await api(s, 'GET', '/users/me/export', { token: me.access, headers: from(p) })).status).toBe(200);
    expect((await handshakeFrom(s, p.ip, hub.hubToken)).connected).toBe(true);
    const app = await connect(s, me.access);
    open.push(app);
    expect(await request<SubscribeAck>(app, 'tunnel:subscribe', { deviceUuid: hub.uuid })).toMatchObject({ success: true });

    const before = await heldBy(watched(), Object.values(p));
    expect(before.found.length).toBeGreaterThan(0);

    expect(await api(s, 'DELETE', '/users/me', { token: me.access, headers: from(p), body: { password: PASSWORD } })).toMatchObject({ status: 200, body: { success: true } });
    expect(await api(s, 'POST', '/auth/login', { body: { email: p.email, password: PASSWORD } })).toMatchObject({ status: 401, body: { message: 'Invalid email or password' } });
    expect(await api(s, 'GET', '/users/me', { token: me.access })).toMatchObject({ status: 401, body: { message: 'Token has been revoked' } });
    app.close();

    expect(await heldBy(watched(), [...Object.values(p), ...Object.values(m)], 6)).toEqual({ found: [], holders: [] });
    erasedEarlier.push(...Object.values(p), ...Object.values(m));
    gone.push(hub);
  });

  test('a co-owner erased: the shared hub is not deleted, nothing of theirs is kept, and the other owner still sees its name, address and metadata', async () => {
    const s = watched().process;
    const p = personMarkers();
    const m = deviceMarkers();
    const erasedOne = await signedIn(s, p);
    const otherOne = personMarkers();
    const other = await signedIn(s, otherOne);
    const hub = await markedHub(s, erasedOne.access, m);
    expect((await api(s, 'POST', `/devices/${hub.id}/link`, { token: erasedOne.access, body: { email: otherOne.email, role: 'owner' } })).status).toBeLessThan(300);

    expect(await api(s, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id: erasedOne.syncId } })).toMatchObject({ status: 200 });

    // The hub lives on, with all its data, for the owner left.
    const shown = await api(s, 'GET', `/devices/${hub.id}`, { token: other.access });
    expect(shown).toMatchObject({ status: 200, body: { name: m.name, ipAddress: m.laterIp, metadata: { note: m.laterMetadata } } });
    const listed = (await api(s, 'GET', '/devices', { token: other.access })).body as { data: Array<{ id: string; name: string }> };
    expect(listed.data.find((d) => d.id === hub.id)?.name).toBe(m.name);
    expect((await api(s, 'POST', `/devices/heartbeat/${hub.uuid}`, { token: hub.hubToken, body: {} })).status).toBe(200);
    const app = await connect(s, other.access);
    open.push(app);
    expect(await request<SubscribeAck>(app, 'tunnel:subscribe', { deviceUuid: hub.uuid })).toMatchObject({ success: true });
    app.close();

    // Nothing of the person; the hub's data is the household's and stays.
    const held = await heldBy(watched(), Object.values(p));
    expect(held).toEqual({ found: [], holders: [] });
  });

  test('a restart on the same data directory after the erasure: nothing of the person or their hub comes back, and the hub stays refused', async () => {
    expect(erasedEarlier.length).toBeGreaterThan(0);
    await watched().process.stop();
    const snapshots = watched().snapshots;
    service = { process: await startServerProcess({ ...TEST_SECRETS, RATE_LIMITS: GENEROUS_RATE_LIMITS, TRUST_PROXY: 'true', ...heapSnapshotEnv(snapshots), DATA_DIR: dataDir }), snapshots };
    const s = watched().process;
    for (const hub of gone) {
      expect(await api(s, 'POST', `/devices/heartbeat/${hub.uuid}`, { token: hub.hubToken, body: {} })).toMatchObject({ status: 401, body: { message: 'Token has been revoked' } });
      expect((await refusal(s, { token: hub.hubToken })).message).toBe('unauthorized');
    }
    expect(await heldBy(watched(), erasedEarlier)).toEqual({ found: [], holders: [] });
  });
});

describe('the same in distributed mode: the process the person used and the one that erased them (two service processes)', () => {
  jest.setTimeout(PROCESS_TEST_TIMEOUT_MS);
  let running: { readonly stack: Stack; readonly a: Watched; readonly b: Watched } | undefined;
  beforeAll(async () => {
    const stack = await startStack();
    const [a, b] = await Promise.all([startBehindProxy(stack.env), startBehindProxy(stack.env)]);
    running = { stack, a, b };
  }, PROCESS_TEST_TIMEOUT_MS);
  afterAll(async () => {
    if (running === undefined) return;
    await Promise.all([stopWatched(running.b), stopWatched(running.a)]);
    await running.stack.stop();
  });

  test('signed in, refreshed and heard through B, erased by the CRM through A: neither heap holds their address', async () => {
    const { a, b } = running ?? notStarted();
    const p = personMarkers();
    const m = deviceMarkers();
    const me = await signedIn(b.process, p);
    const hub = await markedHub(b.process, me.access, m, from(p));
    expect((await handshakeFrom(b.process, p.ip, hub.hubToken)).connected).toBe(true);

    const erased = await api(a.process, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id: me.syncId } });
    expect(erased).toMatchObject({ status: 200, body: { erased: true, userId: me.id } });
    expect(await api(b.process, 'GET', '/users/me', { token: me.access })).toMatchObject({ status: 401, body: { message: 'Token has been revoked' } });
    expect(await api(b.process, 'POST', `/devices/heartbeat/${hub.uuid}`, { token: hub.hubToken, body: {} })).toMatchObject({ status: 401, body: { message: 'Token has been revoked' } });

    const texts = [...Object.values(p), ...Object.values(m)];
    expect(await heldBy(b, texts)).toEqual({ found: [], holders: [] });
    expect(await heldBy(a, texts)).toEqual({ found: [], holders: [] });
  });
});
