import { createUser, MODES, startTestService, type Mode, type TestService } from '../support/harness';
import { rawRequest } from '../support/path-variants';
import { deviceToken, registerHub } from '../support/tunnel';

/**
 * A stolen device token is ended by issuing a new one (decisions §4). Its heartbeats and
 * renewals must not spend the budget of the hub's current token: the thief's flood of 401s
 * never makes the real hub's heartbeats 429 (decisions §6: failed authentication is no
 * account's cost but the sender's).
 */
describe.each<Mode>(MODES)('a revoked device token cannot use up its hub\'s heartbeat tier (%s mode)', (mode) => {
  let service: TestService;

  beforeAll(async () => {
    service = await startTestService(mode, { RATE_LIMITS: 'heartbeat=3/60,general=100/60' });
  }, 60_000);
  afterAll(() => service?.stop());

  test('after a new token generation, the old token\'s flood leaves the new token\'s heartbeats alone', async () => {
    const owner = await createUser(service);
    const hub = await registerHub(service, owner);
    const stolen = await deviceToken(service, hub, owner);
    const current = await deviceToken(service, hub, owner);
    const beat = (token: string) => rawRequest(service, 'POST', `/api/v1/devices/heartbeat/${hub.uuid}`, { body: {}, headers: { Authorization: `Bearer ${token}` } });
    const renew = (token: string) => rawRequest(service, 'POST', `/api/v1/devices/auth/${hub.uuid}/renew`, { headers: { Authorization: `Bearer ${token}` } });

    const thief: number[] = [];
    for (let i = 0; i < 3; i++) thief.push((await beat(stolen)).status, (await renew(stolen)).status);
    // Refused, and limited all the same.
    expect(thief.slice(0, 3)).toEqual([401, 401, 401]);
    expect(thief.slice(3)).toEqual([429, 429, 429]);

    const statuses: number[] = [];
    for (let i = 0; i < 3; i++) statuses.push((await beat(current)).status);
    expect(statuses.every((s) => s >= 200 && s < 300)).toBe(true);
    expect((await beat(current)).status).toBe(429);
  });
});
