import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createStateCache, handleCommand, loadAggregate, newCommandContext, SHARED_REVISIONS, toNewEvents, type Clock } from '../../src/commands/handler';
import { createDeviceSnapshots } from '../../src/commands/snapshots';
import { deviceDecider, type DeviceEvent, type DeviceState } from '../../src/domain/device';
import { deviceStream } from '../../src/domain/events';
import { openEmbeddedEventStore, type EmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import { WrongExpectedRevisionError } from '../../src/infra/eventstore/port';
import { createTimerExpiryScheduler } from '../../src/presence/timer-scheduler';
import { MemoryWindows } from '../../src/ratelimit/memory-windows';
import type { DeviceStatus, MessageAck, TunnelError } from '../../src/tunnel/events';
import { allEvents } from '../support/accounts';
import { api, createUser, CRM_KEY, GENEROUS_RATE_LIMITS, startTestService, type TestService } from '../support/harness';
import { ManualTimers } from '../support/manual-timers';
import { twoProcesses } from '../support/two-processes';
import { connect, deviceToken, heartbeat, linkUser, refusal, registerHub, request, unlinkUser, type Probe } from '../support/tunnel';

/**
 * The slimmed state (folds, sessions, tokens, windows, scheduler, log index, documents)
 * attacked from outside: what a client sees must be what it saw before the slimming.
 */

type User = Awaited<ReturnType<typeof createUser>>;

describe('a connected hub whose links, roles and token change (embedded: no device room)', () => {
  let service: TestService;
  const open: Probe[] = [];
  const on = async (token: string): Promise<Probe> => {
    const p = await connect(service, token);
    open.push(p);
    return p;
  };
  beforeAll(async () => {
    service = await startTestService('embedded', { RATE_LIMITS: 'heartbeat=3/60,general=100000/60,auth=100000/60,register=100000/60,login=100000/60,tunnelMessage=100000/60,tunnelSubscribe=100000/60' });
  }, 60_000);
  afterEach(() => {
    for (const p of open.splice(0)) p.close();
  });
  afterAll(async () => {
    await service?.stop();
  });

  const send = (app: Probe, uuid: string, payload: unknown): Promise<MessageAck> => request<MessageAck>(app, 'tunnel:message', { deviceUuid: uuid, type: 'cmd', payload });

  test('unlink, relink and role change take effect on the very next message; status still reaches subscribers', async () => {
    const owner = await createUser(service);
    const user: User = await createUser(service);
    const hub = await registerHub(service, owner);
    await linkUser(service, hub, owner, user, 'editor');
    const token = await deviceToken(service, hub, owner);
    const device = await on(token);
    const app = await on(user.accessToken);
    await request(app, 'tunnel:subscribe', { deviceUuid: hub.uuid });

    expect(await send(app, hub.uuid, 1)).toEqual({ success: true, delivered: true });
    expect((await device.next<{ payload: unknown }>('tunnel:message')).payload).toBe(1);

    await unlinkUser(service, hub, owner, user.id);
    expect(await app.next<TunnelError>('tunnel:error', (e) => e.code === 'ACCESS_REVOKED')).toEqual({ code: 'ACCESS_REVOKED', message: expect.any(String) });
    expect(await send(app, hub.uuid, 2)).toEqual({ success: false, delivered: false });
    expect(await app.next<TunnelError>('tunnel:error', (e) => e.code !== 'ACCESS_REVOKED')).toEqual({ code: 'NOT_FOUND', message: expect.any(String) });

    await linkUser(service, hub, owner, user, 'viewer');
    // Subscribing reads the device afresh: the link is known however far the live feed is.
    await request(app, 'tunnel:subscribe', { deviceUuid: hub.uuid });
    expect(await send(app, hub.uuid, 3)).toEqual({ success: false, delivered: false });
    expect(await app.next<TunnelError>('tunnel:error', (e) => e.code !== 'ACCESS_REVOKED')).toEqual({ code: 'FORBIDDEN', message: expect.any(String) });

    // Linked again with another role: a role change.
    await linkUser(service, hub, owner, user, 'editor');
    await request(app, 'tunnel:subscribe', { deviceUuid: hub.uuid });
    expect(await send(app, hub.uuid, 4)).toEqual({ success: true, delivered: true });
    expect((await device.next<{ payload: unknown }>('tunnel:message')).payload).toBe(4);
    // Nothing refused reached the hub.
    expect(device.all<{ payload: unknown }>('tunnel:message').map((m) => m.payload)).toEqual([1, 4]);

    // Subscribed again after the relink: the hub's drop reaches the app.
    device.close();
    expect(await app.next<DeviceStatus>('device:status', (s) => !s.tunnelConnected)).toMatchObject({ deviceUuid: hub.uuid, tunnelConnected: false });
  });

  test('a renewed token ends the connected hub at once; the old token is refused by heartbeats and handshakes; its 401s spend none of the new budget', async () => {
    const owner = await createUser(service);
    const hub = await registerHub(service, owner);
    const old = await deviceToken(service, hub, owner);
    const device = await on(old);
    await heartbeat(service, hub, old);
    const renewed = await deviceToken(service, hub, owner);
    await device.next('disconnect');
    const error = await refusal(service, { token: old });
    expect(error.message).toBe('unauthorized');
    for (let i = 0; i < 6; i++) {
      const res = await api(service, 'POST', `/devices/heartbeat/${hub.uuid}`, { token: old });
      expect([401, 429]).toContain(res.status);
    }
    // The new token's heartbeat window (3 a minute) is its own.
    for (let i = 0; i < 3; i++) await heartbeat(service, hub, renewed);
    expect((await api(service, 'POST', `/devices/heartbeat/${hub.uuid}`, { token: renewed })).status).toBe(429);
    const fresh = await on(renewed);
    expect(fresh.socket.connected).toBe(true);
  });

  test('the owner erased while the hub is connected: the hub is ended, its token refused, its name, address and metadata gone', async () => {
    const tag = randomUUID().slice(0, 8);
    const customerId = 800_000 + Math.floor(Math.random() * 100_000);
    const synced = await api(service, 'POST', '/auth/sync-customer', {
      headers: { 'X-Internal-Api-Key': CRM_KEY },
      body: { id: customerId, first_name: 'Eve', last_name: 'Gone', email: `eve.${tag}@example.com`, active: true },
    });
    expect(synced.status).toBe(201);
    const ownerId = (synced.body as { user: { id: string } }).user.id;
    const other = await createUser(service);
    const secrets = { name: `Secret hub ${tag}`, ipAddress: '10.77.1.2', later: '10.77.3.4', plan: `plan-${tag}` };
    const owner = { id: ownerId, email: `eve.${tag}@example.com`, accessToken: service.tokens.signAccess({ sub: ownerId, email: `eve.${tag}@example.com`, role: 'user' }) };
    const registered = await api(service, 'POST', '/devices/register', {
      token: owner.accessToken,
      body: { uuid: randomUUID(), deviceId: `HUB-${tag}`, name: secrets.name, ipAddress: secrets.ipAddress, metadata: { plan: secrets.plan } },
    });
    expect(registered.status).toBe(201);
    const hub = registered.body as { id: string; uuid: string };
    await linkUser(service, hub, owner, other, 'editor');
    const token = await deviceToken(service, hub, owner);
    const device = await on(token);
    expect((await api(service, 'POST', `/devices/heartbeat/${hub.uuid}`, { token, body: { ipAddress: secrets.later, metadata: { plan: secrets.plan } } })).status).toBe(200);
    const app = await on(other.accessToken);
    await request(app, 'tunnel:subscribe', { deviceUuid: hub.uuid });

    // Readable before: in the log and in the documents.
    const before = JSON.stringify(await allEvents(service));
    const doc = JSON.stringify((await api(service, 'GET', `/devices/${hub.uuid}`, { token: other.accessToken })).body);
    for (const secret of [secrets.name, secrets.later, secrets.plan]) expect(before + doc).toContain(secret);
    expect(before).toContain(secrets.name);

    const erased = await api(service, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id: customerId } });
    expect(erased).toMatchObject({ status: 200, body: { erased: true, userId: ownerId } });
    await device.next('disconnect');
    expect(await app.next<TunnelError>('tunnel:error', (e) => e.code === 'ACCESS_REVOKED')).toEqual({ code: 'ACCESS_REVOKED', message: expect.any(String) });
    expect((await refusal(service, { token })).message).toBe('unauthorized');
    expect((await api(service, 'POST', `/devices/heartbeat/${hub.uuid}`, { token })).status).toBe(401);
    expect((await api(service, 'GET', `/devices/${hub.uuid}`, { token: other.accessToken })).status).toBe(404);
    expect(await send(app, hub.uuid, 'x')).toEqual({ success: false, delivered: false });
    const texts = JSON.stringify(await allEvents(service)) + JSON.stringify((await api(service, 'GET', '/devices', { token: other.accessToken })).body);
    for (const secret of [secrets.name, secrets.ipAddress, secrets.later, secrets.plan]) expect(texts).not.toContain(secret);
  });

  test('two connections of one device in one process: the newest wins, messages reach only it', async () => {
    const owner = await createUser(service);
    const hub = await registerHub(service, owner);
    const token = await deviceToken(service, hub, owner);
    const app = await on(owner.accessToken);
    const first = await on(token);
    const second = await on(token);
    expect(await first.next<TunnelError>('tunnel:error')).toEqual({ code: 'SESSION_REPLACED', message: expect.any(String) });
    expect(await send(app, hub.uuid, 'x')).toEqual({ success: true, delivered: true });
    expect((await second.next<{ payload: unknown }>('tunnel:message')).payload).toBe('x');
    expect(first.all('tunnel:message')).toEqual([]);
    // Deleted while connected: the hub is ended and its token refused.
    const del = await api(service, 'DELETE', `/devices/${hub.id}`, { token: owner.accessToken });
    expect(del.status).toBe(200);
    await second.next('disconnect');
    expect((await refusal(service, { token })).message).toBe('unauthorized');
    expect((await api(service, 'POST', `/devices/heartbeat/${hub.uuid}`, { token })).status).toBe(401);
  });
});

