import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import jwt from 'jsonwebtoken';
import { createTokens } from '../../src/auth/tokens';
import type { SubscribeAck, TunnelError } from '../../src/tunnel/events';
import { api, createUser, CRM_KEY } from '../support/harness';
import { deviceMarkers, heapOf, marker, startWatched, stopWatched, type DeviceMarkers, type Watched } from '../support/heap-snapshot';
import { PROCESS_TEST_TIMEOUT_MS, TEST_SECRETS, type ServerProcess } from '../support/server';
import { connect, refusal, request, type Probe } from '../support/tunnel';
import { startTwoProcesses, type StartedProcesses } from '../support/two-processes';

/**
 * Decisions §11 and the device/tunnel contract, from outside, against a real embedded service
 * in a process of its own (its heap read from V8 heap snapshots):
 * - a device deleted while its hub's heartbeats, token renewals and tunnel handshakes are in
 *   flight: everything sent after the deletion answered is refused, no tunnel socket of the hub
 *   is left connected, no token renewed during the race works, the audit ends with the one
 *   deletion, and no device fold in the heap holds the name, address or metadata;
 * - the same uuid registered, used, deleted and registered again, sequentially: no 409, no 5xx;
 * - an editor and a viewer of someone else's device erased: the device stays its owner's, whole.
 */

const REVOKED = 'Token has been revoked';
const PASSWORD = 'correct horse battery staple';
const AUDITOR = 'auditor.delete-races@example.com';
/** The shape of a device fold's state in a heap snapshot (see test/privacy/cached-folds.test.ts). */
const DEVICE_FOLD = ['status', 'uuid', 'links', 'createdAt'];

type Target = Pick<ServerProcess, 'baseUrl' | 'output'>;

const tokens = createTokens({ jwtAccessSecret: TEST_SECRETS.JWT_ACCESS_SECRET, jwtRefreshSecret: TEST_SECRETS.JWT_REFRESH_SECRET, jwtDeviceSecret: TEST_SECRETS.JWT_DEVICE_SECRET });

let nextSyncId = 600_000 + Math.floor(Math.random() * 90_000);

interface Person {
  readonly id: string;
  readonly syncId: number;
  readonly email: string;
  readonly token: string;
}

async function person(s: Target, names: { email?: string; firstName?: string; lastName?: string } = {}, role: 'user' | 'admin' = 'user'): Promise<Person> {
  const syncId = nextSyncId++;
  const email = names.email ?? `races.${randomUUID()}@example.org`;
  const synced = await api(s, 'POST', '/auth/sync-customer', {
    headers: { 'X-Internal-Api-Key': CRM_KEY },
    body: { id: syncId, first_name: names.firstName ?? 'Race', last_name: names.lastName ?? 'Tester', email, active: true },
  });
  expect(synced.status).toBe(201);
  const id = (synced.body as { user: { id: string } }).user.id;
  return { id, syncId, email, token: tokens.signAccess({ sub: id, email, role }) };
}

/** A person who set a password through a reset and signed in: a real access token, from login. */
async function signedIn(s: Target, names: { firstName: string; lastName: string }): Promise<Person> {
  const p = await person(s, names);
  expect((await api(s, 'POST', '/auth/password-reset/request', { body: { email: p.email } })).status).toBe(202);
  let reset: string | undefined;
  for (let i = 0; i < 400 && reset === undefined; i++) {
    reset = new RegExp(`(${p.id}\\.[A-Za-z0-9_-]{43})`).exec(s.output())?.[1];
    if (reset === undefined) await new Promise((r) => setTimeout(r, 50));
  }
  expect((await api(s, 'POST', '/auth/password-reset/confirm', { body: { token: reset, password: PASSWORD } })).status).toBe(200);
  const login = await api(s, 'POST', '/auth/login', { body: { email: p.email, password: PASSWORD } });
  expect(login.status).toBe(201);
  return { ...p, token: (login.body as { accessToken: string }).accessToken };
}

interface Hub {
  readonly id: string;
  readonly uuid: string;
}

