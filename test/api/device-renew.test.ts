import jwt from 'jsonwebtoken';
import { api, createUser, GENEROUS_RATE_LIMITS, MODES, startTestService, type Mode, type TestService } from '../support/harness';
import { deleteHub, deviceToken, registerHub } from '../support/tunnel';

/** A hub renews its own token (decisions §4): `POST /devices/auth/:uuid/renew` with its device token. */

interface TokenBody {
  token: string;
  expiresIn: number;
}

describe.each<Mode>(MODES)('device token renewal (%s mode)', (mode) => {
  let service: TestService;

  beforeAll(async () => {
    // Heartbeat tier: 6 per minute per device, to see that renewals count in it.
    const limits = GENEROUS_RATE_LIMITS.replace(/heartbeat=[^,]+/, 'heartbeat=6/60');
    service = await startTestService(mode, { RATE_LIMITS: limits });
  }, 60_000);
  afterAll(async () => {
    await service?.stop();
  });

  test('the hub gets a new token of the same generation, which works for heartbeats', async () => {
    const owner = await createUser(service);
    const hub = await registerHub(service, owner);
    const token = await deviceToken(service, hub, owner);

    const res = await api(service, 'POST', `/devices/auth/${hub.uuid}/renew`, { token });
    expect(res.status).toBe(201);
    const body = res.body as TokenBody;
    expect(body).toEqual({ token: expect.any(String), expiresIn: 86400 });
    const before = jwt.decode(token) as Record<string, unknown>;
    const after = jwt.decode(body.token) as Record<string, unknown>;
    expect(after).toMatchObject({ sub: before.sub, deviceUuid: hub.uuid, type: 'device', gen: before.gen });
    expect((after.exp as number) - (after.iat as number)).toBe(86400);

    expect((await api(service, 'POST', `/devices/heartbeat/${hub.uuid}`, { token: body.token, body: {} })).status).toBe(200);
    // The renewed token renews again, and renewals share the device's heartbeat budget (6 a minute, 2 used).
    const statuses: number[] = [];
    for (let i = 0; i < 5; i++) statuses.push((await api(service, 'POST', `/devices/auth/${hub.uuid}/renew`, { token: body.token })).status);
    expect(statuses).toEqual([201, 201, 201, 201, 429]);
    const limited = await api(service, 'POST', `/devices/auth/${hub.uuid}/renew`, { token: body.token });
    expect(limited.headers.get('x-ratelimit-limit')).toBe('6');
  });

  test('refused like a heartbeat: a user token, another device, a newer generation, a deleted device', async () => {
    const owner = await createUser(service);
    const [hub, other] = await Promise.all([registerHub(service, owner), registerHub(service, owner)]);
    const token = await deviceToken(service, hub, owner);

    const byUser = await api(service, 'POST', `/devices/auth/${hub.uuid}/renew`, { token: owner.accessToken });
    expect(byUser.status).toBe(401);
    expect((await api(service, 'POST', `/devices/auth/${hub.uuid}/renew`)).status).toBe(401);
    const wrongDevice = await api(service, 'POST', `/devices/auth/${other.uuid}/renew`, { token });
    expect(wrongDevice.status).toBe(403);

    // The owner issues a new token: the older generation, renewed or not, is revoked.
    const renewed = ((await api(service, 'POST', `/devices/auth/${hub.uuid}/renew`, { token })).body as TokenBody).token;
    const newer = await deviceToken(service, hub, owner);
    for (const stale of [token, renewed]) {
      const res = await api(service, 'POST', `/devices/auth/${hub.uuid}/renew`, { token: stale });
      expect({ status: res.status, message: (res.body as { message: string }).message }).toEqual({ status: 401, message: 'Token has been revoked' });
    }
    await deleteHub(service, hub, owner);
    const gone = await api(service, 'POST', `/devices/auth/${hub.uuid}/renew`, { token: newer });
    expect({ status: gone.status, message: (gone.body as { message: string }).message }).toEqual({ status: 401, message: 'Token has been revoked' });
  });

  test('the OpenAPI document describes the endpoint', async () => {
    const doc = (await api(service, 'GET', '/openapi.json')).body as { paths: Record<string, Record<string, { responses: Record<string, unknown> }>> };
    const op = doc.paths['/devices/auth/{uuid}/renew']?.post;
    expect(Object.keys(op?.responses ?? {})).toEqual(expect.arrayContaining(['201', '401', '403']));
  });
});
