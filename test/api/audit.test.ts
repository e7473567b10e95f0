import { randomUUID } from 'node:crypto';
import { api, createUser, MODES, startTestService, type Mode, type TestService } from '../support/harness';

/** Auditors (decisions §9): device history and state at an instant, over real HTTP, in both modes. */

type User = Awaited<ReturnType<typeof createUser>>;

interface Device {
  id: string;
  uuid: string;
  name: string;
}

interface HistoryItem {
  stream: string;
  revision: number;
  type: string;
  data: Record<string, unknown>;
  occurredAt: string;
  actor: { type: string; id: string };
  requestId: string;
}

interface HistoryPage {
  data: HistoryItem[];
  meta: { uuid: string; limit: number; after: number | null; nextAfter: number | null; hasMore: boolean; heartbeatAfter?: number | null; nextHeartbeatAfter?: number | null };
}

interface StateBody {
  uuid: string;
  at: string;
  revision: number | null;
  status: 'none' | 'active' | 'deleted';
  device: { id: string; name: string; isOnline: boolean; ipAddress: string | null } | null;
  users: Array<{ id: string; role: string }>;
}

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

describe.each<Mode>(MODES)('auditors (%s mode)', (mode) => {
  let service: TestService;
  let admin: User;

  beforeAll(async () => {
    // A request id set by a proxy is kept only from a trusted one: the test's requests come from loopback.
    service = await startTestService(mode, { TRUST_PROXY: 'loopback' });
    admin = await createUser(service, { role: 'admin' });
  }, 60_000);
  afterAll(async () => {
    await service?.stop();
  });

  const register = async (owner: User, uuid: string = randomUUID()): Promise<Device> => {
    const res = await api(service, 'POST', '/devices/register', { token: owner.accessToken, body: { uuid, deviceId: 'HUB-1', name: 'Hub' } });
    if (res.status !== 201) throw new Error(`register answered ${res.status}: ${JSON.stringify(res.body)}`);
    return res.body as Device;
  };
  const link = async (device: Device, owner: User, user: User, role: string): Promise<void> => {
    const res = await api(service, 'POST', `/devices/${device.uuid}/link`, { token: owner.accessToken, body: { email: user.email, role } });
    expect([200, 201]).toContain(res.status);
  };
  const history = async (who: User, key: string, query = ''): Promise<HistoryPage> => {
    const res = await api(service, 'GET', `/devices/${key}/history${query}`, { token: who.accessToken });
    if (res.status !== 200) throw new Error(`history answered ${res.status}: ${JSON.stringify(res.body)}`);
    return res.body as HistoryPage;
  };
  const stateAt = async (who: User, key: string, at: string): Promise<StateBody> => {
    const res = await api(service, 'GET', `/devices/${key}/state?at=${encodeURIComponent(at)}`, { token: who.accessToken });
    if (res.status !== 200) throw new Error(`state answered ${res.status}: ${JSON.stringify(res.body)}`);
    return res.body as StateBody;
  };
  const beatOnce = async (device: Device, owner: User, body: unknown = {}): Promise<void> => {
    const auth = await api(service, 'POST', `/devices/auth/${device.uuid}`, { token: owner.accessToken });
    const token = (auth.body as { token: string }).token;
    expect((await api(service, 'POST', `/devices/heartbeat/${device.uuid}`, { token, body })).status).toBe(200);
  };

  describe('GET /devices/:id/history', () => {
    test('every state change, oldest first, with its actor and the X-Request-Id of the request that caused it', async () => {
      const [owner, viewer] = await Promise.all([createUser(service), createUser(service)]);
      const device = await register(owner);
      const put = await api(service, 'PUT', `/devices/${device.id}`, { token: owner.accessToken, body: { name: 'Kitchen' } });
      expect(put.status).toBe(200);
      const putRequestId = put.headers.get('x-request-id');
      expect(putRequestId).toEqual(expect.any(String));
      // A request id given by a proxy is kept and carried by the events too.
      const chosenId = `audit-${randomUUID()}`;
      const linked = await api(service, 'POST', `/devices/${device.uuid}/link`, {
        token: owner.accessToken,
        body: { email: viewer.email, role: 'viewer' },
        headers: { 'X-Request-Id': chosenId },
      });
      expect(linked.status).toBe(201);
      expect((await api(service, 'DELETE', `/devices/${device.uuid}/users/${viewer.id}`, { token: owner.accessToken })).status).toBe(200);
      await beatOnce(device, owner, { ipAddress: '10.0.0.9' });

      const page = await history(owner, device.id);
      expect(page.data.map((e) => e.type)).toEqual([
        'DeviceRegistered',
        'UserLinked',
        'DeviceUpdated',
        'UserLinked',
        'UserUnlinked',
        'DeviceTokenIssued',
        'DeviceWentOnline',
        'DeviceUpdated',
      ]);
      expect(page.data.map((e) => e.revision)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
      for (const event of page.data) {
        expect(event).toEqual({
          stream: `device-${device.uuid}`,
          revision: expect.any(Number),
          type: expect.any(String),
          data: expect.any(Object),
          occurredAt: expect.stringMatching(ISO),
          actor: expect.any(Object),
          requestId: expect.any(String),
        });
      }
      const renamed = page.data[2] as HistoryItem;
      expect(renamed.requestId).toBe(putRequestId);
      expect(renamed.actor).toEqual({ type: 'user', id: owner.id });
      expect(renamed.data).toMatchObject({ changes: { name: 'Kitchen' }, source: 'user' });
      expect(page.data[3]?.requestId).toBe(chosenId);
      expect(page.data[7]?.actor).toEqual({ type: 'device', id: device.uuid });
      expect(page.meta).toEqual({ uuid: device.uuid, limit: 50, after: null, nextAfter: 7, hasMore: false });
      // Heartbeats only when asked for.
      expect(page.data.some((e) => e.type === 'HeartbeatReceived')).toBe(false);
    });

    test('pages by revision: after is exclusive, nextAfter continues, hasMore says when to stop', async () => {
      const owner = await createUser(service);
      const device = await register(owner);
      for (const name of ['a', 'b', 'c']) {
        expect((await api(service, 'PUT', `/devices/${device.uuid}`, { token: owner.accessToken, body: { name } })).status).toBe(200);
      }
      const all = await history(owner, device.uuid);
      expect(all.data).toHaveLength(5);
      const seen: HistoryItem[] = [];
      let query = '?limit=2';
      for (let pages = 0; pages < 5; pages++) {
        const page = await history(owner, device.uuid, query);
        seen.push(...page.data);
        expect(page.meta.limit).toBe(2);
        if (!page.meta.hasMore) break;
        query = `?limit=2&after=${String(page.meta.nextAfter)}`;
      }
      expect(seen).toEqual(all.data);
      const tail = await history(owner, device.uuid, '?after=4');
      expect(tail).toEqual({ data: [], meta: { uuid: device.uuid, limit: 50, after: 4, nextAfter: 4, hasMore: false } });
    });

    test('bad paging values are 400, never clamped', async () => {
      const owner = await createUser(service);
      const device = await register(owner);
      for (const query of ['?limit=101', '?limit=0', '?limit=x', '?after=-1', '?after=1.5', '?include=everything', '?heartbeatAfter=3']) {
        const res = await api(service, 'GET', `/devices/${device.uuid}/history${query}`, { token: owner.accessToken });
        expect({ query, status: res.status }).toEqual({ query, status: 400 });
        expect((res.body as { details: unknown[] }).details.length).toBeGreaterThan(0);
      }
      expect((await api(service, 'GET', `/devices/${device.uuid}/history?limit=100`, { token: owner.accessToken })).status).toBe(200);
      // The same messages as GET /devices for the same mistakes.
      const messageOf = async (query: string): Promise<unknown> =>
        ((await api(service, 'GET', `/devices/${device.uuid}/history${query}`, { token: owner.accessToken })).body as { message: unknown }).message;
      expect(await messageOf('?limit=-1')).toEqual(['limit must not be less than 1']);
      expect(await messageOf('?limit=99999999999999999999')).toEqual(['limit must not be greater than 100']);
    });

    test('include=heartbeats merges the heartbeat stream in recorded order, with a cursor of its own', async () => {
      const owner = await createUser(service);
      const device = await register(owner);
      const auth = await api(service, 'POST', `/devices/auth/${device.uuid}`, { token: owner.accessToken });
      const token = (auth.body as { token: string }).token;
      for (let i = 0; i < 3; i++) {
        expect((await api(service, 'POST', `/devices/heartbeat/${device.uuid}`, { token, body: { ipAddress: `10.0.0.${i}` } })).status).toBe(200);
      }
      const deviceOnly = await history(owner, device.uuid);
      const all = await history(owner, device.uuid, '?include=heartbeats');
      // Both streams whole, each in its own order, interleaved in the order they were recorded.
      expect(all.data.filter((e) => e.stream === `device-${device.uuid}`)).toEqual(deviceOnly.data);
      const beats = all.data.filter((e) => e.stream === `heartbeat-${device.uuid}`);
      expect(beats.map((e) => [e.revision, e.type, e.actor])).toEqual(
        [0, 1, 2].map((revision) => [revision, 'HeartbeatReceived', { type: 'device', id: device.uuid }]),
      );
      expect(all.data).toHaveLength(deviceOnly.data.length + 3);
      const times = all.data.map((e) => e.occurredAt);
      expect([...times].sort()).toEqual(times);
      expect(all.meta).toMatchObject({ hasMore: false, nextAfter: deviceOnly.meta.nextAfter, heartbeatAfter: null, nextHeartbeatAfter: 2 });

      const seen: HistoryItem[] = [];
      let query = '?include=heartbeats&limit=3';
      for (let pages = 0; pages < 10; pages++) {
        const page = await history(owner, device.uuid, query);
        seen.push(...page.data);
        if (!page.meta.hasMore) break;
        query =
          `?include=heartbeats&limit=3&after=${String(page.meta.nextAfter)}` +
          (page.meta.nextHeartbeatAfter === null ? '' : `&heartbeatAfter=${String(page.meta.nextHeartbeatAfter)}`);
      }
      expect(seen).toEqual(all.data);
    });

    test('owner or admin only: a linked editor or viewer gets 403, anyone else 404', async () => {
      const [owner, editor, viewer, stranger, former] = await Promise.all([
        createUser(service),
        createUser(service),
        createUser(service),
        createUser(service),
        createUser(service),
      ]);
      const device = await register(owner);
      await link(device, owner, editor, 'editor');
      await link(device, owner, viewer, 'viewer');
      await link(device, owner, former, 'viewer');
      expect((await api(service, 'DELETE', `/devices/${device.uuid}/users/${former.id}`, { token: former.accessToken })).status).toBe(200);

      for (const path of ['history', 'state']) {
        for (const who of [editor, viewer]) {
          const res = await api(service, 'GET', `/devices/${device.uuid}/${path}`, { token: who.accessToken });
          expect(res.status).toBe(403);
          expect(res.body).toEqual({ statusCode: 403, message: 'Only the device owner can read the device history', error: 'Forbidden' });
        }
        for (const who of [stranger, former]) {
          const res = await api(service, 'GET', `/devices/${device.id}/${path}`, { token: who.accessToken });
          expect(res.status).toBe(404);
          expect(res.body).toEqual({ statusCode: 404, message: 'Device not found', error: 'Not Found' });
        }
        expect((await api(service, 'GET', `/devices/${device.uuid}/${path}`)).status).toBe(401);
        expect((await api(service, 'GET', `/devices/${randomUUID()}/${path}`, { token: admin.accessToken })).status).toBe(404);
        for (const key of [device.id, device.uuid, device.uuid.toUpperCase()]) {
          expect((await api(service, 'GET', `/devices/${key}/${path}`, { token: admin.accessToken })).status).toBe(200);
        }
      }
      // A promoted owner may read it.
      await link(device, owner, editor, 'owner');
      expect((await history(editor, device.uuid)).data.at(-1)?.type).toBe('UserRoleChanged');
    });

    test('a deleted device: admins still read its events by uuid; a re-registration continues the stream, the new owner sees only its own registration', async () => {
      const [first, second] = await Promise.all([createUser(service), createUser(service)]);
      const device = await register(first);
      expect((await api(service, 'DELETE', `/devices/${device.uuid}`, { token: first.accessToken })).status).toBe(200);

      expect((await api(service, 'GET', `/devices/${device.uuid}/history`, { token: first.accessToken })).status).toBe(404);
      // The read model dropped it, so its internal id no longer resolves; the uuid names the stream.
      expect((await api(service, 'GET', `/devices/${device.id}/history`, { token: admin.accessToken })).status).toBe(404);
      const afterDelete = await history(admin, device.uuid);
      expect(afterDelete.data.map((e) => e.type)).toEqual(['DeviceRegistered', 'UserLinked', 'DeviceDeleted']);
      expect(afterDelete.data[2]?.actor).toEqual({ type: 'user', id: first.id });

      const again = await register(second, device.uuid);
      expect(again.id).not.toBe(device.id);
      // The admin reads the whole stream: the same stream goes on after the deletion.
      const continued = await history(admin, again.id);
      expect(continued.data.map((e) => [e.revision, e.type])).toEqual([
        [0, 'DeviceRegistered'],
        [1, 'UserLinked'],
        [2, 'DeviceDeleted'],
        [3, 'DeviceRegistered'],
        [4, 'UserLinked'],
      ]);
      expect(continued.data[3]?.data).toMatchObject({ id: again.id, gen: 1 });
      // The new owner sees the current registration only (decisions §9).
      const own = await history(second, again.id);
      expect(own.data.map((e) => [e.revision, e.type])).toEqual([
        [3, 'DeviceRegistered'],
        [4, 'UserLinked'],
      ]);
      expect(JSON.stringify(own)).not.toContain(first.id);
      // A cursor from before the registration does not reach back either.
      const fromStart = (await api(service, 'GET', `/devices/${again.id}/history?after=0`, { token: second.accessToken })).body as HistoryPage;
      expect(fromStart.data.map((e) => e.revision)).toEqual([3, 4]);
    });

    test('a second-hand hub: its new owner never sees the earlier household (users, addresses, metadata, heartbeats)', async () => {
      const [first, guest, second] = await Promise.all([createUser(service), createUser(service), createUser(service)]);
      const uuid = randomUUID();
      const res = await api(service, 'POST', '/devices/register', {
        token: first.accessToken,
        body: { uuid, deviceId: 'HUB-1', name: 'Old home', ipAddress: '10.1.2.3', metadata: { room: 'first-household-kitchen' } },
      });
      expect(res.status).toBe(201);
      const device = res.body as Device;
      await link(device, first, guest, 'viewer');
      await beatOnce(device, first);
      expect((await api(service, 'DELETE', `/devices/${uuid}`, { token: first.accessToken })).status).toBe(200);
      const again = await register(second, uuid);
      await beatOnce(again, second);

      const own = await history(second, uuid, '?include=heartbeats');
      const text = JSON.stringify(own);
      for (const secret of [first.id, guest.id, '10.1.2.3', 'first-household-kitchen', 'Old home']) expect(text).not.toContain(secret);
      expect(own.data[0]?.type).toBe('DeviceRegistered');
      expect(own.data.filter((e) => e.type === 'HeartbeatReceived')).toHaveLength(1);

      // The state before the current registration: none, for the new owner.
      const earlier = own.data[0]?.occurredAt as string;
      const before = await stateAt(second, uuid, new Date(Date.parse(earlier) - 1).toISOString());
      expect(before).toMatchObject({ status: 'none', device: null, users: [] });
      expect(JSON.stringify(await stateAt(second, uuid, new Date(Date.now() + 1000).toISOString()))).not.toContain(first.id);

      // The admin still sees everything.
      const all = JSON.stringify(await history(admin, uuid, '?include=heartbeats&limit=100'));
      for (const secret of [first.id, guest.id, '10.1.2.3', 'first-household-kitchen']) expect(all).toContain(secret);
    });
  });

  test('the OpenAPI document describes both endpoints and the rebuild, with their query and response schemas', async () => {
    const res = await api(service, 'GET', '/openapi.json');
    const paths = (res.body as { paths: Record<string, Record<string, { parameters: Array<{ name: string }>; responses: Record<string, { content?: unknown }> }>> }).paths;
    const history = paths['/devices/{id}/history']?.get;
    expect(history?.parameters.map((p) => p.name)).toEqual(['id', 'after', 'limit', 'include', 'heartbeatAfter']);
    expect(Object.keys(history?.responses ?? {})).toEqual(expect.arrayContaining(['200', '400', '401', '403', '404']));
    expect(history?.responses['200']?.content).toBeDefined();
    expect(paths['/devices/{id}/state']?.get?.parameters.map((p) => p.name)).toEqual(['id', 'at']);
    expect(paths['/admin/read-models/rebuild']?.post?.responses['200']?.content).toBeDefined();
  });

  describe('GET /devices/:id/state', () => {
    test('the device at any instant, folded from its events, with the users who had access then', async () => {
      const [owner, editor, nextOwner] = await Promise.all([createUser(service), createUser(service), createUser(service)]);
      const device = await register(owner);
      await link(device, owner, editor, 'editor');
      expect((await api(service, 'PUT', `/devices/${device.uuid}`, { token: owner.accessToken, body: { name: 'Renamed' } })).status).toBe(200);
      expect((await api(service, 'DELETE', `/devices/${device.uuid}/users/${editor.id}`, { token: owner.accessToken })).status).toBe(200);
      await beatOnce(device, owner);
      const events = (await history(owner, device.uuid)).data;
      const at = (type: string, nth = 0): string => (events.filter((e) => e.type === type)[nth] as HistoryItem).occurredAt;

      const before = await stateAt(owner, device.uuid, '2020-01-01T00:00:00Z');
      expect(before).toEqual({ uuid: device.uuid, at: '2020-01-01T00:00:00.000Z', revision: null, status: 'none', device: null, users: [] });

      const registered = await stateAt(owner, device.uuid, at('UserLinked'));
      expect(registered).toMatchObject({ status: 'active', revision: 1, device: { id: device.id, name: 'Hub', isOnline: false } });
      expect(registered.users).toEqual([expect.objectContaining({ id: owner.id, role: 'owner' })]);

      const shared = await stateAt(owner, device.uuid, at('UserLinked', 1));
      expect(shared.users.map((u) => [u.id, u.role])).toEqual([
        [owner.id, 'owner'],
        [editor.id, 'editor'],
      ]);
      expect((await stateAt(owner, device.uuid, at('DeviceUpdated'))).device?.name).toBe('Renamed');
      expect((await stateAt(owner, device.uuid, at('UserUnlinked'))).users.map((u) => u.id)).toEqual([owner.id]);
      expect((await stateAt(owner, device.uuid, at('DeviceWentOnline'))).device?.isOnline).toBe(true);

      // Now (no `at`): the same as the read model says.
      const now = (await api(service, 'GET', `/devices/${device.uuid}/state`, { token: owner.accessToken })).body as StateBody;
      const live = (await api(service, 'GET', `/devices/${device.uuid}`, { token: owner.accessToken })).body as Record<string, unknown>;
      expect(now.device).toMatchObject({ id: live.id, name: live.name, isOnline: live.isOnline, ipAddress: live.ipAddress, updatedAt: live.updatedAt });
      expect(now.at).toMatch(ISO);

      // Deleted, then registered by someone else: each instant shows who had access then.
      expect((await api(service, 'DELETE', `/devices/${device.uuid}`, { token: owner.accessToken })).status).toBe(200);
      const deletedAt = (await history(admin, device.uuid)).data.at(-1)?.occurredAt as string;
      expect(await stateAt(admin, device.uuid, deletedAt)).toMatchObject({ status: 'deleted', users: [], device: { isOnline: false } });
      await register(nextOwner, device.uuid);
      const later = await stateAt(nextOwner, device.uuid, new Date(Date.now() + 1000).toISOString());
      expect(later.status).toBe('active');
      expect(later.users.map((u) => [u.id, u.role])).toEqual([[nextOwner.id, 'owner']]);
      // The earlier household is the admin's to see, not the new owner's (decisions §9).
      expect((await stateAt(admin, device.uuid, at('UserLinked', 1))).users.map((u) => u.id)).toEqual([owner.id, editor.id]);
      expect(await stateAt(nextOwner, device.uuid, at('UserLinked', 1))).toMatchObject({ status: 'none', users: [] });
    });

    test('lastSeenAt at an instant is the last heartbeat by then, as GET /devices/:id showed it; never one of an earlier registration', async () => {
      const [owner, nextOwner] = await Promise.all([createUser(service), createUser(service)]);
      const device = await register(owner);
      const auth = await api(service, 'POST', `/devices/auth/${device.uuid}`, { token: owner.accessToken });
      const token = (auth.body as { token: string }).token;
      const seen: string[] = [];
      for (let i = 0; i < 3; i++) {
        const beat = await api(service, 'POST', `/devices/heartbeat/${device.uuid}`, { token, body: {} });
        expect(beat.status).toBe(200);
        seen.push((beat.body as { device: { lastSeenAt: string } }).device.lastSeenAt);
        await new Promise((resolve) => setTimeout(resolve, 15));
      }
      const live = (await api(service, 'GET', `/devices/${device.uuid}`, { token: owner.accessToken })).body as { lastSeenAt: string };
      expect(live.lastSeenAt).toBe(seen[2]);
      const now = (await api(service, 'GET', `/devices/${device.uuid}/state`, { token: owner.accessToken })).body as StateBody;
      expect(now.device).toMatchObject({ isOnline: true, lastSeenAt: seen[2] });
      // Between the second and the third heartbeat: the second.
      expect((await stateAt(owner, device.uuid, seen[1] as string)).device).toMatchObject({ lastSeenAt: seen[1] });
      expect((await stateAt(admin, device.uuid, seen[1] as string)).device).toMatchObject({ lastSeenAt: seen[1] });

      // Deleted and registered again: the new registration has not been seen, whatever the old one's heartbeats.
      expect((await api(service, 'DELETE', `/devices/${device.uuid}`, { token: owner.accessToken })).status).toBe(200);
      await register(nextOwner, device.uuid);
      const fresh = (await api(service, 'GET', `/devices/${device.uuid}/state`, { token: nextOwner.accessToken })).body as StateBody;
      expect(fresh.device).toMatchObject({ isOnline: false, lastSeenAt: null });
      expect(((await api(service, 'GET', `/devices/${device.uuid}/state`, { token: admin.accessToken })).body as StateBody).device).toMatchObject({ lastSeenAt: null });
    });

    test('a bad instant is 400', async () => {
      const owner = await createUser(service);
      const device = await register(owner);
      for (const at of ['yesterday', '2026-13-01', '2026-01-01T25:00:00Z']) {
        const res = await api(service, 'GET', `/devices/${device.uuid}/state?at=${encodeURIComponent(at)}`, { token: owner.accessToken });
        expect({ at, status: res.status }).toEqual({ at, status: 400 });
      }
    });
  });
});
