import { randomUUID } from 'node:crypto';
import { deviceStream, heartbeatStream } from '../../src/domain/events';
import { api, createUser, MODES, startTestService, type Mode, type TestService } from '../support/harness';

/** Devices end to end: a real service per mode, real HTTP, the whole set in both modes. */

type User = Awaited<ReturnType<typeof createUser>>;

interface Device {
  id: string;
  uuid: string;
  deviceId: string;
  name: string;
  ipAddress: string | null;
  port: string;
  isOnline: boolean;
  lastSeenAt?: string | null;
  metadata: Record<string, unknown> | null;
  createdAt: string;
  updatedAt: string;
  role?: string | null;
  users?: Array<{ id: string; email: string; role: string }>;
}

interface ListBody {
  data: Array<{ id: string; uuid: string; deviceId: string; name: string; isOnline: boolean; lastSeenAt: string | null; role: string }>;
  meta: { total: number; page: number; limit: number; totalPages: number };
}

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

const errorOf = (status: number, message: string, error: string) => ({ statusCode: status, message, error });
const notFound = errorOf(404, 'Device not found', 'Not Found');
const revoked = errorOf(401, 'Token has been revoked', 'Unauthorized');

function claimsOf(token: string): Record<string, unknown> {
  const payload = token.split('.')[1] ?? '';
  return JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as Record<string, unknown>;
}

async function streamTypes(service: TestService, stream: string): Promise<string[]> {
  const types: string[] = [];
  for await (const event of service.eventStore.readStream(stream)) types.push(event.type);
  return types;
}

