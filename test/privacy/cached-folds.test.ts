import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import jwt from 'jsonwebtoken';
import { createTokens } from '../../src/auth/tokens';
import { createDeviceCommands } from '../../src/commands/devices';
import { foldStream, newCommandContext, systemClock, type FoldedStream } from '../../src/commands/handler';
import { createPresenceCommands } from '../../src/commands/presence';
import { deviceDecider, type DeviceCommand, type DeviceEvent, type DeviceState } from '../../src/domain/device';
import { ConflictError, NotFoundError, UnauthorizedError } from '../../src/domain/errors';
import { deviceStream, heartbeatStream } from '../../src/domain/events';
import type { RecordedEvent } from '../../src/infra/eventstore/port';
import { createMemoryReadStore } from '../../src/infra/readstore/memory';
import { createLogger } from '../../src/logger';
import { startExpiryRole } from '../../src/presence/expiry-role';
import { createTimerExpiryScheduler } from '../../src/presence/timer-scheduler';
import { createDeviceStateCache, keptDeviceFold } from '../../src/privacy/kept-folds';
import { createLocalWatermark } from '../../src/projections/watermark';
import { createDeviceAccess } from '../../src/tunnel/access';
import type { SubscribeAck, TunnelError } from '../../src/tunnel/events';
import { api, CRM_KEY } from '../support/harness';
import { deviceStreamStore } from '../support/device-stream-store';
import { deviceMarkers, heapOf, heldBy, marker, startWatched, stopWatched, type DeviceMarkers, type Watched } from '../support/heap-snapshot';
import { PROCESS_TEST_TIMEOUT_MS, TEST_SECRETS, type ServerProcess } from '../support/server';
import { startStack, type Stack } from '../support/stack';
import { connect, refusal, request, type Hub, type Probe } from '../support/tunnel';

/**
 * Decisions §11, in memory: once a device is deleted (by its owner, or with the erasure of its
 * only owner), no fold a process keeps of it holds its name, `ipAddress` or `metadata` — the
 * heartbeat path's shared folds (src/privacy/kept-folds.ts), the tunnel's (src/tunnel/access.ts),
 * on the process that deleted it and on one that learns of it through its feeds — while every
 * later decision on the stream is the one it was, and the audit still folds the events as before.
 * After an erasure nothing of the person or their devices is found anywhere in the heap, the
 * verified access tokens included. The heap is the real service's, in a process of its own (one
 * embedded, two distributed), read from V8 heap snapshots it writes on SIGUSR2, as an operator's
 * heap dump would be; the texts looked for are written by the test alone.
 */

const REVOKED = 'Token has been revoked';
const NOT_FOUND = 'Device not found';
const ERASED = '[erased]';

/** The shape of a device fold's state, as a heap snapshot shows it (small integers such as `gen` are no objects there): what `HeapSnapshot.holders` looks for. */
const DEVICE_FOLD = ['status', 'uuid', 'links', 'createdAt'];

// ---------------------------------------------------------------------------------------
// The folds, at the commands and the tunnel's access (one embedded log, a process = its own caches)