async function markedHub(s: Target, ownerToken: string, m: DeviceMarkers, uuid: string = randomUUID()): Promise<{ hub: Hub; hubToken: string }> {
  const registered = await api(s, 'POST', '/devices/register', { token: ownerToken, body: { uuid, deviceId: 'RACE-1', name: m.name, ipAddress: m.ip, metadata: { note: m.metadata } } });
  expect(registered.status).toBe(201);
  const hub = { id: (registered.body as { id: string }).id, uuid };
  const issued = await api(s, 'POST', `/devices/auth/${uuid}`, { token: ownerToken });
  expect(issued.status).toBe(201);
  const hubToken = (issued.body as { token: string }).token;
  expect((await api(s, 'POST', `/devices/heartbeat/${uuid}`, { token: hubToken, body: { ipAddress: m.laterIp, metadata: { note: m.laterMetadata } } })).status).toBe(200);
  return { hub, hubToken };
}

/** Whether the socket is (or ends up within the wait) disconnected. */
async function endsDisconnected(p: Probe, waitMs = 20_000): Promise<boolean> {
  if (p.received.some((r) => r.event === 'disconnect')) return true;
  try {
    await p.next('disconnect', undefined, waitMs);
    return true;
  } catch {
    return !p.socket.connected;
  }
}

async function history(s: Target, auditorToken: string, uuid: string): Promise<Array<{ type: string; data: Record<string, unknown> }>> {
  const res = await api(s, 'GET', `/devices/${uuid}/history?limit=100`, { token: auditorToken });
  expect(res.status).toBe(200);
  return (res.body as { data: Array<{ type: string; data: Record<string, unknown> }> }).data;
}

const pause = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** One embedded service process for a describe block, its heap readable; the sockets pushed to `open` are closed before it stops. */
function watchedForDescribe(): { watched: () => Watched; open: Probe[] } {
  const dataDir = mkdtempSync(join(tmpdir(), 'hhc-delete-races-'));
  let service: Watched | undefined;
  const open: Probe[] = [];
  beforeAll(async () => {
    service = await startWatched({ ADMIN_EMAILS: AUDITOR, DATA_DIR: dataDir });
  }, PROCESS_TEST_TIMEOUT_MS);
  afterAll(async () => {
    for (const p of open.splice(0)) p.close();
    await stopWatched(service);
    rmSync(dataDir, { recursive: true, force: true });
  });
  return {
    open,
    watched: () => {
      if (service === undefined) throw new Error('the service has not started');
      return service;
    },
  };
}

/**
 * `remove` (a DELETE) with waves of hub traffic (`wave`) before it, while it is under way and
 * once more after it answered (`onAnswered` is called first), every request settled; then which
 * of the hub's `sockets` (the ones the waves connected included) are still connected.
 */
async function raceDeletion(remove: () => Promise<{ status: number }>, wave: () => Array<Promise<void>>, gapMs: number, onAnswered: () => void, sockets: readonly Probe[]): Promise<number[]> {
  const inFlight: Array<Promise<void>> = [...wave()];
  let answered = false;
  const deleted = remove().then((r) => {
    answered = true;
    onAnswered();
    return r;
  });
  while (!answered) {
    inFlight.push(...wave());
    await pause(gapMs);
  }
  expect((await deleted).status).toBe(200);
  inFlight.push(...wave());
  await Promise.all(inFlight);
  const left: number[] = [];
  for (const [i, p] of sockets.entries()) if (!(await endsDisconnected(p))) left.push(i);
  return left;
}

/** What a token renewed during the race still gets (null: refused everywhere, as a deleted device's). */
async function stillWorks(via: Pick<ServerProcess, 'baseUrl'>, uuid: string, token: string): Promise<string | null> {
  const beat = await api(via, 'POST', `/devices/heartbeat/${uuid}`, { token, body: {} });
  const renew = await api(via, 'POST', `/devices/auth/${uuid}/renew`, { token });
  const tunnel = await refusal(via, { token }).then(
    (e) => e.message,
    () => 'connected',
  );
  return beat.status === 401 && renew.status === 401 && tunnel === 'unauthorized' ? null : `${beat.status} ${renew.status} ${tunnel}`;
}