describe('concurrent handshakes of one device in one process (no device room)', () => {
  let service: TestService;
  beforeAll(async () => {
    service = await startTestService('embedded');
  }, 60_000);
  afterAll(async () => {
    await service?.stop();
  });

  test('of several sockets opened at once, exactly one holds the device and gets what apps send', async () => {
    const owner = await createUser(service);
    const hub = await registerHub(service, owner);
    const token = await deviceToken(service, hub, owner);
    const app = await connect(service, owner.accessToken);
    const opened: Probe[] = [app];
    try {
      for (let round = 0; round < 5; round++) {
        const settled = await Promise.allSettled(Array.from({ length: 4 }, () => connect(service, token)));
        const sockets = settled.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
        opened.push(...sockets);
        expect(sockets.length).toBeGreaterThan(0);
        // The replaced ones are told and closed (waited for, up to the probes' bound); one stays.
        for (let waited = 0; sockets.filter((p) => p.socket.connected).length > 1 && waited < 200; waited++) await new Promise((resolve) => setTimeout(resolve, 25));
        for (const p of sockets.filter((q) => !q.socket.connected)) expect(p.all<TunnelError>('tunnel:error').map((e) => e.code)).toEqual(['SESSION_REPLACED']);
        const holders = sockets.filter((p) => p.socket.connected);
        expect(holders).toHaveLength(1);
        const holder = holders[0] as Probe;
        expect(await request<MessageAck>(app, 'tunnel:message', { deviceUuid: hub.uuid, type: 'r', payload: round })).toEqual({ success: true, delivered: true });
        expect((await holder.next<{ payload: unknown }>('tunnel:message')).payload).toBe(round);
        for (const p of sockets) if (p !== holder) expect(p.all('tunnel:message')).toEqual([]);
        holder.close();
      }
    } finally {
      for (const p of opened) p.close();
    }
  }, 60_000);
});