describe('the folds a process keeps of a deleted device', () => {
  const { store } = deviceStreamStore('hhc-cached-folds-');
  const owner = newCommandContext({ type: 'user', id: 'owner-1' }, randomUUID());
  const hubContext = (uuid: string) => newCommandContext({ type: 'device', id: uuid }, randomUUID());

  /** What one API process keeps: the shared folds, and the commands and tunnel access using them, as src/service.ts wires them. */
  const apiProcess = () => {
    const cache = createDeviceStateCache(100);
    const devices = createDeviceCommands({
      eventStore: store(),
      readStore: createMemoryReadStore(),
      watermark: { ...createLocalWatermark(), waitFor: async () => true },
      clock: systemClock,
      readYourWritesTimeoutMs: 1,
      maxDevicesPerUser: 100,
      deviceStates: cache,
    });
    const presence = createPresenceCommands({ eventStore: store(), clock: systemClock, offlineAfterSeconds: 60, deviceStates: cache });
    const access = createDeviceAccess(store(), { maxEntries: 100, now: () => Date.now(), shared: cache });
    return { cache, devices, presence, access };
  };

  /** The stream's events from `fromRevision` on, as a live feed hands them over. */
  const eventsFrom = async (uuid: string, fromRevision: bigint): Promise<RecordedEvent[]> => {
    const events: RecordedEvent[] = [];
    for await (const event of store().readStream(deviceStream(uuid), { fromRevision })) events.push(event);
    return events;
  };
  /** The fold of the whole stream with `evolveDevice` alone, nothing cached: what the audit folds. */
  const fullFold = (uuid: string): Promise<FoldedStream<DeviceState>> => foldStream(store(), deviceDecider, deviceStream(uuid));
  const heartbeats = async (uuid: string): Promise<number> => {
    let count = 0;
    for await (const event of store().readStream(heartbeatStream(uuid))) if (event.type === 'HeartbeatReceived') count++;
    return count;
  };
  const personal = { name: 'Attic hub of the Nguyens', ipAddress: '10.77.0.5', metadata: { floorplan: 'attic-3rd-floor' } };
  const texts = ['Nguyens', '10.77.0.5', '10.77.0.6', 'attic-3rd-floor', 'kitchen-v2'];
  const holdsAny = (value: unknown): string[] => texts.filter((text) => JSON.stringify(value, (_key, v: unknown) => (typeof v === 'bigint' ? v.toString() : v)).includes(text));

  /** A registered hub with a token (gen 1), heard once with a new address and metadata. */
  const givenHub = async (via: ReturnType<typeof apiProcess>): Promise<string> => {
    const uuid = randomUUID();
    await via.devices.register({ uuid, deviceId: 'HUB-1', ...personal }, owner);
    await via.devices.issueToken(uuid, owner);
    await via.devices.heartbeat(uuid, 1, { ipAddress: '10.77.0.6', metadata: { floorplan: 'attic-3rd-floor', kitchen: 'kitchen-v2' } }, hubContext(uuid));
    return uuid;
  };

  test('deleted through this process: the shared fold and the tunnel fold keep status, links, generation and revision, not the name, address or metadata', async () => {
    const a = apiProcess();
    const uuid = await givenHub(a);
    const tunnelBefore = await a.access.fresh(uuid);
    expect(holdsAny(tunnelBefore)).toEqual(['Nguyens', '10.77.0.6', 'attic-3rd-floor', 'kitchen-v2']);

    await a.devices.remove(uuid, owner);

    // What the events fold to is unchanged (the audit shows it): deleted, with its data.
    const full = await fullFold(uuid);
    expect(full.state).toMatchObject({ status: 'deleted', name: personal.name, ipAddress: '10.77.0.6', gen: 1 });
    // What the shared cache keeps: the same fold at the same revision, without the three fields.
    const kept = a.cache.get(deviceStream(uuid));
    expect(kept).toEqual({ state: { ...full.state, name: '', ipAddress: null, metadata: null }, revision: full.revision });
    expect(holdsAny(kept)).toEqual([]);

    // The tunnel's fold, moved on by the live feed's DeviceDeleted: the very fold the shared cache keeps, no copy of its own.
    for (const event of await eventsFrom(uuid, tunnelBefore.revision + 1n)) a.access.apply(event);
    expect(a.access.peek(uuid)).toBe(kept);
    // Read again (a handshake, a subscribe): the same.
    expect(await a.access.fresh(uuid)).toBe(kept);
  });

  test('deleted through another process: the tunnel fold there, moved on by its feed, and the shared fold there, at its next read, keep no data either', async () => {
    const [a, b] = [apiProcess(), apiProcess()];
    const uuid = await givenHub(a);
    // B folded the hub: a heartbeat and a renewal through it, a handshake on its tunnel.
    await b.devices.heartbeat(uuid, 1, {}, hubContext(uuid));
    const tunnelBefore = await b.access.fresh(uuid);
    expect(holdsAny(b.cache.get(deviceStream(uuid)))).not.toEqual([]);
    expect(holdsAny(tunnelBefore)).not.toEqual([]);

    await a.devices.remove(uuid, owner);
    const full = await fullFold(uuid);

    // B's live feed hands the deletion over: B's tunnel fold is the deleted device's, without its data.
    for (const event of await eventsFrom(uuid, tunnelBefore.revision + 1n)) b.access.apply(event);
    expect(b.access.peek(uuid)).toEqual({ state: { ...full.state, name: '', ipAddress: null, metadata: null }, revision: full.revision });
    // B's shared fold (its API feed and its expiry feed drop it, see below): the next read there replaces it, refusing as before.
    await expect(b.devices.heartbeat(uuid, 1, {}, hubContext(uuid))).rejects.toThrow(new UnauthorizedError(REVOKED));
    expect(b.cache.get(deviceStream(uuid))).toEqual(b.access.peek(uuid));
    // A third process reading it cold (a handshake after a restart): the same.
    expect(await apiProcess().access.fresh(uuid)).toEqual(b.access.peek(uuid));
  });

  test('every later command decides as before: a deleted device refused, a registration again starting from the next generation at the right revision', async () => {
    const [a, b] = [apiProcess(), apiProcess()];
    const uuid = await givenHub(a);
    await b.devices.renewToken(uuid, 1); // B keeps the fold from before the deletion.
    await a.devices.remove(uuid, owner);
    const full = await fullFold(uuid);
    const beats = await heartbeats(uuid);

    // Through the process whose folds are the kept ones: the answers of a deleted device, nothing appended.
    await expect(a.devices.heartbeat(uuid, 1, { metadata: { again: 'x' } }, hubContext(uuid))).rejects.toThrow(new UnauthorizedError(REVOKED));
    await expect(a.devices.renewToken(uuid, 1)).rejects.toThrow(new UnauthorizedError(REVOKED));
    await expect(a.devices.assertCurrentToken(uuid, 1)).rejects.toThrow(new UnauthorizedError(REVOKED));
    await expect(a.devices.update(uuid, { name: 'Renamed' }, owner)).rejects.toThrow(new NotFoundError(NOT_FOUND));
    await expect(a.devices.issueToken(uuid, owner)).rejects.toThrow(new NotFoundError(NOT_FOUND));
    await expect(a.devices.unlink(uuid, 'owner-1', owner)).rejects.toThrow(new NotFoundError(NOT_FOUND));
    await expect(a.devices.remove(uuid, owner)).rejects.toThrow(new NotFoundError(NOT_FOUND));
    expect(await a.presence.expire(uuid)).toEqual({ kind: 'not-online' });
    expect((await fullFold(uuid)).revision).toBe(full.revision);
    expect(await heartbeats(uuid)).toBe(beats);

    // Registered again through A, from its kept fold: the next token generation, the revisions of the stream.
    const again = await a.devices.register({ uuid, deviceId: 'HUB-2', name: 'Cellar hub' }, owner);
    expect(full.state.status).toBe('deleted');
    expect(again).toMatchObject({ status: 'active', name: 'Cellar hub', ipAddress: null, metadata: null, gen: full.state.status === 'deleted' ? full.state.gen + 1 : -1 });
    const now = await fullFold(uuid);
    expect(now.revision).toBe(full.revision + 2n);
    expect(a.cache.get(deviceStream(uuid))).toEqual(now);
    // B, whose fold is from before the deletion, reads what was appended since: its register is refused as a concurrent one is.
    await expect(b.devices.register({ uuid, deviceId: 'HUB-3', name: 'Other' }, owner)).rejects.toThrow(new ConflictError('Device already registered'));
    expect(b.cache.get(deviceStream(uuid))).toEqual(now);
  });

  test('the decider answers every command alike on the full and on the kept fold of a deleted device, and every event folds alike', async () => {
    const a = apiProcess();
    const uuid = await givenHub(a);
    await a.devices.remove(uuid, owner);
    const { state: full } = await fullFold(uuid);
    const { state: kept } = keptDeviceFold({ state: full, revision: 0n });
    expect(kept).not.toEqual(full);
    const now = new Date().toISOString();
    const actorUserId = 'owner-1';
    const commands: DeviceCommand[] = [
      { type: 'RegisterDevice', data: { id: 'id-2', uuid, deviceId: 'HUB-2', name: 'Again', actorUserId, linkId: 'link-2', ownedDeviceCount: 0, maxDevicesPerUser: 10, now } },
      { type: 'RegisterDevice', data: { id: 'id-2', uuid, deviceId: 'HUB-2', name: 'Again', actorUserId, linkId: 'link-2', ownedDeviceCount: 10, maxDevicesPerUser: 10, now } },
      { type: 'UpdateDevice', data: { uuid, actorUserId, changes: { name: personal.name }, now } },
      { type: 'LinkUser', data: { uuid, actorUserId, targetUserId: 'u-2', role: 'viewer', linkId: 'link-3', now } },
      { type: 'UnlinkUser', data: { uuid, actorUserId, targetUserId: actorUserId, now } },
      { type: 'DeleteDevice', data: { uuid, actorUserId, now } },
      { type: 'IssueDeviceToken', data: { uuid, actorUserId, now } },
      { type: 'RecordHeartbeat', data: { uuid, tokenGen: 1, ipAddress: '10.77.0.6', now } },
      { type: 'MarkOffline', data: { uuid, lastHeartbeatAt: null, offlineAfterSeconds: 60, now } },
      { type: 'ConfirmPresence', data: { uuid, heartbeatAt: now, now } },
    ];
    const outcome = (command: DeviceCommand, state: DeviceState): unknown => {
      try {
        return deviceDecider.decide(command, state);
      } catch (error) {
        return error instanceof Error ? `${error.name}: ${error.message}` : error;
      }
    };
    for (const command of commands) expect([command.type, outcome(command, kept)]).toEqual([command.type, outcome(command, full)]);
    const events: DeviceEvent[] = [
      { type: 'DeviceRegistered', data: { id: 'id-2', uuid, deviceId: 'HUB-2', name: 'Again', ipAddress: null, port: '8123', metadata: null, gen: 2, registeredAt: now } },
      { type: 'DeviceUpdated', data: { uuid, changes: { name: 'x' }, source: 'user', updatedAt: now } },
      { type: 'DeviceTokenIssued', data: { uuid, gen: 5, issuedAt: now } },
      { type: 'DeviceWentOnline', data: { uuid, lastSeenAt: now } },
      { type: 'DeviceDeleted', data: { uuid, id: 'id-1', deletedAt: now } },
    ];
    for (const event of events) expect(keptDeviceFold({ state: deviceDecider.evolve(kept, event), revision: 0n })).toEqual(keptDeviceFold({ state: deviceDecider.evolve(full, event), revision: 0n }));
  });

  test("a process's expiry feed drops its fold of a device deleted through any process (a process without the API's feed included)", async () => {
    const a = apiProcess();
    const expiryProcess = apiProcess();
    const uuid = await givenHub(a);
    // The expiry jobs of that process folded the hub.
    expect(await expiryProcess.presence.expire(uuid)).toMatchObject({ kind: 'alive' });
    expect(expiryProcess.cache.get(deviceStream(uuid))?.state.status).toBe('active');

    const deleted: string[] = [];
    const role = await startExpiryRole({
      eventStore: store(),
      readStore: createMemoryReadStore(),
      scheduler: createTimerExpiryScheduler(),
      presence: expiryProcess.presence,
      offlineAfterSeconds: 60,
      logger: createLogger('silent'),
      // As src/runtime/expiry.ts wires it.
      onDeleted: (deletedUuid) => {
        deleted.push(deletedUuid);
        expiryProcess.cache.forget(deviceStream(deletedUuid));
      },
    });
    try {
      await role.ready;
      await a.devices.remove(uuid, owner);
      const deadline = Date.now() + 5000;
      while (!deleted.includes(uuid) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
      expect(deleted).toEqual([uuid]);
      expect(expiryProcess.cache.get(deviceStream(uuid))).toBeUndefined();
    } finally {
      await role.stop();
    }
  });
});

/** Tokens signed with the test services' keys. */
const tokens = createTokens({ jwtAccessSecret: TEST_SECRETS.JWT_ACCESS_SECRET, jwtRefreshSecret: TEST_SECRETS.JWT_REFRESH_SECRET, jwtDeviceSecret: TEST_SECRETS.JWT_DEVICE_SECRET });

describe('the verified access tokens a process remembers', () => {
  test('hold no e-mail: the token carries it, a verification answers (and remembers) the rest', () => {
    const token = tokens.signAccess({ sub: 'u-1', email: 'remembered.nowhere@example.com', role: 'user', fam: 'f-1' });
    expect(jwt.decode(token)).toMatchObject({ sub: 'u-1', email: 'remembered.nowhere@example.com' });
    const first = tokens.verifyAccess(token);
    expect(first).toEqual({ sub: 'u-1', role: 'user', type: 'access', fam: 'f-1', iat: expect.any(Number), exp: expect.any(Number) });
    expect(tokens.verifyAccess(token)).toBe(first);
  });

  test('a token without its e-mail claim is refused as before', () => {
    const token = jwt.sign({ sub: 'u-1', role: 'user', type: 'access' }, TEST_SECRETS.JWT_ACCESS_SECRET, { algorithm: 'HS256', expiresIn: 900 });
    expect(() => tokens.verifyAccess(token)).toThrow(new UnauthorizedError('Invalid token'));
  });
});

// ---------------------------------------------------------------------------------------
// The service in processes of its own, over HTTP and the tunnel, its heap read from snapshots

type Target = Pick<ServerProcess, 'baseUrl'>;

const AUDITOR = 'auditor.kept-folds@example.com';

interface PersonMarkers {
  readonly email: string;
  readonly firstName: string;
  readonly lastName: string;
}

const personMarkers = (): PersonMarkers => ({ email: `kept.${randomUUID()}@example.org`, firstName: marker('KeptFirst'), lastName: marker('KeptLast') });

let nextSyncId = 800_000 + Math.floor(Math.random() * 100_000);

/** A person synced from the CRM, and an access token as login issues it (its e-mail claim included). */
async function person(target: Target, fields: PersonMarkers, role: 'user' | 'admin' = 'user'): Promise<{ id: string; syncId: number; token: string }> {
  const syncId = nextSyncId++;
  const synced = await api(target, 'POST', '/auth/sync-customer', {
    headers: { 'X-Internal-Api-Key': CRM_KEY },
    body: { id: syncId, first_name: fields.firstName, last_name: fields.lastName, email: fields.email, active: true },
  });
  expect(synced.status).toBe(201);
  const id = (synced.body as { user: { id: string } }).user.id;
  return { id, syncId, token: tokens.signAccess({ sub: id, email: fields.email, role }) };
}

const someone = (target: Target): Promise<{ id: string; syncId: number; token: string }> =>
  person(target, { email: `someone.${randomUUID()}@example.com`, firstName: 'Some', lastName: 'One' });

/** A hub registered with the markers, its token, and a heartbeat reporting the later ones. */
async function markedHub(target: Target, ownerToken: string, m: DeviceMarkers, heardBy: Target = target): Promise<{ hub: Hub; hubToken: string }> {
  const uuid = randomUUID();
  const registered = await api(target, 'POST', '/devices/register', {
    token: ownerToken,
    body: { uuid, deviceId: 'KEPT-1', name: m.name, ipAddress: m.ip, metadata: { note: m.metadata } },
  });
  expect(registered.status).toBe(201);
  const hub = { id: (registered.body as { id: string }).id, uuid };
  const issued = await api(target, 'POST', `/devices/auth/${uuid}`, { token: ownerToken });
  expect(issued.status).toBe(201);
  const hubToken = (issued.body as { token: string }).token;
  const beat = await api(heardBy, 'POST', `/devices/heartbeat/${uuid}`, { token: hubToken, body: { ipAddress: m.laterIp, metadata: { note: m.laterMetadata } } });
  expect(beat.status).toBe(200);
  return { hub, hubToken };
}

/** The hub connected to `target`'s tunnel, and an app socket of `appToken` subscribed to it there: both folded by that tunnel. */
async function connected(target: Target, hub: Hub, hubToken: string, appToken: string): Promise<{ device: Probe; app: Probe }> {
  const device = await connect(target, hubToken);
  const app = await connect(target, appToken);
  expect(await request<SubscribeAck>(app, 'tunnel:subscribe', { deviceUuid: hub.uuid })).toMatchObject({ success: true, deviceUuid: hub.uuid });
  return { device, app };
}

/** The tunnel's live feed has handed the deletion over (its reactions come after `apply`): the hub's socket is revoked and closed, the app's subscription ended. */
async function revokedByTheFeed(sockets: { device: Probe; app: Probe }, uuid: string): Promise<void> {
  expect((await sockets.device.next<TunnelError>('tunnel:error', (e) => e.code === 'ACCESS_REVOKED')).code).toBe('ACCESS_REVOKED');
  await sockets.device.next('disconnect');
  expect(await sockets.app.next<TunnelError>('tunnel:error', (e) => e.code === 'ACCESS_REVOKED' && e.message.includes(uuid))).toMatchObject({ code: 'ACCESS_REVOKED' });
  sockets.app.close();
}

/** Every request about a deleted hub answered as it is answered for any deleted hub. */
async function refusedAsDeleted(target: Target, hub: Hub, hubToken: string, ownerToken: string | null): Promise<void> {
  expect(await api(target, 'POST', `/devices/heartbeat/${hub.uuid}`, { token: hubToken, body: { metadata: { note: 'after' } } })).toMatchObject({ status: 401, body: { message: REVOKED } });
  expect(await api(target, 'POST', `/devices/auth/${hub.uuid}/renew`, { token: hubToken })).toMatchObject({ status: 401, body: { message: REVOKED } });
  expect((await refusal(target, { token: hubToken })).message).toBe('unauthorized');
  if (ownerToken === null) return;
  expect(await api(target, 'GET', `/devices/${hub.id}`, { token: ownerToken })).toMatchObject({ status: 404, body: { message: NOT_FOUND } });
  expect(await api(target, 'PUT', `/devices/${hub.id}`, { token: ownerToken, body: { name: 'Renamed' } })).toMatchObject({ status: 404, body: { message: NOT_FOUND } });
  expect(await api(target, 'POST', `/devices/auth/${hub.uuid}`, { token: ownerToken })).toMatchObject({ status: 404, body: { message: NOT_FOUND } });
  expect(await api(target, 'DELETE', `/devices/${hub.id}`, { token: ownerToken })).toMatchObject({ status: 404, body: { message: NOT_FOUND } });
}

interface HistoryItem {
  readonly type: string;
  readonly data: Record<string, unknown>;
}

/** The hub's history as an admin reads it: each event's type and the personal fields of its data. */
async function audited(target: Target, auditorToken: string, uuid: string): Promise<Array<[string, unknown, unknown, unknown]>> {
  const history = await api(target, 'GET', `/devices/${uuid}/history`, { token: auditorToken });
  expect(history.status).toBe(200);
  return (history.body as { data: HistoryItem[] }).data.map((e) => {
    const fields = (e.type === 'DeviceUpdated' ? e.data.changes : e.data) as Record<string, unknown>;
    return [e.type, fields.name, fields.ipAddress, fields.metadata];
  });
}

describe('the service keeps no fold of a deleted device with its data (embedded, a service process)', () => {
  jest.setTimeout(PROCESS_TEST_TIMEOUT_MS);
  let dataDir: string;
  let service: Watched | undefined;
  let auditor: string;
  const open: Probe[] = [];
  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'hhc-kept-folds-'));
    service = await startWatched({ ADMIN_EMAILS: AUDITOR, DATA_DIR: dataDir });
    auditor = (await person(service.process, { email: AUDITOR, firstName: 'Audrey', lastName: 'Tor' }, 'admin')).token;
  }, PROCESS_TEST_TIMEOUT_MS);
  afterAll(async () => {
    for (const p of open.splice(0)) p.close();
    await stopWatched(service);
    rmSync(dataDir, { recursive: true, force: true });
  });
  const watched = (): Watched => {
    if (service === undefined) throw new Error('the service has not started');
    return service;
  };

  test('deleted by its owner: refused as before, audited as before, and no device fold in its heap holds its name, address or metadata', async () => {
    const s = watched().process;
    const owner = await someone(s);
    const m = deviceMarkers();
    const { hub, hubToken } = await markedHub(s, owner.token, m);
    const sockets = await connected(s, hub, hubToken, owner.token);
    open.push(sockets.device, sockets.app);

    // The check sees the folds: before the deletion, the hub's folds hold its data.
    const before = (await heapOf(watched())).holders(Object.values(m), DEVICE_FOLD);
    expect(before).toContain(`Object.name -> "${m.name}"`);
    expect(before).toContain(`Object.ipAddress -> "${m.laterIp}"`);
    expect(before).toContain(`Object.metadata -> Object.note -> "${m.laterMetadata}"`);

    expect(await api(s, 'DELETE', `/devices/${hub.id}`, { token: owner.token })).toMatchObject({ status: 200 });
    await revokedByTheFeed(sockets, hub.uuid);
    await refusedAsDeleted(s, hub, hubToken, owner.token);

    // The events still hold the data (nothing was erased), but no fold the process keeps does.
    expect((await heapOf(watched())).holders(Object.values(m), DEVICE_FOLD)).toEqual([]);

    // The audit as before: the real values, the deletion last.
    const history = await audited(s, auditor, hub.uuid);
    expect(history[0]).toEqual(['DeviceRegistered', m.name, m.ip, { note: m.metadata }]);
    expect(history).toContainEqual(['DeviceUpdated', undefined, m.laterIp, { note: m.laterMetadata }]);
    expect(history.at(-1)?.[0]).toBe('DeviceDeleted');

    // Registered again by its owner: a device of its own, with a token of a later generation; the old one stays refused.
    const again = await api(s, 'POST', '/devices/register', { token: owner.token, body: { uuid: hub.uuid, deviceId: 'KEPT-2', name: 'Again' } });
    expect(again.status).toBe(201);
    const newToken = ((await api(s, 'POST', `/devices/auth/${hub.uuid}`, { token: owner.token })).body as { token: string }).token;
    expect((jwt.decode(newToken) as { gen: number }).gen).toBeGreaterThan((jwt.decode(hubToken) as { gen: number }).gen);
    expect((await api(s, 'POST', `/devices/heartbeat/${hub.uuid}`, { token: newToken, body: {} })).status).toBe(200);
    expect(await api(s, 'POST', `/devices/heartbeat/${hub.uuid}`, { token: hubToken, body: {} })).toMatchObject({ status: 401, body: { message: REVOKED } });
  });

  test('an erasure of its only owner: refused as before, audited "[erased]", and nothing of the person or their device anywhere in its heap', async () => {
    const s = watched().process;
    const p = personMarkers();
    const m = deviceMarkers();
    const erasedOne = await person(s, p);
    const { hub, hubToken } = await markedHub(s, erasedOne.token, m);
    const sockets = await connected(s, hub, hubToken, erasedOne.token);
    open.push(sockets.device, sockets.app);

    const erased = await api(s, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id: erasedOne.syncId } });
    expect(erased).toMatchObject({ status: 200, body: { erased: true, userId: erasedOne.id } });
    await revokedByTheFeed(sockets, hub.uuid);
    await refusedAsDeleted(s, hub, hubToken, null);
    expect(await api(s, 'GET', '/users/me', { token: erasedOne.token })).toMatchObject({ status: 401, body: { message: REVOKED } });

    expect(await heldBy(watched(), [...Object.values(p), ...Object.values(m)])).toEqual({ found: [], holders: [] });

    const history = await audited(s, auditor, hub.uuid);
    expect(history[0]).toEqual(['DeviceRegistered', ERASED, ERASED, ERASED]);
    expect(history).toContainEqual(['DeviceUpdated', undefined, ERASED, ERASED]);
    expect(history.at(-1)?.[0]).toBe('DeviceDeleted');
  });
});

