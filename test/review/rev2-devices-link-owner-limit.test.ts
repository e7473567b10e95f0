import { randomUUID } from 'node:crypto';
import { api, createUser, MODES, startTestService, type TestService } from '../support/harness';

/**
 * decisions §4: "A user may own at most `MAX_DEVICES_PER_USER` (default 100) devices: beyond
 * that 409 `Device limit reached`." Only registration checks it: a user who owns the maximum
 * can still be made owner of one more device by its owner (`POST /devices/:id/link` with role
 * owner, a new link or a role change), and then owns more than the limit.
 */
describe.each(MODES)('a user at MAX_DEVICES_PER_USER made owner of one more device (%s)', (mode) => {
  let service: TestService;
  beforeAll(async () => {
    service = await startTestService(mode, { MAX_DEVICES_PER_USER: '2' });
  }, 120_000);
  afterAll(async () => {
    await service?.stop();
  });

  const register = async (token: string): Promise<string> => {
    const uuid = randomUUID();
    expect((await api(service, 'POST', '/devices/register', { token, body: { uuid, deviceId: 'HUB', name: 'Hub' } })).status).toBe(201);
    return uuid;
  };
  const owned = async (token: string): Promise<number> =>
    ((await api(service, 'GET', '/devices?role=owner&limit=100', { token })).body as { meta: { total: number } }).meta.total;
  const limitReached = { statusCode: 409, message: 'Device limit reached', error: 'Conflict' };

  it('a new owner link is refused 409 Device limit reached', async () => {
    const full = await createUser(service);
    const other = await createUser(service);
    await register(full.accessToken);
    await register(full.accessToken);
    expect((await api(service, 'POST', '/devices/register', { token: full.accessToken, body: { uuid: randomUUID(), deviceId: 'HUB', name: 'Hub' } })).body).toEqual(limitReached);

    const shared = await register(other.accessToken);
    const link = await api(service, 'POST', `/devices/${shared}/link`, { token: other.accessToken, body: { email: full.email, role: 'owner' } });
    // Today: 201, and the user owns 3 devices at a limit of 2.
    expect({ status: link.status, body: link.body, owned: await owned(full.accessToken) }).toEqual({ status: 409, body: limitReached, owned: 2 });
  });

  it('a viewer link raised to owner is refused 409 Device limit reached', async () => {
    const full = await createUser(service);
    const other = await createUser(service);
    await register(full.accessToken);
    await register(full.accessToken);
    const shared = await register(other.accessToken);
    expect((await api(service, 'POST', `/devices/${shared}/link`, { token: other.accessToken, body: { email: full.email, role: 'viewer' } })).status).toBe(201);
    const raise = await api(service, 'POST', `/devices/${shared}/link`, { token: other.accessToken, body: { email: full.email, role: 'owner' } });
    // Today: 200, and the user owns 3 devices at a limit of 2.
    expect({ status: raise.status, body: raise.body, owned: await owned(full.accessToken) }).toEqual({ status: 409, body: limitReached, owned: 2 });
  });
});