describe('tunnel limits per principal, made per event', () => {
  let service: TestService;
  beforeAll(async () => {
    service = await startTestService('embedded', { RATE_LIMITS: GENEROUS_RATE_LIMITS.replace(/tunnelMessage=[^,]+/, 'tunnelMessage=3/60') });
  }, 60_000);
  afterAll(async () => {
    await service?.stop();
  });

  test("a user's sockets share one budget, a device's reconnections share another", async () => {
    const owner = await createUser(service);
    const hub = await registerHub(service, owner);
    const token = await deviceToken(service, hub, owner);
    const opened: Probe[] = [];
    const open = async (t: string): Promise<Probe> => {
      const p = await connect(service, t);
      opened.push(p);
      return p;
    };
    try {
      const device = await open(token);
      const [one, two] = [await open(owner.accessToken), await open(owner.accessToken)] as [Probe, Probe];
      const send = (p: Probe, n: number): Promise<MessageAck> => request<MessageAck>(p, 'tunnel:message', { deviceUuid: hub.uuid, type: 't', payload: n });
      expect(await send(one, 1)).toEqual({ success: true, delivered: true });
      expect(await send(two, 2)).toEqual({ success: true, delivered: true });
      expect(await send(one, 3)).toEqual({ success: true, delivered: true });
      expect(await send(two, 4)).toEqual({ success: false, delivered: false });
      expect(await two.next<TunnelError>('tunnel:error')).toEqual({ code: 'RATE_LIMITED', message: expect.any(String), retryAfter: expect.any(Number) });

      const fromDevice = (p: Probe, n: number): Promise<MessageAck> => request<MessageAck>(p, 'tunnel:message', { type: 'd', payload: n });
      expect(await fromDevice(device, 1)).toEqual({ success: true, delivered: true });
      expect(await fromDevice(device, 2)).toEqual({ success: true, delivered: true });
      device.close();
      const again = await open(token);
      expect(await fromDevice(again, 3)).toEqual({ success: true, delivered: true });
      expect(await fromDevice(again, 4)).toEqual({ success: false, delivered: false });
      expect((await again.next<TunnelError>('tunnel:error')).code).toBe('RATE_LIMITED');
    } finally {
      for (const p of opened) p.close();
    }
  }, 60_000);
});