describe('the other process keeps nothing either (distributed, two service processes)', () => {
  jest.setTimeout(PROCESS_TEST_TIMEOUT_MS);
  let stack: Stack | undefined;
  let a: Watched | undefined;
  let b: Watched | undefined;
  const open: Probe[] = [];
  beforeAll(async () => {
    stack = await startStack();
    [a, b] = await Promise.all([startWatched({ ADMIN_EMAILS: AUDITOR, ...stack.env }), startWatched({ ADMIN_EMAILS: AUDITOR, ...stack.env })]);
  }, PROCESS_TEST_TIMEOUT_MS);
  afterAll(async () => {
    for (const p of open.splice(0)) p.close();
    await Promise.all([stopWatched(b), stopWatched(a)]);
    await stack?.stop();
  });

  test('an erasure answered on one process: nothing of the person, their hub or the hub they deleted before is in the heap of the other, which heard, connected and read them', async () => {
    if (a === undefined || b === undefined) throw new Error('the processes have not started');
    const p = personMarkers();
    const m = deviceMarkers();
    const earlier = deviceMarkers();
    const erasedOne = await person(a.process, p);
    const auditor = (await person(b.process, { email: AUDITOR, firstName: 'Audrey', lastName: 'Tor' }, 'admin')).token;

    // A hub they deleted themselves before: heard through B, its events read there (the audit), then deleted through A.
    const first = await markedHub(a.process, erasedOne.token, earlier, b.process);
    expect((await audited(b.process, auditor, first.hub.uuid))[0]).toEqual(['DeviceRegistered', earlier.name, earlier.ip, { note: earlier.metadata }]);
    expect(await api(a.process, 'DELETE', `/devices/${first.hub.id}`, { token: erasedOne.token })).toMatchObject({ status: 200 });

    // Their hub: registered through A; heard, renewed, connected and subscribed through B.
    const { hub, hubToken } = await markedHub(a.process, erasedOne.token, m, b.process);
    expect((await api(b.process, 'POST', `/devices/auth/${hub.uuid}/renew`, { token: hubToken })).status).toBe(201);
    const sockets = await connected(b.process, hub, hubToken, erasedOne.token);
    open.push(sockets.device, sockets.app);

    const erased = await api(a.process, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id: erasedOne.syncId } });
    expect(erased).toMatchObject({ status: 200, body: { erased: true, userId: erasedOne.id } });
    await revokedByTheFeed(sockets, hub.uuid);
    await refusedAsDeleted(b.process, hub, hubToken, null);
    await refusedAsDeleted(a.process, hub, hubToken, null);

    const texts = [...Object.values(p), ...Object.values(m), ...Object.values(earlier)];
    expect(await heldBy(b, texts)).toEqual({ found: [], holders: [] });
    expect(await heldBy(a, texts)).toEqual({ found: [], holders: [] });
    expect((await audited(b.process, auditor, hub.uuid))[0]).toEqual(['DeviceRegistered', ERASED, ERASED, ERASED]);
    expect((await audited(b.process, auditor, first.hub.uuid))[0]).toEqual(['DeviceRegistered', ERASED, ERASED, ERASED]);
  });
});
