import { randomUUID } from 'node:crypto';
import { api, CRM_KEY, GENEROUS_RATE_LIMITS, MODES, startTestService, type Mode, type TestService } from '../support/harness';

/**
 * Erasures that run at the same time (decisions §11): `POST /auth/erase-customer` is
 * idempotent, so two calls for one customer both answer 200 `{erased: true, userId}`, and
 * two co-owners erased together leave no ownerless device behind.
 */
describe.each(MODES)('erasure under concurrency (%s mode)', (mode: Mode) => {
  let service: TestService;
  let nextId = 900_000 + Math.floor(Math.random() * 50_000);

  beforeAll(async () => {
    service = await startTestService(mode, { RATE_LIMITS: GENEROUS_RATE_LIMITS });
  }, 60_000);

  afterAll(async () => {
    await service?.stop();
  });

  async function customer(): Promise<{ syncId: number; id: string; email: string; token: string }> {
    const syncId = nextId++;
    const email = `erase.race.${syncId}@example.com`;
    const res = await api(service, 'POST', '/auth/sync-customer', {
      headers: { 'X-Internal-Api-Key': CRM_KEY },
      body: { id: syncId, first_name: 'Race', last_name: 'Person', email, active: true },
    });
    expect(res.status).toBe(201);
    const user = (res.body as { user: { id: string } }).user;
    return { syncId, id: user.id, email, token: service.tokens.signAccess({ sub: user.id, email, role: 'user' }) };
  }

  async function hub(token: string): Promise<string> {
    const uuid = randomUUID();
    const res = await api(service, 'POST', '/devices/register', { token, body: { uuid, deviceId: `dev-${uuid}`, name: 'Race hub' } });
    expect(res.status).toBe(201);
    return uuid;
  }

  const erase = (syncId: number): ReturnType<typeof api> =>
    api(service, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id: syncId } });

  test('two concurrent erase-customer calls for one customer with a hub both answer 200 with the user id', async () => {
    const person = await customer();
    for (let i = 0; i < 3; i++) await hub(person.token);
    const answers = await Promise.all([erase(person.syncId), erase(person.syncId), erase(person.syncId)]);
    for (const answer of answers) expect(answer).toMatchObject({ status: 200, body: { erased: true, userId: person.id } });
  });

  test('two co-owners erased at the same time: both 200, and their shared device is deleted, not left without an owner', async () => {
    const first = await customer();
    const second = await customer();
    const shared = await hub(first.token);
    expect((await api(service, 'POST', `/devices/${shared}/link`, { token: first.token, body: { email: second.email, role: 'owner' } })).status).toBe(201);
    const answers = await Promise.all([erase(first.syncId), erase(second.syncId)]);
    expect(answers.map((a) => a.status)).toEqual([200, 200]);
    const events: string[] = [];
    for await (const recorded of service.eventStore.readStream(`device-${shared}`)) events.push(recorded.type);
    expect(events).toContain('DeviceDeleted');
  });
});