describe('a restart of the embedded service under a hub with a long device stream', () => {
  test('the folds and documents read back the same: current token in, old token out, links as they were, bytes identical', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hhc-slim-restart-'));
    const env = { DATA_DIR: dir, RATE_LIMITS: GENEROUS_RATE_LIMITS };
    let service = await startTestService('embedded', env);
    const opened: Probe[] = [];
    const text = async (path: string, user: User): Promise<string> => {
      const res = await fetch(`${service.baseUrl}/api/v1${path}`, { headers: { Authorization: `Bearer ${user.accessToken}` } });
      expect(res.status).toBe(200);
      return res.text();
    };
    try {
      const owner = await createUser(service);
      const editor = await createUser(service);
      const gone = await createUser(service);
      const hub = await registerHub(service, owner);
      // More than a few events in the device stream (the index keeps them in a list), several token generations.
      for (let i = 0; i < 12; i++) expect((await api(service, 'PUT', `/devices/${hub.id}`, { token: owner.accessToken, body: { name: `Hub ${i}` } })).status).toBe(200);
      await linkUser(service, hub, owner, editor, 'viewer');
      await linkUser(service, hub, owner, editor, 'editor');
      await linkUser(service, hub, owner, gone, 'editor');
      await unlinkUser(service, hub, owner, gone.id);
      const old = await deviceToken(service, hub, owner);
      const token = await deviceToken(service, hub, owner);
      await heartbeat(service, hub, token);
      const paths: Array<[string, User]> = [
        [`/devices/${hub.id}`, owner],
        [`/devices/${hub.id}`, editor],
        ['/devices', owner],
        ['/devices?role=editor', editor],
      ];
      const before = await Promise.all(paths.map(([path, user]) => text(path, user)));
      await service.stop();

      service = await startTestService('embedded', env);
      expect(await Promise.all(paths.map(([path, user]) => text(path, user)))).toEqual(before);
      expect((await refusal(service, { token: old })).message).toBe('unauthorized');
      expect((await api(service, 'POST', `/devices/heartbeat/${hub.uuid}`, { token: old })).status).toBe(401);
      const device = await connect(service, token);
      opened.push(device);
      await heartbeat(service, hub, token);
      const byEditor = await connect(service, editor.accessToken);
      const byGone = await connect(service, gone.accessToken);
      opened.push(byEditor, byGone);
      expect(await request<MessageAck>(byEditor, 'tunnel:message', { deviceUuid: hub.uuid, type: 't', payload: 'in' })).toEqual({ success: true, delivered: true });
      expect((await device.next<{ payload: unknown }>('tunnel:message')).payload).toBe('in');
      expect(await request<MessageAck>(byGone, 'tunnel:message', { deviceUuid: hub.uuid, type: 't', payload: 'out' })).toEqual({ success: false, delivered: false });
      expect((await byGone.next<TunnelError>('tunnel:error')).code).toBe('NOT_FOUND');
      expect(device.all<{ payload: unknown }>('tunnel:message').map((m) => m.payload)).toEqual(['in']);
    } finally {
      for (const p of opened) p.close();
      await service.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});

describe('two API processes with Redis: an app on one reaches the hub on the other through its room', () => {
  const { a, b, on } = twoProcesses({ closeSockets: 'afterEach' });
  const send = (app: Probe, uuid: string, payload: unknown): Promise<MessageAck> => request<MessageAck>(app, 'tunnel:message', { deviceUuid: uuid, type: 'cmd', payload });

  test('links, a replaced hub socket and a renewed token, the hub on A and the app on B', async () => {
    const owner = await createUser(a());
    const user = await createUser(a());
    const hub = await registerHub(a(), owner);
    await linkUser(a(), hub, owner, user, 'editor');
    const token = await deviceToken(a(), hub, owner);
    const first = await on(a(), token);
    const app = await on(b(), user.accessToken);
    await request(app, 'tunnel:subscribe', { deviceUuid: hub.uuid });
    expect(await send(app, hub.uuid, 1)).toEqual({ success: true, delivered: true });
    expect((await first.next<{ payload: unknown }>('tunnel:message')).payload).toBe(1);

    // The newest socket of the hub, in the same process: only it gets what the app sends.
    const second = await on(a(), token);
    expect(await first.next<TunnelError>('tunnel:error')).toEqual({ code: 'SESSION_REPLACED', message: expect.any(String) });
    await first.next('disconnect');
    expect(await send(app, hub.uuid, 2)).toEqual({ success: true, delivered: true });
    expect((await second.next<{ payload: unknown }>('tunnel:message')).payload).toBe(2);

    await unlinkUser(a(), hub, owner, user.id);
    // B's live feed applied the unlink: the very next message is refused.
    expect(await app.next<TunnelError>('tunnel:error', (e) => e.code === 'ACCESS_REVOKED')).toEqual({ code: 'ACCESS_REVOKED', message: expect.any(String) });
    expect(await send(app, hub.uuid, 3)).toEqual({ success: false, delivered: false });
    expect(await app.next<TunnelError>('tunnel:error', (e) => e.code === 'NOT_FOUND')).toEqual({ code: 'NOT_FOUND', message: expect.any(String) });
    await linkUser(b(), hub, owner, user, 'editor');
    await request(app, 'tunnel:subscribe', { deviceUuid: hub.uuid });
    expect(await send(app, hub.uuid, 4)).toEqual({ success: true, delivered: true });
    expect((await second.next<{ payload: unknown }>('tunnel:message')).payload).toBe(4);
    expect(second.all<{ payload: unknown }>('tunnel:message').map((m) => m.payload)).toEqual([2, 4]);
    expect(first.all<{ payload: unknown }>('tunnel:message').map((m) => m.payload)).toEqual([1]);

    // A new token issued through B ends the hub's socket on A; the old token is refused on both.
    const renewed = await deviceToken(b(), hub, owner);
    await second.next('disconnect');
    for (const target of [a(), b()]) {
      expect((await refusal(target, { token })).message).toBe('unauthorized');
      expect((await api(target, 'POST', `/devices/heartbeat/${hub.uuid}`, { token })).status).toBe(401);
    }
    const third = await on(a(), renewed);
    expect(await send(app, hub.uuid, 5)).toEqual({ success: true, delivered: true });
    expect((await third.next<{ payload: unknown }>('tunnel:message')).payload).toBe(5);
  }, 60_000);
});

describe('a device stream past the shared revisions', () => {
  let dir: string;
  let store: EmbeddedEventStore;
  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'hhc-slim-rev-'));
    store = await openEmbeddedEventStore(dir);
  });
  afterEach(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('folds, caches and optimistic concurrency are right across 4096 and after a reopen', async () => {
    const uuid = randomUUID();
    const owner = randomUUID();
    let now = Date.parse('2026-11-29T08:00:00.000Z');
    const clock: Clock = { now: () => new Date(now) };
    const at = (): string => new Date((now += 1000)).toISOString();
    const ctx = newCommandContext({ type: 'user', id: owner }, randomUUID());
    await handleCommand(store, deviceDecider, deviceStream(uuid), {
      type: 'RegisterDevice',
      data: { id: randomUUID(), uuid, deviceId: 'HUB-REV', name: 'Hub', actorUserId: owner, linkId: randomUUID(), ownedDeviceCount: 0, maxDevicesPerUser: 100, now: at() },
    }, ctx, clock);
    // Up to just below the bound, in batches straight into the log.
    let revision = (await loadAggregate(store, deviceDecider.evolve, deviceDecider.initialState, deviceStream(uuid))).revision;
    const target = BigInt(SHARED_REVISIONS - 3);
    while (revision < target) {
      const count = Number(target - revision < 500n ? target - revision : 500n);
      const events: DeviceEvent[] = Array.from({ length: count }, (_, i) => ({ type: 'DeviceUpdated', data: { uuid, changes: { name: `N${Number(revision) + 1 + i}` }, updatedAt: at() } }) as DeviceEvent);
      revision = (await store.append(deviceStream(uuid), toNewEvents(events, ctx, at()), revision)).nextExpectedRevision;
    }
    const caches = [createStateCache<DeviceState>(10), createStateCache<DeviceState>(10)];
    const snapshots = createDeviceSnapshots(store);
    for (let i = 0; i < 12; i++) {
      const cache = caches[i % 2];
      const result = await handleCommand(store, deviceDecider, deviceStream(uuid), { type: 'UpdateDevice', data: { uuid, actorUserId: owner, changes: { name: `C${i}` }, now: at() } }, ctx, clock, { cache, snapshots });
      revision += 1n;
      expect(result.revision).toBe(revision);
      const whole = await loadAggregate(store, deviceDecider.evolve, deviceDecider.initialState, deviceStream(uuid));
      expect(whole.revision).toBe(revision);
      expect(result.state).toEqual(whole.state);
      expect(whole.state.status === 'active' && whole.state.name).toBe(`C${i}`);
    }
    expect(revision).toBeGreaterThan(BigInt(SHARED_REVISIONS));
    // Two writers at once, each from its own cache: one retries on the conflict, both land.
    const both = await Promise.all(
      caches.map((cache, i) => handleCommand(store, deviceDecider, deviceStream(uuid), { type: 'UpdateDevice', data: { uuid, actorUserId: owner, changes: { name: `W${i}` }, now: at() } }, ctx, clock, { cache, snapshots })),
    );
    revision += 2n;
    expect(both.map((r) => r.revision).sort()).toEqual([revision - 1n, revision]);
    const lastWriter = both.find((r) => r.revision === revision);
    const landed = await loadAggregate(store, deviceDecider.evolve, deviceDecider.initialState, deviceStream(uuid));
    expect(landed.revision).toBe(revision);
    expect(landed.state).toEqual(lastWriter?.state);
    // A stale expected revision above the bound is refused.
    await expect(store.append(deviceStream(uuid), toNewEvents([{ type: 'DeviceUpdated', data: { uuid, changes: { name: 'stale' }, updatedAt: at() } } as DeviceEvent], ctx, at()), revision - 1n)).rejects.toBeInstanceOf(WrongExpectedRevisionError);
    const before = await loadAggregate(store, deviceDecider.evolve, deviceDecider.initialState, deviceStream(uuid));
    await store.close();
    store = await openEmbeddedEventStore(dir);
    const after = await loadAggregate(store, deviceDecider.evolve, deviceDecider.initialState, deviceStream(uuid));
    expect(after.revision).toBe(before.revision);
    expect(JSON.stringify(after.state)).toBe(JSON.stringify(before.state));
    const next = await handleCommand(store, deviceDecider, deviceStream(uuid), { type: 'UpdateDevice', data: { uuid, actorUserId: owner, changes: { name: 'reopened' }, now: at() } }, ctx, clock);
    expect(next.revision).toBe(revision + 1n);
  }, 60_000);
});

