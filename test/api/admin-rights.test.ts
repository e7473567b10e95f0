import { randomUUID } from 'node:crypto';
import { api, createUser, CRM_KEY, MODES, startTestService, type Mode, type TestService } from '../support/harness';

/**
 * Admin rights (decisions §3, §9) follow the account's e-mail in ADMIN_EMAILS now, not the
 * `role` claim of an access token signed while the e-mail was listed: when the CRM moves an
 * admin to another e-mail, the same token stops reading other households' devices at once
 * (once the change is projected), on every admin route.
 */
describe.each<Mode>(MODES)('admin rights follow the current e-mail (%s mode)', (mode) => {
  const ADMIN = 'auditor@example.com';
  const SYNC_ID = 4_200_000 + Math.floor(Math.random() * 100_000);
  let service: TestService;

  beforeAll(async () => {
    service = await startTestService(mode, { ADMIN_EMAILS: ADMIN });
  }, 60_000);
  afterAll(async () => {
    await service?.stop();
  });

  const syncAdmin = async (email: string): Promise<string> => {
    const res = await api(service, 'POST', '/auth/sync-customer', {
      headers: { 'X-Internal-Api-Key': CRM_KEY },
      body: { id: SYNC_ID, first_name: 'Ada', last_name: 'Auditor', email, active: true },
    });
    expect([200, 201]).toContain(res.status);
    return (res.body as { user: { id: string } }).user.id;
  };

  /** Polls until `check` holds: distributed mode projects the CRM's change a moment later. */
  const until = async (check: () => Promise<boolean>, what: string): Promise<void> => {
    const deadline = Date.now() + 15_000;
    while (!(await check())) {
      if (Date.now() > deadline) throw new Error(`${what} did not hold within 15 s`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  };

  test('an admin token signed before the CRM changed the e-mail loses the admin routes', async () => {
    const adminId = await syncAdmin(ADMIN);
    const token = service.tokens.signAccess({ sub: adminId, email: ADMIN, role: 'admin' });
    const owner = await createUser(service);
    const uuid = randomUUID();
    const registered = await api(service, 'POST', '/devices/register', { token: owner.accessToken, body: { uuid, deviceId: 'HUB-1', name: 'Hub' } });
    expect(registered.status).toBe(201);

    // While listed, the token reads another household's device and its history.
    await until(async () => (await api(service, 'GET', `/devices/${uuid}`, { token })).status === 200, 'admin read');
    expect((await api(service, 'GET', `/devices/${uuid}/history`, { token })).status).toBe(200);
    expect((await api(service, 'GET', `/devices/${uuid}/state`, { token })).status).toBe(200);

    // The CRM moves the account to an e-mail that is not an admin's; the token is unchanged.
    await syncAdmin('no-longer-admin@example.com');
    await until(async () => (await api(service, 'GET', `/devices/${uuid}`, { token })).status === 404, 'admin rights ended');
    expect((await api(service, 'GET', `/devices/${uuid}/history`, { token })).status).toBe(404);
    expect((await api(service, 'GET', `/devices/${uuid}/state`, { token })).status).toBe(404);
    const rebuild = await api(service, 'POST', '/admin/read-models/rebuild', { token });
    expect(rebuild.status).toBe(403);
    expect(rebuild.body).toMatchObject({ message: 'Admin role required' });
    // The owner keeps its own device.
    expect((await api(service, 'GET', `/devices/${uuid}`, { token: owner.accessToken })).status).toBe(200);
  });
});
