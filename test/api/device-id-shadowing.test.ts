import { randomUUID } from 'node:crypto';
import { DEVICES_COLLECTION, type DeviceDoc } from '../../src/projections/devices';
import { api, createUser, MODES, startTestService, type Mode, type TestService } from '../support/harness';

/**
 * An `:id` never resolves to a device other than the one it names (decisions §4): the
 * internal id is tried before the uuid, and a uuid equal to another device's internal id
 * cannot be registered (409 `Device already registered`). Two users: the victim owns a
 * hub; the attacker tries to register a look-alike whose uuid is the victim hub's id.
 */

const ALREADY = { statusCode: 409, message: 'Device already registered', error: 'Conflict' };

describe.each<Mode>(MODES)('device id shadowing (%s mode)', (mode) => {
  let service: TestService;
  beforeAll(async () => {
    service = await startTestService(mode);
  }, 60_000);
  afterAll(async () => {
    await service?.stop();
  });

  const register = (token: string, uuid: string, name: string) =>
    api(service, 'POST', '/devices/register', { token, body: { uuid, deviceId: `HUB-${randomUUID().slice(0, 8)}`, name } });

  test("registering a uuid equal to another device's internal id is 409, in any letter case; the victim's id still names its hub", async () => {
    const victim = await createUser(service);
    const attacker = await createUser(service);
    const registered = await register(victim.accessToken, randomUUID(), 'Victim hub');
    expect(registered.status).toBe(201);
    const hub = registered.body as { id: string; uuid: string };

    for (const uuid of [hub.id, hub.id.toUpperCase()]) {
      const lookAlike = await register(attacker.accessToken, uuid, 'Look-alike');
      expect(lookAlike.status).toBe(409);
      expect(lookAlike.body).toEqual(ALREADY);
    }
    // Nor may the victim shadow its own hub.
    expect((await register(victim.accessToken, hub.id, 'Mine too')).status).toBe(409);

    const byId = await api(service, 'GET', `/devices/${hub.id}`, { token: victim.accessToken });
    expect(byId.status).toBe(200);
    expect(byId.body).toMatchObject({ id: hub.id, uuid: hub.uuid, name: 'Victim hub' });
    const put = await api(service, 'PUT', `/devices/${hub.id}`, { token: victim.accessToken, body: { name: 'Renamed' } });
    expect(put.status).toBe(200);
    expect(put.body).toMatchObject({ id: hub.id, uuid: hub.uuid, name: 'Renamed' });
    // The attacker learns nothing of the victim's hub.
    expect((await api(service, 'GET', `/devices/${hub.id}`, { token: attacker.accessToken })).status).toBe(404);
  });

  test('a look-alike that exists already (written before this rule) never shadows: the internal id wins', async () => {
    const victim = await createUser(service);
    const attacker = await createUser(service);
    const hub = (await register(victim.accessToken, randomUUID(), 'Victim hub')).body as { id: string; uuid: string };
    const own = (await register(attacker.accessToken, randomUUID(), 'Look-alike')).body as { id: string; uuid: string };
    // The attacker's document as an older release could have stored it: its uuid is the victim hub's id.
    const devices = service.readStore.collection<DeviceDoc>(DEVICES_COLLECTION);
    const doc = await devices.get(own.uuid);
    if (doc === null) throw new Error('the look-alike is not in the read model');
    expect(await devices.put({ ...doc, id: hub.id, uuid: hub.id }, '~')).toBe(true);
    // The attacker links the victim to the look-alike.
    const link = await api(service, 'POST', `/devices/${hub.id}/link`, { token: attacker.accessToken, body: { email: victim.email, role: 'viewer' } });
    expect(link.status).toBe(404);

    const byId = await api(service, 'GET', `/devices/${hub.id}`, { token: victim.accessToken });
    expect(byId.status).toBe(200);
    expect(byId.body).toMatchObject({ id: hub.id, uuid: hub.uuid, name: 'Victim hub' });
    const put = await api(service, 'PUT', `/devices/${hub.id}`, { token: victim.accessToken, body: { name: 'Still mine' } });
    expect(put.status).toBe(200);
    expect(put.body).toMatchObject({ id: hub.id, uuid: hub.uuid, name: 'Still mine' });
  });
});