describe('presence expiry after many reschedules across the renumbering bound', () => {
  test('a hub goes offline exactly OFFLINE_AFTER after its last heartbeat; ties fire in order', async () => {
    const timers = new ManualTimers();
    const scheduler = createTimerExpiryScheduler({ timers, concurrency: 1, orderBelow: 5 });
    const offlineAfter = 300_000;
    const lastBeat = new Map<string, number>();
    const fired: Array<[string, number]> = [];
    await scheduler.start(async (key) => {
      const due = (lastBeat.get(key) ?? 0) + offlineAfter;
      if (timers.now() < due) return due;
      fired.push([key, timers.now()]);
      return null;
    });
    try {
      const t0 = timers.now();
      const keys = ['a', 'b', 'c', 'd'];
      for (const key of keys) {
        lastBeat.set(key, t0);
        await scheduler.schedule(key, t0 + offlineAfter);
      }
      // Thousands of heartbeats, every 30 s, the same instant for all hubs.
      for (let beat = 1; beat <= 2000; beat++) {
        await timers.advance(30_000);
        for (const key of keys) {
          lastBeat.set(key, timers.now());
          await scheduler.schedule(key, timers.now() + offlineAfter);
        }
      }
      const last = timers.now();
      await timers.advance(offlineAfter - 1);
      expect(fired).toEqual([]);
      await timers.advance(1);
      expect(fired).toEqual(keys.map((key) => [key, last + offlineAfter]));
      expect(await scheduler.size()).toBe(0);
    } finally {
      await scheduler.close();
    }
  }, 60_000);
});

describe('heartbeat windows on a fake clock', () => {
  test('windows reset on time, separately per key, across a rebase', () => {
    let now = 0.4;
    const windows = new MemoryWindows(60_000, () => now, 100_000);
    expect(windows.consume('device:u:1').points).toBe(1);
    expect(windows.consume('device:u:1').points).toBe(2);
    expect(windows.consume('device:u:2').points).toBe(1);
    now += 59_999;
    expect(windows.consume('device:u:1').points).toBe(3);
    now += 1;
    expect(windows.consume('device:u:1')).toEqual({ points: 1, msLeft: 60_000 });
    // Past the rebase: an open window ends when it would have.
    now += 50_000;
    expect(windows.consume('device:u:1').points).toBe(2);
    now += 9_999;
    expect(windows.consume('device:u:1').points).toBe(3);
    now += 1;
    expect(windows.consume('device:u:1').points).toBe(1);
    windows.close();
  });
});