describe('deleting a device while its hub is busy, and what follows (embedded, a service process)', () => {
  jest.setTimeout(PROCESS_TEST_TIMEOUT_MS * 2);
  const fixture = watchedForDescribe();
  const watched = fixture.watched;
  const open = fixture.open;
  let auditor = '';
  beforeAll(async () => {
    auditor = (await person(watched().process, { email: AUDITOR }, 'admin')).token;
  });

  test('heartbeats, renewals and handshakes racing a DELETE: refused once it answered, no socket left, no renewed token working, one deletion audited, no fold with its data', async () => {
    const s = watched().process;
    const owner = await person(s);
    const allMarkers: string[] = [];
    const afterDelete: Array<[string, number | string]> = [];
    const leftConnected: string[] = [];
    const renewedWorking: string[] = [];
    const audits: string[] = [];

    for (let round = 0; round < 16; round++) {
      const m = deviceMarkers();
      allMarkers.push(...Object.values(m));
      const { hub, hubToken } = await markedHub(s, owner.token, m);
      const sockets: Probe[] = [await connect(s, hubToken)];
      open.push(...sockets);
      const renewed: string[] = [];
      let answered = false;

      const heartbeat = (): Promise<void> => {
        const sentAfter = answered;
        return api(s, 'POST', `/devices/heartbeat/${hub.uuid}`, { token: hubToken, body: { ipAddress: m.laterIp, metadata: { note: m.laterMetadata } } }).then((r) => {
          if (sentAfter && r.status !== 401) afterDelete.push(['heartbeat', r.status]);
        });
      };
      const renewal = (): Promise<void> => {
        const sentAfter = answered;
        return api(s, 'POST', `/devices/auth/${hub.uuid}/renew`, { token: hubToken }).then((r) => {
          if (r.status === 201) renewed.push((r.body as { token: string }).token);
          if (sentAfter && r.status !== 401) afterDelete.push(['renewal', r.status]);
        });
      };
      const handshake = (): Promise<void> => {
        const sentAfter = answered;
        return connect(s, hubToken).then(
          (p) => {
            sockets.push(p);
            open.push(p);
            if (sentAfter) afterDelete.push(['handshake', 'connected']);
          },
          () => undefined,
        );
      };
      const wave = (): Array<Promise<void>> => [heartbeat(), renewal(), handshake(), heartbeat(), renewal(), handshake()];

      const left = await raceDeletion(() => api(s, 'DELETE', `/devices/${hub.id}`, { token: owner.token }), wave, round % 2 === 0 ? 0 : 3, () => void (answered = true), sockets);
      if (left.length > 0) leftConnected.push(`round ${round}: sockets ${left.join(', ')}`);
      for (const token of renewed) {
        const works = await stillWorks(s, hub.uuid, token);
        if (works !== null) renewedWorking.push(`round ${round}: ${works}`);
      }
      expect(await api(s, 'POST', `/devices/heartbeat/${hub.uuid}`, { token: hubToken, body: {} })).toMatchObject({ status: 401, body: { message: REVOKED } });

      const events = await history(s, auditor, hub.uuid);
      const types = events.map((e) => e.type);
      const deletions = types.filter((t) => t === 'DeviceDeleted').length;
      if (deletions !== 1 || types.at(-1) !== 'DeviceDeleted' || types[0] !== 'DeviceRegistered') audits.push(`round ${round}: ${types.join(',')}`);
    }

    expect(afterDelete).toEqual([]);
    expect(leftConnected).toEqual([]);
    expect(renewedWorking).toEqual([]);
    expect(audits).toEqual([]);
    // Settled: no device fold anywhere in the heap holds a deleted hub's data.
    await pause(500);
    expect((await heapOf(watched())).holders(allMarkers, DEVICE_FOLD)).toEqual([]);
  });

  test('the same uuid registered, used, deleted and registered again, three generations: every step as specified, never a 409 or a 5xx', async () => {
    const s = watched().process;
    const owner = await person(s);
    const uuid = randomUUID();
    const gens: number[] = [];
    const names: string[] = [];
    let previousToken: string | null = null;
    for (let generation = 0; generation < 3; generation++) {
      const m = deviceMarkers();
      names.push(m.name);
      const { hub, hubToken } = await markedHub(s, owner.token, m, uuid);
      gens.push((jwt.decode(hubToken) as { gen: number }).gen);
      if (previousToken !== null) {
        expect(await api(s, 'POST', `/devices/heartbeat/${uuid}`, { token: previousToken, body: {} })).toMatchObject({ status: 401, body: { message: REVOKED } });
        expect((await refusal(s, { token: previousToken })).message).toBe('unauthorized');
      }
      // Used: the tunnel, a subscriber, a rename, metadata, heartbeats, a renewal.
      const device = await connect(s, hubToken);
      const app = await connect(s, owner.token);
      open.push(device, app);
      expect(await request<SubscribeAck>(app, 'tunnel:subscribe', { deviceUuid: uuid })).toMatchObject({ success: true });
      const renamed = `${m.name}-renamed`;
      names[generation] = renamed;
      expect(await api(s, 'PUT', `/devices/${hub.id}`, { token: owner.token, body: { name: renamed, metadata: { note: `${m.metadata}-2` } } })).toMatchObject({ status: 200, body: { name: renamed } });
      expect((await api(s, 'POST', `/devices/heartbeat/${uuid}`, { token: hubToken, body: { metadata: { note: `${m.laterMetadata}-2` } } })).status).toBe(200);
      const renew = await api(s, 'POST', `/devices/auth/${uuid}/renew`, { token: hubToken });
      expect(renew.status).toBe(201);
      const renewedToken = (renew.body as { token: string }).token;
      expect((await api(s, 'POST', `/devices/heartbeat/${uuid}`, { token: renewedToken, body: {} })).status).toBe(200);
      const listed = await api(s, 'GET', '/devices', { token: owner.token });
      expect(listed.status).toBe(200);
      expect((listed.body as { data: Array<{ uuid: string; name: string }> }).data.filter((d) => d.uuid === uuid).map((d) => d.name)).toEqual([renamed]);
      const got = await api(s, 'GET', `/devices/${hub.id}`, { token: owner.token });
      expect(got).toMatchObject({ status: 200, body: { name: renamed, metadata: { note: `${m.laterMetadata}-2` } } });

      expect((await api(s, 'DELETE', `/devices/${hub.id}`, { token: owner.token })).status).toBe(200);
      expect((await device.next<TunnelError>('tunnel:error', (e) => e.code === 'ACCESS_REVOKED', 20_000)).code).toBe('ACCESS_REVOKED');
      expect(await endsDisconnected(device)).toBe(true);
      expect(await app.next<TunnelError>('tunnel:error', (e) => e.code === 'ACCESS_REVOKED', 20_000)).toMatchObject({ code: 'ACCESS_REVOKED' });
      app.close();
      expect(await api(s, 'POST', `/devices/heartbeat/${uuid}`, { token: renewedToken, body: {} })).toMatchObject({ status: 401, body: { message: REVOKED } });
      expect((await api(s, 'GET', '/devices', { token: owner.token })).body).toMatchObject({ data: expect.not.arrayContaining([expect.objectContaining({ uuid })]) });
      previousToken = renewedToken;
    }
    expect(gens[1]).toBeGreaterThan(gens[0] ?? Infinity);
    expect(gens[2]).toBeGreaterThan(gens[1] ?? Infinity);

    // A fourth generation, listed with its current name; the audit shows each generation.
    const last = await api(s, 'POST', '/devices/register', { token: owner.token, body: { uuid, deviceId: 'RACE-4', name: 'Fourth' } });
    expect(last.status).toBe(201);
    const listed = await api(s, 'GET', '/devices', { token: owner.token });
    expect((listed.body as { data: Array<{ uuid: string; name: string }> }).data.filter((d) => d.uuid === uuid).map((d) => d.name)).toEqual(['Fourth']);
    const types = (await history(s, auditor, uuid)).map((e) => e.type);
    expect(types.filter((t) => t === 'DeviceRegistered')).toHaveLength(4);
    expect(types.filter((t) => t === 'DeviceDeleted')).toHaveLength(3);
    expect(types.lastIndexOf('DeviceRegistered')).toBeGreaterThan(types.lastIndexOf('DeviceDeleted'));
    const renamedInAudit = (await history(s, auditor, uuid)).filter((e) => e.type === 'DeviceUpdated').map((e) => (e.data.changes as { name?: string }).name);
    for (const name of names) expect(renamedInAudit).toContain(name);
  });

  test('an editor and a viewer of a device owned by someone else, erased (DELETE /users/me and erase-customer): the device stays its owner\'s, whole; their links end; their sockets are revoked; nothing of them in the heap', async () => {
    const s = watched().process;
    const owner = await person(s);
    const editorNames = { firstName: marker('RaceEd'), lastName: marker('RaceEdLast') };
    const viewerNames = { firstName: marker('RaceVw'), lastName: marker('RaceVwLast') };
    const editor = await signedIn(s, editorNames);
    const viewer = await person(s, viewerNames);
    const m = deviceMarkers();
    const { hub, hubToken } = await markedHub(s, owner.token, m);
    for (const [user, role] of [
      [editor, 'editor'],
      [viewer, 'viewer'],
    ] as const) {
      expect((await api(s, 'POST', `/devices/${hub.id}/link`, { token: owner.token, body: { email: user.email, role } })).status).toBeLessThan(300);
    }
    const device = await connect(s, hubToken);
    const editorApp = await connect(s, editor.token);
    const viewerApp = await connect(s, viewer.token);
    open.push(device, editorApp, viewerApp);
    for (const app of [editorApp, viewerApp]) expect(await request<SubscribeAck>(app, 'tunnel:subscribe', { deviceUuid: hub.uuid })).toMatchObject({ success: true });

    // Both erased at once, one by themselves, one by the CRM, while the hub keeps beating.
    const beats = Promise.all(Array.from({ length: 6 }, () => api(s, 'POST', `/devices/heartbeat/${hub.uuid}`, { token: hubToken, body: {} })));
    const [self, crm] = await Promise.all([
      api(s, 'DELETE', '/users/me', { token: editor.token, body: { password: PASSWORD } }),
      api(s, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id: viewer.syncId } }),
    ]);
    expect(self).toMatchObject({ status: 200, body: { success: true } });
    expect(crm).toMatchObject({ status: 200, body: { erased: true, userId: viewer.id } });
    for (const r of await beats) expect(r.status).toBe(200);

    for (const app of [editorApp, viewerApp]) {
      expect((await app.next<TunnelError>('tunnel:error', (e) => e.code === 'ACCESS_REVOKED', 20_000)).code).toBe('ACCESS_REVOKED');
      expect(await endsDisconnected(app)).toBe(true);
    }
    // The hub and its owner: untouched.
    expect(device.socket.connected).toBe(true);
    expect((await api(s, 'POST', `/devices/heartbeat/${hub.uuid}`, { token: hubToken, body: {} })).status).toBe(200);
    const got = await api(s, 'GET', `/devices/${hub.id}`, { token: owner.token });
    expect(got).toMatchObject({ status: 200, body: { name: m.name, metadata: { note: m.laterMetadata } } });
    const users = (got.body as { users?: Array<{ userId?: string; id?: string; isActive?: boolean }> }).users ?? [];
    expect(users.filter((u) => (u.userId === editor.id || u.userId === viewer.id) && u.isActive !== false)).toEqual([]);
    // The erased are refused.
    expect(await api(s, 'GET', '/devices', { token: editor.token })).toMatchObject({ status: 401, body: { message: REVOKED } });
    expect(await api(s, 'GET', '/devices', { token: viewer.token })).toMatchObject({ status: 401, body: { message: REVOKED } });

    // The audit: each link ended by the system, after which the device is still there.
    const events = await history(s, auditor, hub.uuid);
    const unlinked = events.filter((e) => e.type === 'UserUnlinked');
    expect(unlinked.map((e) => e.data.userId).sort()).toEqual([editor.id, viewer.id].sort());
    const full = await api(s, 'GET', `/devices/${hub.uuid}/history?limit=100`, { token: auditor });
    const actors = (full.body as { data: Array<{ type: string; metadata?: { actor?: { type?: string } }; actor?: { type?: string } }> }).data
      .filter((e) => e.type === 'UserUnlinked')
      .map((e) => e.metadata?.actor?.type ?? e.actor?.type);
    expect(actors).toEqual(['system', 'system']);
    expect(events.map((e) => e.type)).not.toContain('DeviceDeleted');
    expect(events[0]).toMatchObject({ type: 'DeviceRegistered', data: { name: m.name } });

    // Asking again: 200, the same.
    expect(await api(s, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id: viewer.syncId } })).toMatchObject({ status: 200 });
    expect(await api(s, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id: editor.syncId } })).toMatchObject({ status: 200 });

    // Nothing of the erased anywhere in the heap; the hub's data is its owner's and may stay.
    const erasedTexts = [editor.email, viewer.email, ...Object.values(editorNames), ...Object.values(viewerNames)];
    await pause(500);
    const snapshot = await heapOf(watched());
    expect(snapshot.found(erasedTexts)).toEqual([]);
  });
});