describe.each<Mode>(MODES)('devices (%s mode)', (mode) => {
  let service: TestService;

  beforeAll(async () => {
    service = await startTestService(mode);
  }, 60_000);
  afterAll(async () => {
    await service?.stop();
  });

  const register = async (owner: User, fields: Record<string, unknown> = {}, on: TestService = service): Promise<Device> => {
    const res = await api(on, 'POST', '/devices/register', {
      token: owner.accessToken,
      body: { uuid: randomUUID(), deviceId: `HUB-${randomUUID().slice(0, 8)}`, name: 'Hub', ...fields },
    });
    if (res.status !== 201) throw new Error(`register answered ${res.status}: ${JSON.stringify(res.body)}`);
    return res.body as Device;
  };
  const link = (device: Device, by: User, email: string, role: string) =>
    api(service, 'POST', `/devices/${device.id}/link`, { token: by.accessToken, body: { email, role } });
  const deviceToken = async (device: Device, owner: User): Promise<string> => {
    const res = await api(service, 'POST', `/devices/auth/${device.uuid}`, { token: owner.accessToken });
    expect(res.status).toBe(201);
    return (res.body as { token: string }).token;
  };
  const heartbeat = (uuid: string, token: string, body?: unknown, on: TestService = service) =>
    api(on, 'POST', `/devices/heartbeat/${uuid}`, { token, ...(body !== undefined ? { body } : {}) });
  const list = async (user: User, query = ''): Promise<ListBody> => {
    const res = await api(service, 'GET', `/devices${query}`, { token: user.accessToken });
    if (res.status !== 200) throw new Error(`GET /devices${query} answered ${res.status}: ${JSON.stringify(res.body)}`);
    return res.body as ListBody;
  };

  describe('POST /devices/register', () => {
    test('answers 201 with the full device, offline, owned by the caller', async () => {
      const owner = await createUser(service);
      const uuid = randomUUID();
      const res = await api(service, 'POST', '/devices/register', {
        token: owner.accessToken,
        body: { uuid, deviceId: 'HUB-0001', name: 'Living room', ipAddress: '192.168.1.20', metadata: { fw: '1.2.3' } },
      });
      expect(res.status).toBe(201);
      expect(res.body).toEqual({
        id: expect.stringMatching(UUID),
        uuid,
        deviceId: 'HUB-0001',
        name: 'Living room',
        ipAddress: '192.168.1.20',
        port: '8123',
        isOnline: false,
        metadata: { fw: '1.2.3' },
        createdAt: expect.stringMatching(ISO),
        updatedAt: expect.stringMatching(ISO),
      });
      const device = res.body as Device;
      expect(device.id).not.toBe(uuid);

      // Read-your-writes: the GET right after sees it, by uuid and by internal id.
      for (const key of [uuid, device.id]) {
        const got = await api(service, 'GET', `/devices/${key}`, { token: owner.accessToken });
        expect(got.status).toBe(200);
        expect(got.body).toEqual({
          ...device,
          lastSeenAt: null,
          role: 'owner',
          users: [{ id: owner.id, email: owner.email, role: 'owner' }],
        });
      }
    });

    test('nullable fields are null when not given; the port is kept when given', async () => {
      const owner = await createUser(service);
      const device = await register(owner, { port: '9000' });
      expect(device).toMatchObject({ ipAddress: null, metadata: null, port: '9000' });
    });

    test('a uuid already registered is 409 Device already registered, whatever its case', async () => {
      const [owner, other] = await Promise.all([createUser(service), createUser(service)]);
      const device = await register(owner);
      for (const [who, uuid] of [
        [owner, device.uuid],
        [other, device.uuid.toUpperCase()],
      ] as const) {
        const res = await api(service, 'POST', '/devices/register', { token: who.accessToken, body: { uuid, deviceId: 'X', name: 'X' } });
        expect(res.status).toBe(409);
        expect(res.body).toEqual(errorOf(409, 'Device already registered', 'Conflict'));
      }
    });

    test('validation: messages per field, 400', async () => {
      const owner = await createUser(service);
      const res = await api(service, 'POST', '/devices/register', { token: owner.accessToken, body: { uuid: 'not-a-uuid', name: '' } });
      expect(res.status).toBe(400);
      const body = res.body as { statusCode: number; error: string; message: string[]; details: Array<{ field: string; message: string }> };
      expect(body.statusCode).toBe(400);
      expect(body.error).toBe('Bad Request');
      expect(body.message).toEqual(expect.arrayContaining(['uuid must be a UUID', 'name should not be empty', 'deviceId should not be empty']));
      expect(body.details).toEqual(expect.arrayContaining([{ field: 'uuid', message: 'uuid must be a UUID' }]));
    });

    test('limits and types: lengths, metadata size and depth, operator objects are 400', async () => {
      const owner = await createUser(service);
      const nest = (levels: number): Record<string, unknown> => (levels === 1 ? { leaf: true } : { next: nest(levels - 1) });
      const valid = { uuid: randomUUID(), deviceId: 'HUB', name: 'Hub' };
      const cases: Array<[Record<string, unknown>, string]> = [
        [{ name: 'n'.repeat(101) }, 'name must be shorter than or equal to 100 characters'],
        [{ deviceId: 'd'.repeat(101) }, 'deviceId must be shorter than or equal to 100 characters'],
        [{ ipAddress: 'i'.repeat(256) }, 'ipAddress must be shorter than or equal to 255 characters'],
        [{ port: 8123 }, 'port must be a string'],
        [{ name: { $gt: '' } }, 'name must be a string'],
        [{ uuid: { $gt: '' } }, 'uuid must be a string'],
        [{ metadata: { blob: 'x'.repeat(8 * 1024) } }, 'metadata must not be larger than 8192 bytes when serialized'],
        [{ metadata: nest(6) }, 'metadata must not be nested more than 5 levels deep'],
        [{ metadata: { list: [[[[['deep']]]]] } }, 'metadata must not be nested more than 5 levels deep'],
        [{ metadata: ['not', 'an', 'object'] }, 'metadata must be an object'],
        [{ metadata: 'text' }, 'metadata must be an object'],
      ];
      for (const [override, message] of cases) {
        const res = await api(service, 'POST', '/devices/register', { token: owner.accessToken, body: { ...valid, ...override } });
        expect({ override, status: res.status, message: (res.body as { message: unknown }).message }).toEqual({ override, status: 400, message: [message] });
      }
      // At the limits: accepted.
      const atLimits = await api(service, 'POST', '/devices/register', {
        token: owner.accessToken,
        body: { ...valid, name: 'n'.repeat(100), deviceId: 'd'.repeat(100), metadata: { ...nest(5), pad: 'p'.repeat(7 * 1024) } },
      });
      expect(atLimits.status).toBe(201);
    });

    test('metadata keys are free-form: a dot or a leading $ is kept as sent, through register, PUT and the read model', async () => {
      const owner = await createUser(service);
      const metadata = { 'fw.version': '1.2.3', $schema: 'https://example.com/hub', nested: { 'a.b': { $c: [1, { 'd.e': true }] } } };
      const device = await register(owner, { metadata });
      expect(device.metadata).toEqual(metadata);
      expect(((await api(service, 'GET', `/devices/${device.id}`, { token: owner.accessToken })).body as Device).metadata).toEqual(metadata);
      const changed = { ...metadata, 'fw.version': '1.2.4' };
      const put = await api(service, 'PUT', `/devices/${device.id}`, { token: owner.accessToken, body: { metadata: changed } });
      expect(put.status).toBe(200);
      expect(((await api(service, 'GET', `/devices/${device.uuid}`, { token: owner.accessToken })).body as Device).metadata).toEqual(changed);
    });

    test('needs an access token', async () => {
      const none = await api(service, 'POST', '/devices/register', { body: { uuid: randomUUID(), deviceId: 'X', name: 'X' } });
      expect(none.status).toBe(401);
      expect(none.body).toEqual(errorOf(401, 'Unauthorized', 'Unauthorized'));
      const garbage = await api(service, 'GET', '/devices', { token: 'a.b.c' });
      expect(garbage.body).toEqual(errorOf(401, 'Invalid token', 'Unauthorized'));
    });
  });

  describe('the permission table', () => {
    let owner: User;
    let editor: User;
    let viewer: User;
    let stranger: User;
    let device: Device;

    beforeAll(async () => {
      [owner, editor, viewer, stranger] = await Promise.all([createUser(service), createUser(service), createUser(service), createUser(service)]);
      device = await register(owner);
      expect((await link(device, owner, editor.email, 'editor')).status).toBe(201);
      expect((await link(device, owner, viewer.email, 'viewer')).status).toBe(201);
    });

    test('View: every linked role reads the device with its own role; no link is 404', async () => {
      for (const [who, role] of [
        [owner, 'owner'],
        [editor, 'editor'],
        [viewer, 'viewer'],
      ] as const) {
        const res = await api(service, 'GET', `/devices/${device.uuid}`, { token: who.accessToken });
        expect(res.status).toBe(200);
        expect((res.body as Device).role).toBe(role);
        expect((await list(who)).data.map((d) => [d.uuid, d.role])).toEqual([[device.uuid, role]]);
      }
      const hidden = await api(service, 'GET', `/devices/${device.uuid}`, { token: stranger.accessToken });
      expect(hidden.status).toBe(404);
      expect(hidden.body).toEqual(notFound);
      expect((await list(stranger)).data).toEqual([]);
      const users = (await api(service, 'GET', `/devices/${device.id}`, { token: viewer.accessToken })).body as Device;
      expect(users.users).toEqual(
        expect.arrayContaining([
          { id: owner.id, email: owner.email, role: 'owner' },
          { id: editor.id, email: editor.email, role: 'editor' },
          { id: viewer.id, email: viewer.email, role: 'viewer' },
        ]),
      );
      expect(users.users).toHaveLength(3);
    });

    test('Settings (PUT): owner 200, editor and viewer 403, no link 404', async () => {
      for (const who of [editor, viewer]) {
        const res = await api(service, 'PUT', `/devices/${device.id}`, { token: who.accessToken, body: { name: 'Mine now' } });
        expect(res.status).toBe(403);
        expect(res.body).toEqual(errorOf(403, 'Only the device owner can update device settings', 'Forbidden'));
      }
      const hidden = await api(service, 'PUT', `/devices/${device.id}`, { token: stranger.accessToken, body: { name: 'Mine now' } });
      expect(hidden.body).toEqual(notFound);
      const ok = await api(service, 'PUT', `/devices/${device.id}`, { token: owner.accessToken, body: { name: 'Kitchen' } });
      expect(ok.status).toBe(200);
    });

    test('Share (link): editor and viewer 403, no link 404', async () => {
      const target = await createUser(service);
      for (const who of [editor, viewer]) expect((await link(device, who, target.email, 'viewer')).status).toBe(403);
      expect((await link(device, stranger, target.email, 'viewer')).body).toEqual(notFound);
    });

    test('unlink of someone else: editor and viewer 403, no link 404', async () => {
      for (const who of [editor, viewer]) {
        const res = await api(service, 'DELETE', `/devices/${device.id}/users/${owner.id}`, { token: who.accessToken });
        expect(res.status).toBe(403);
      }
      const hidden = await api(service, 'DELETE', `/devices/${device.id}/users/${viewer.id}`, { token: stranger.accessToken });
      expect(hidden.body).toEqual(notFound);
    });

    test('device token: editor and viewer 403, no link 404, owner 201', async () => {
      for (const who of [editor, viewer]) {
        expect((await api(service, 'POST', `/devices/auth/${device.uuid}`, { token: who.accessToken })).status).toBe(403);
      }
      expect((await api(service, 'POST', `/devices/auth/${device.uuid}`, { token: stranger.accessToken })).body).toEqual(notFound);
      expect((await api(service, 'POST', `/devices/auth/${device.uuid}`, { token: owner.accessToken })).status).toBe(201);
    });

    test('Delete: editor and viewer 403, no link 404 (the owner deletes in its own test)', async () => {
      for (const who of [editor, viewer]) expect((await api(service, 'DELETE', `/devices/${device.id}`, { token: who.accessToken })).status).toBe(403);
      expect((await api(service, 'DELETE', `/devices/${device.id}`, { token: stranger.accessToken })).body).toEqual(notFound);
      expect((await api(service, 'GET', `/devices/${device.id}`, { token: owner.accessToken })).status).toBe(200);
    });

    test('a linked user removes themself; the device is then hidden from them', async () => {
      const res = await api(service, 'DELETE', `/devices/${device.id}/users/${viewer.id}`, { token: viewer.accessToken });
      expect(res.status).toBe(200);
      expect(res.body).toEqual({ success: true });
      expect((await api(service, 'GET', `/devices/${device.id}`, { token: viewer.accessToken })).body).toEqual(notFound);
      expect((await list(viewer)).data).toEqual([]);
      // Not linked any more: removing again is a 404 for the owner.
      const again = await api(service, 'DELETE', `/devices/${device.id}/users/${viewer.id}`, { token: owner.accessToken });
      expect(again.status).toBe(404);
    });

    test('an admin reads any device, with role null when not linked; nothing else', async () => {
      const admin = await createUser(service, { role: 'admin' });
      const res = await api(service, 'GET', `/devices/${device.uuid}`, { token: admin.accessToken });
      expect(res.status).toBe(200);
      expect((res.body as Device).role).toBeNull();
      expect((await list(admin)).data).toEqual([]);
      expect((await api(service, 'PUT', `/devices/${device.uuid}`, { token: admin.accessToken, body: { name: 'x' } })).status).toBe(404);
    });
  });

  describe('PUT /devices/:id', () => {
    test('answers the changed device; GET reflects it at once', async () => {
      const owner = await createUser(service);
      const device = await register(owner);
      const res = await api(service, 'PUT', `/devices/${device.uuid}`, {
        token: owner.accessToken,
        body: { name: 'Garage', ipAddress: '10.0.0.9', port: '8443', metadata: { room: 'garage' } },
      });
      expect(res.status).toBe(200);
      expect(res.body).toEqual({
        id: device.id,
        uuid: device.uuid,
        deviceId: device.deviceId,
        name: 'Garage',
        ipAddress: '10.0.0.9',
        port: '8443',
        isOnline: false,
        metadata: { room: 'garage' },
        updatedAt: expect.stringMatching(ISO),
      });
      const got = (await api(service, 'GET', `/devices/${device.id}`, { token: owner.accessToken })).body as Device;
      expect(got).toMatchObject({ name: 'Garage', ipAddress: '10.0.0.9', port: '8443', metadata: { room: 'garage' } });
      expect(got.updatedAt).toBe((res.body as Device).updatedAt);
    });

    test('validates like register; an unknown id is 404', async () => {
      const owner = await createUser(service);
      const device = await register(owner);
      const bad = await api(service, 'PUT', `/devices/${device.id}`, { token: owner.accessToken, body: { name: '', metadata: null } });
      expect(bad.status).toBe(400);
      expect((bad.body as { message: string[] }).message).toEqual(expect.arrayContaining(['name should not be empty']));
      const unknown = await api(service, 'PUT', `/devices/${randomUUID()}`, { token: owner.accessToken, body: { name: 'x' } });
      expect(unknown.body).toEqual(notFound);
      const notAnId = await api(service, 'GET', '/devices/not-an-id', { token: owner.accessToken });
      expect(notAnId.body).toEqual(notFound);
    });
  });

  describe('POST /devices/:id/link and DELETE /devices/:id/users/:userId', () => {
    test('new link 201, role change 200, same role 200, reactivation 200 with the same link', async () => {
      const [owner, friend] = await Promise.all([createUser(service), createUser(service)]);
      const device = await register(owner);
      const created = await link(device, owner, friend.email.toUpperCase(), 'viewer');
      expect(created.status).toBe(201);
      expect(created.body).toEqual({
        success: true,
        deviceUser: { id: expect.stringMatching(UUID), userId: friend.id, deviceId: device.id, role: 'viewer', isActive: true, createdAt: expect.stringMatching(ISO) },
      });
      const first = (created.body as { deviceUser: { id: string; createdAt: string } }).deviceUser;

      const changed = await link(device, owner, friend.email, 'editor');
      expect(changed.status).toBe(200);
      expect((changed.body as { deviceUser: unknown }).deviceUser).toEqual({ ...first, userId: friend.id, deviceId: device.id, role: 'editor', isActive: true });
      expect((await link(device, owner, friend.email, 'editor')).status).toBe(200);

      expect((await api(service, 'DELETE', `/devices/${device.id}/users/${friend.id}`, { token: owner.accessToken })).status).toBe(200);
      const reactivated = await link(device, owner, friend.email, 'viewer');
      expect(reactivated.status).toBe(200);
      expect((reactivated.body as { deviceUser: unknown }).deviceUser).toEqual({ ...first, userId: friend.id, deviceId: device.id, role: 'viewer', isActive: true });
      expect((await list(friend)).data.map((d) => d.role)).toEqual(['viewer']);
    });

    test('an unknown e-mail is 404 User not found; a bad body is 400', async () => {
      const owner = await createUser(service);
      const device = await register(owner);
      const res = await link(device, owner, `nobody.${randomUUID()}@example.com`, 'viewer');
      expect(res.status).toBe(404);
      expect(res.body).toEqual(errorOf(404, 'User not found', 'Not Found'));
      const bad = await link(device, owner, 'not-an-email', 'admin');
      expect(bad.status).toBe(400);
      expect((bad.body as { message: string[] }).message).toEqual(
        expect.arrayContaining(['email must be an email', 'role must be one of the following values: owner, editor, viewer']),
      );
      expect((await api(service, 'POST', `/devices/${device.id}/link`, { token: owner.accessToken, body: { email: { $gt: '' }, role: 'viewer' } })).status).toBe(400);
    });

    test('a device keeps at least one owner', async () => {
      const [owner, second] = await Promise.all([createUser(service), createUser(service)]);
      const device = await register(owner);
      const lastOwner = errorOf(409, 'A device must keep at least one owner', 'Conflict');
      expect((await link(device, owner, owner.email, 'viewer')).body).toEqual(lastOwner);
      expect((await api(service, 'DELETE', `/devices/${device.id}/users/${owner.id}`, { token: owner.accessToken })).body).toEqual(lastOwner);

      expect((await link(device, owner, second.email, 'owner')).status).toBe(201);
      // Two owners: one may step down and the other may then remove them.
      expect((await link(device, second, owner.email, 'editor')).status).toBe(200);
      expect((await api(service, 'DELETE', `/devices/${device.id}/users/${owner.id}`, { token: second.accessToken })).status).toBe(200);
      expect((await api(service, 'DELETE', `/devices/${device.id}/users/${second.id}`, { token: second.accessToken })).body).toEqual(lastOwner);
    });
  });

  describe('device tokens and heartbeats', () => {
    test('POST /devices/auth/:uuid answers a device token with the device claims', async () => {
      const owner = await createUser(service);
      const device = await register(owner);
      const res = await api(service, 'POST', `/devices/auth/${device.uuid}`, { token: owner.accessToken });
      expect(res.status).toBe(201);
      expect(res.body).toEqual({ token: expect.any(String), expiresIn: 86400 });
      const claims = claimsOf((res.body as { token: string }).token);
      expect(claims).toMatchObject({ sub: device.id, deviceUuid: device.uuid, type: 'device', gen: 1 });
      expect((claims.exp as number) - (claims.iat as number)).toBe(86400);
    });

    test('a heartbeat brings the device online and answers that heartbeat\'s values', async () => {
      const owner = await createUser(service);
      const device = await register(owner, { ipAddress: '192.168.0.2' });
      const token = await deviceToken(device, owner);

      const before = Date.now();
      const res = await heartbeat(device.uuid, token);
      expect(res.status).toBe(200);
      expect(res.body).toEqual({ success: true, device: { id: device.id, isOnline: true, lastSeenAt: expect.stringMatching(ISO) } });
      const lastSeenAt = (res.body as { device: { lastSeenAt: string } }).device.lastSeenAt;
      expect(Date.parse(lastSeenAt)).toBeGreaterThanOrEqual(before - 1000);

      const got = (await api(service, 'GET', `/devices/${device.id}`, { token: owner.accessToken })).body as Device;
      expect(got).toMatchObject({ isOnline: true, lastSeenAt, ipAddress: '192.168.0.2', updatedAt: device.updatedAt });

      // A second heartbeat with changes: lastSeenAt moves, ipAddress and metadata change.
      const second = await heartbeat(device.uuid, token, { ipAddress: '192.168.0.3', metadata: { uptime: 42 } });
      expect(second.status).toBe(200);
      const secondSeen = (second.body as { device: { lastSeenAt: string } }).device.lastSeenAt;
      const after = (await api(service, 'GET', `/devices/${device.id}`, { token: owner.accessToken })).body as Device;
      expect(after).toMatchObject({ isOnline: true, lastSeenAt: secondSeen, ipAddress: '192.168.0.3', metadata: { uptime: 42 } });
      const [item] = (await list(owner)).data;
      expect(item).toMatchObject({ uuid: device.uuid, isOnline: true, lastSeenAt: secondSeen });

      // Presence transitions go to the device stream, every heartbeat to its own stream.
      expect(await streamTypes(service, deviceStream(device.uuid))).toEqual(['DeviceRegistered', 'UserLinked', 'DeviceTokenIssued', 'DeviceWentOnline', 'DeviceUpdated']);
      expect(await streamTypes(service, heartbeatStream(device.uuid))).toEqual(['HeartbeatReceived', 'HeartbeatReceived']);
    });

    test('a token for another uuid is 403; a user token, none, or a bad body is refused', async () => {
      const owner = await createUser(service);
      const [mine, other] = await Promise.all([register(owner), register(owner)]);
      const token = await deviceToken(mine, owner);
      const wrong = await heartbeat(other.uuid, token);
      expect(wrong.status).toBe(403);
      expect(wrong.body).toEqual(errorOf(403, 'Device token does not belong to this device', 'Forbidden'));
      expect((await heartbeat(mine.uuid, owner.accessToken)).body).toEqual(errorOf(401, 'Invalid token', 'Unauthorized'));
      expect((await api(service, 'POST', `/devices/heartbeat/${mine.uuid}`)).status).toBe(401);
      const bad = await heartbeat(mine.uuid, token, { metadata: { blob: 'x'.repeat(9000) }, ipAddress: { $gt: '' } });
      expect(bad.status).toBe(400);
      // A device token is no access token either.
      expect((await api(service, 'GET', '/devices', { token })).body).toEqual(errorOf(401, 'Invalid token', 'Unauthorized'));
    });

    test('a newer device token revokes the older one', async () => {
      const owner = await createUser(service);
      const device = await register(owner);
      const older = await deviceToken(device, owner);
      expect((await heartbeat(device.uuid, older)).status).toBe(200);
      const newer = await deviceToken(device, owner);
      expect(claimsOf(newer).gen).toBe(2);
      const refused = await heartbeat(device.uuid, older);
      expect(refused.status).toBe(401);
      expect(refused.body).toEqual(revoked);
      expect((await heartbeat(device.uuid, newer)).status).toBe(200);
    });
  });

  describe('DELETE /devices/:id', () => {
    test('removes the device from every read model and revokes its tokens; the uuid registers again in the same stream', async () => {
      const [owner, friend] = await Promise.all([createUser(service), createUser(service)]);
      const device = await register(owner);
      expect((await link(device, owner, friend.email, 'editor')).status).toBe(201);
      const token = await deviceToken(device, owner);
      expect((await heartbeat(device.uuid, token)).status).toBe(200);

      const res = await api(service, 'DELETE', `/devices/${device.id}`, { token: owner.accessToken });
      expect(res.status).toBe(200);
      expect(res.body).toEqual({ success: true });
      for (const who of [owner, friend]) {
        expect((await api(service, 'GET', `/devices/${device.uuid}`, { token: who.accessToken })).body).toEqual(notFound);
        expect((await list(who)).data).toEqual([]);
      }
      const admin = await createUser(service, { role: 'admin' });
      expect((await api(service, 'GET', `/devices/${device.uuid}`, { token: admin.accessToken })).body).toEqual(notFound);
      expect((await heartbeat(device.uuid, token)).body).toEqual(revoked);
      expect((await api(service, 'DELETE', `/devices/${device.id}`, { token: owner.accessToken })).body).toEqual(notFound);

      // Registered again, by someone else: a new id, a fresh start, the same stream.
      const again = await register(friend, { uuid: device.uuid, name: 'Second life' });
      expect(again.id).not.toBe(device.id);
      expect(again).toMatchObject({ uuid: device.uuid, name: 'Second life', isOnline: false });
      expect((await api(service, 'GET', `/devices/${device.uuid}`, { token: owner.accessToken })).body).toEqual(notFound);
      const got = (await api(service, 'GET', `/devices/${device.uuid}`, { token: friend.accessToken })).body as Device;
      expect(got).toMatchObject({ id: again.id, role: 'owner', lastSeenAt: null, users: [{ id: friend.id, email: friend.email, role: 'owner' }] });
      expect(await streamTypes(service, deviceStream(device.uuid))).toEqual([
        'DeviceRegistered',
        'UserLinked',
        'UserLinked',
        'DeviceTokenIssued',
        'DeviceWentOnline',
        'DeviceDeleted',
        'DeviceRegistered',
        'UserLinked',
      ]);
      // The token of the first life stays revoked; a new one works.
      expect((await heartbeat(device.uuid, token)).body).toEqual(revoked);
      expect((await heartbeat(device.uuid, await deviceToken(again, friend))).status).toBe(200);
    });
  });

  describe('GET /devices', () => {
    let user: User;
    let other: User;
    /** In creation order: a (owner), b (owner, online), c (editor, online), d (viewer), e (owner). */
    const devices: Record<string, Device> = {};

    beforeAll(async () => {
      [user, other] = await Promise.all([createUser(service), createUser(service)]);
      const names = { a: 'delta', b: 'alpha', c: 'Echo', d: 'charlie', e: 'bravo' };
      for (const [key, name] of Object.entries(names)) {
        const byOther = key === 'c' || key === 'd';
        devices[key] = await register(byOther ? other : user, { name });
        if (byOther) expect((await link(devices[key] as Device, other, user.email, key === 'c' ? 'editor' : 'viewer')).status).toBe(201);
        await new Promise((r) => setTimeout(r, 5)); // distinct createdAt
      }
      for (const key of ['c', 'b']) {
        const device = devices[key] as Device;
        const owner = key === 'c' ? other : user;
        expect((await heartbeat(device.uuid, await deviceToken(device, owner))).status).toBe(200);
      }
    });

    const keysOf = (body: ListBody): string[] => body.data.map((item) => Object.entries(devices).find(([, d]) => d.uuid === item.uuid)?.[0] ?? '?');

    test('defaults: newest first, page 1 of 20, items in the list shape', async () => {
      const body = await list(user);
      expect(keysOf(body)).toEqual(['e', 'd', 'c', 'b', 'a']);
      expect(body.meta).toEqual({ total: 5, page: 1, limit: 20, totalPages: 1 });
      const a = devices.a as Device;
      expect(body.data[4]).toEqual({ id: a.id, uuid: a.uuid, deviceId: a.deviceId, name: 'delta', isOnline: false, lastSeenAt: null, role: 'owner' });
      expect(body.data.map((d) => d.role)).toEqual(['owner', 'viewer', 'editor', 'owner', 'owner']);
    });

    test('pagination meta', async () => {
      const page2 = await list(user, '?limit=2&page=2');
      expect(keysOf(page2)).toEqual(['c', 'b']);
      expect(page2.meta).toEqual({ total: 5, page: 2, limit: 2, totalPages: 3 });
      const page3 = await list(user, '?limit=2&page=3');
      expect(keysOf(page3)).toEqual(['a']);
      const beyond = await list(user, '?limit=2&page=9');
      expect(beyond.data).toEqual([]);
      expect(beyond.meta).toEqual({ total: 5, page: 9, limit: 2, totalPages: 3 });
      expect((await list(user, '?limit=100')).meta.limit).toBe(100);
    });

    test('filters: online, role (comma list), createdAfter / createdBefore', async () => {
      expect(keysOf(await list(user, '?online=true'))).toEqual(['c', 'b']);
      expect(keysOf(await list(user, '?online=false'))).toEqual(['e', 'd', 'a']);
      expect(keysOf(await list(user, '?role=owner'))).toEqual(['e', 'b', 'a']);
      expect(keysOf(await list(user, '?role=editor,viewer'))).toEqual(['d', 'c']);
      expect(keysOf(await list(user, '?role=viewer&online=false'))).toEqual(['d']);
      const b = devices.b as Device;
      const d = devices.d as Device;
      expect(keysOf(await list(user, `?createdAfter=${b.createdAt}`))).toEqual(['e', 'd', 'c', 'b']);
      expect(keysOf(await list(user, `?createdBefore=${encodeURIComponent(b.createdAt)}`))).toEqual(['b', 'a']);
      expect(keysOf(await list(user, `?createdAfter=${b.createdAt}&createdBefore=${d.createdAt}&order=asc`))).toEqual(['b', 'c', 'd']);
      expect((await list(user, '?createdAfter=2000-01-01')).meta.total).toBe(5);
      expect((await list(user, '?createdBefore=2000-01-01T00:00:00%2B02:00')).meta.total).toBe(0);
      const filtered = await list(user, '?role=owner&limit=1');
      expect(filtered.meta).toEqual({ total: 3, page: 1, limit: 1, totalPages: 3 });
    });

    test('sort and order', async () => {
      expect(keysOf(await list(user, '?order=asc'))).toEqual(['a', 'b', 'c', 'd', 'e']);
      // Names compare by code point: upper case first.
      expect(keysOf(await list(user, '?sort=name&order=asc'))).toEqual(['c', 'b', 'e', 'd', 'a']);
      expect(keysOf(await list(user, '?sort=name'))).toEqual(['a', 'd', 'e', 'b', 'c']);
      // Never seen (null) sorts first ascending, last descending.
      const bySeen = keysOf(await list(user, '?sort=lastSeenAt&order=desc'));
      expect(bySeen.slice(0, 2)).toEqual(['b', 'c']);
      expect(bySeen.slice(2).sort()).toEqual(['a', 'd', 'e']);
      expect(keysOf(await list(user, '?sort=lastSeenAt&order=asc')).slice(3)).toEqual(['c', 'b']);
      const byUpdate = keysOf(await list(user, '?sort=updatedAt&order=asc'));
      expect(byUpdate).toEqual(['a', 'b', 'c', 'd', 'e']);
    });

    test('unknown or out-of-range values are 400, never clamped', async () => {
      const cases: Array<[string, string]> = [
        ['limit=101', 'limit must not be greater than 100'],
        ['limit=0', 'limit must not be less than 1'],
        ['limit=ten', 'limit must be an integer'],
        ['page=0', 'page must not be less than 1'],
        ['page=-1', 'page must not be less than 1'],
        ['page=99999999999999999999999', 'page must not be greater than 1000000'],
        ['page=1.5', 'page must be an integer'],
        ['online=yes', 'online must be one of the following values: true, false'],
        ['sort=uuid', 'sort must be one of the following values: createdAt, updatedAt, name, lastSeenAt'],
        ['order=up', 'order must be one of the following values: asc, desc'],
        ['role=owner,admin', 'role must be a comma-separated list of: owner, editor, viewer'],
        ['role=', 'role must be a comma-separated list of: owner, editor, viewer'],
        ['createdAfter=yesterday', 'createdAfter must be a valid ISO 8601 date string'],
        ['createdBefore=2025-13-01', 'createdBefore must be a valid ISO 8601 date string'],
        ['createdAfter=2025-02-01&createdBefore=2025-01-01', 'createdAfter must not be later than createdBefore'],
        ['limit=1&limit=2', 'limit must be a string'],
        ['sort[$gt]=a&sort=name&sort=x', 'sort must be one of the following values: createdAt, updatedAt, name, lastSeenAt'],
      ];
      for (const [query, message] of cases) {
        const res = await api(service, 'GET', `/devices?${query}`, { token: user.accessToken });
        expect({ query, status: res.status, message: (res.body as { message: unknown }).message }).toEqual({ query, status: 400, message: [message] });
      }
    });
  });

  describe('MAX_DEVICES_PER_USER', () => {
    let limited: TestService;
    beforeAll(async () => {
      limited = await startTestService(mode, { MAX_DEVICES_PER_USER: '2' });
    }, 60_000);
    afterAll(async () => {
      await limited?.stop();
    });

    test('an owner of the maximum gets 409 Device limit reached; a deletion frees a place', async () => {
      const owner = await createUser(limited);
      const first = await register(owner, {}, limited);
      await register(owner, {}, limited);
      const res = await api(limited, 'POST', '/devices/register', { token: owner.accessToken, body: { uuid: randomUUID(), deviceId: 'X', name: 'Third' } });
      expect(res.status).toBe(409);
      expect(res.body).toEqual(errorOf(409, 'Device limit reached', 'Conflict'));
      expect((await api(limited, 'DELETE', `/devices/${first.id}`, { token: owner.accessToken })).status).toBe(200);
      await register(owner, {}, limited);
    });

    test('registrations racing at the limit: exactly the places left are taken, the rest get 409', async () => {
      const owner = await createUser(limited);
      const attempts = await Promise.all(
        Array.from({ length: 6 }, (_, i) => api(limited, 'POST', '/devices/register', { token: owner.accessToken, body: { uuid: randomUUID(), deviceId: `R${i}`, name: `Racer ${i}` } })),
      );
      const statuses = attempts.map((res) => res.status).sort();
      expect(statuses).toEqual([201, 201, 409, 409, 409, 409]);
      for (const res of attempts.filter((r) => r.status === 409)) expect(res.body).toEqual(errorOf(409, 'Device limit reached', 'Conflict'));
      const list = await api(limited, 'GET', '/devices', { token: owner.accessToken });
      expect((list.body as ListBody).meta.total).toBe(2);
    });
  });

  if (mode === 'distributed') {
    test('read-your-writes across two API processes sharing the stores', async () => {
      const second = await service.startAnother();
      try {
        const owner = await createUser(service);
        for (let i = 0; i < 5; i++) {
          // Alternate which process writes and which reads.
          const [writer, reader] = i % 2 === 0 ? [service, second] : [second, service];
          const device = await register(owner, { name: `hub ${i}` }, writer);
          const got = await api(reader, 'GET', `/devices/${device.uuid}`, { token: owner.accessToken });
          expect(got.status).toBe(200);

          const renamed = await api(reader, 'PUT', `/devices/${device.id}`, { token: owner.accessToken, body: { name: `renamed ${i}` } });
          expect(renamed.status).toBe(200);
          expect(((await api(writer, 'GET', `/devices/${device.id}`, { token: owner.accessToken })).body as Device).name).toBe(`renamed ${i}`);

          const tokenRes = await api(writer, 'POST', `/devices/auth/${device.uuid}`, { token: owner.accessToken });
          const beat = await heartbeat(device.uuid, (tokenRes.body as { token: string }).token, undefined, reader);
          const seen = (beat.body as { device: { lastSeenAt: string } }).device.lastSeenAt;
          expect(((await api(writer, 'GET', `/devices/${device.id}`, { token: owner.accessToken })).body as Device).lastSeenAt).toBe(seen);

          expect((await api(writer, 'DELETE', `/devices/${device.id}`, { token: owner.accessToken })).status).toBe(200);
          expect((await api(reader, 'GET', `/devices/${device.id}`, { token: owner.accessToken })).status).toBe(404);
        }
      } finally {
        await second.stop();
      }
    }, 60_000);
  }
});