describe('deleting a device through one process while its hub talks to the other (distributed, two API processes)', () => {
  jest.setTimeout(PROCESS_TEST_TIMEOUT_MS * 2);
  let processes: StartedProcesses | undefined;
  const open: Probe[] = [];
  beforeAll(async () => {
    processes = await startTwoProcesses();
  }, PROCESS_TEST_TIMEOUT_MS);
  afterAll(async () => {
    for (const p of open.splice(0)) p.close();
    await processes?.stop();
  });

  test('heartbeats, renewals and handshakes on both processes racing a DELETE on one: refused once it answered, no socket left, no renewed token working', async () => {
    if (processes === undefined) throw new Error('the processes have not started');
    const { a, b } = processes;
    const owner = await createUser(a);
    const afterDelete: Array<[string, string, number | string]> = [];
    const leftConnected: string[] = [];
    const renewedWorking: string[] = [];
    const audits: string[] = [];
    const admin = await createUser(a, { role: 'admin' });

    for (let round = 0; round < 10; round++) {
      const uuid = randomUUID();
      const registered = await api(a, 'POST', '/devices/register', { token: owner.accessToken, body: { uuid, deviceId: 'RACE-D', name: 'Raced hub' } });
      expect(registered.status).toBe(201);
      const hub = { id: (registered.body as { id: string }).id, uuid };
      const hubToken = ((await api(a, 'POST', `/devices/auth/${uuid}`, { token: owner.accessToken })).body as { token: string }).token;
      // Both processes fold the hub before the race.
      expect((await api(b, 'POST', `/devices/heartbeat/${uuid}`, { token: hubToken, body: {} })).status).toBe(200);
      const sockets: Probe[] = [await connect(b, hubToken)];
      open.push(...sockets);
      const renewed: string[] = [];
      let answered = false;

      const wave = (): Array<Promise<void>> =>
        [a, b, b].flatMap((via) => {
          const name = via === a ? 'a' : 'b';
          const sentAfter = answered;
          return [
            api(via, 'POST', `/devices/heartbeat/${uuid}`, { token: hubToken, body: { metadata: { round } } }).then((r) => {
              if (sentAfter && r.status !== 401) afterDelete.push(['heartbeat', name, r.status]);
            }),
            api(via, 'POST', `/devices/auth/${uuid}/renew`, { token: hubToken }).then((r) => {
              if (r.status === 201) renewed.push((r.body as { token: string }).token);
              if (sentAfter && r.status !== 401) afterDelete.push(['renewal', name, r.status]);
            }),
            connect(via, hubToken).then(
              (p) => {
                sockets.push(p);
                open.push(p);
                if (sentAfter) afterDelete.push(['handshake', name, 'connected']);
              },
              () => undefined,
            ),
          ];
        });

      const left = await raceDeletion(() => api(a, 'DELETE', `/devices/${hub.id}`, { token: owner.accessToken }), wave, round % 2 === 0 ? 0 : 5, () => void (answered = true), sockets);
      if (left.length > 0) leftConnected.push(`round ${round}: sockets ${left.join(', ')}`);
      for (const token of renewed) {
        for (const via of [a, b]) {
          const works = await stillWorks(via, uuid, token);
          if (works !== null) renewedWorking.push(`round ${round}: ${works}`);
        }
      }
      const res = await api(b, 'GET', `/devices/${uuid}/history?limit=100`, { token: admin.accessToken });
      const types = (res.body as { data: Array<{ type: string }> }).data.map((e) => e.type);
      if (types.filter((t) => t === 'DeviceDeleted').length !== 1 || types.at(-1) !== 'DeviceDeleted') audits.push(`round ${round}: ${types.join(',')}`);
    }

    expect(afterDelete).toEqual([]);
    expect(leftConnected).toEqual([]);
    expect(renewedWorking).toEqual([]);
    expect(audits).toEqual([]);
  });
});

describe('a kill -9 right after an erasure answered, and a restart on the same data directory (embedded, a service process)', () => {
  jest.setTimeout(PROCESS_TEST_TIMEOUT_MS * 3);
  let dataDir: string;
  let service: Watched | undefined;
  afterAll(async () => {
    await stopWatched(service);
    rmSync(dataDir, { recursive: true, force: true });
  });

  test('the erased owner\'s hub stays deleted and refused, the co-owned hub stays whole with its owner, asking again answers 200, nothing of the person in the heap', async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'hhc-delete-races-kill-'));
    service = await startWatched({ ADMIN_EMAILS: AUDITOR, DATA_DIR: dataDir });
    let s: Target = service.process;
    const names = { firstName: marker('KillFirst'), lastName: marker('KillLast') };
    const erased = await person(s, names);
    const other = await person(s);
    const own = deviceMarkers();
    const shared = deviceMarkers();
    const { hub: ownHub, hubToken: ownToken } = await markedHub(s, erased.token, own);
    const { hub: sharedHub, hubToken: sharedToken } = await markedHub(s, other.token, shared);
    expect((await api(s, 'POST', `/devices/${sharedHub.id}/link`, { token: other.token, body: { email: erased.email, role: 'editor' } })).status).toBeLessThan(300);
    expect(await api(s, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id: erased.syncId } })).toMatchObject({ status: 200 });
    await service.process.kill();
    rmSync(service.snapshots, { recursive: true, force: true });
    service = await startWatched({ ADMIN_EMAILS: AUDITOR, DATA_DIR: dataDir });
    s = service.process;

    expect(await api(s, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id: erased.syncId } })).toMatchObject({ status: 200, body: { erased: true, userId: erased.id } });
    expect(await api(s, 'POST', `/devices/heartbeat/${ownHub.uuid}`, { token: ownToken, body: {} })).toMatchObject({ status: 401, body: { message: REVOKED } });
    expect((await refusal(s, { token: ownToken })).message).toBe('unauthorized');
    expect(await api(s, 'GET', '/devices', { token: erased.token })).toMatchObject({ status: 401, body: { message: REVOKED } });
    expect((await api(s, 'POST', `/devices/heartbeat/${sharedHub.uuid}`, { token: sharedToken, body: {} })).status).toBe(200);
    const got = await api(s, 'GET', `/devices/${sharedHub.id}`, { token: other.token });
    expect(got).toMatchObject({ status: 200, body: { name: shared.name, metadata: { note: shared.laterMetadata } } });
    const hubSocket = await connect(s, sharedToken);
    hubSocket.close();

    await pause(500);
    const snapshot = await heapOf(service);
    expect(snapshot.found([erased.email, names.firstName, names.lastName, ...Object.values(own)])).toEqual([]);
  });
});
