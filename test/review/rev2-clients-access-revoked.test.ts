import { randomUUID } from 'node:crypto';
import { AppClient, memorySessionStore, type AppTunnelEvent } from '@home-hub-cloud/app-client';
import { api, createUser, startTestService, type TestService } from '../support/harness';
import { eventually } from '../support/client-timers';

/**
 * When the user loses access to a device it is subscribed to, the service ends the subscription
 * and tells the socket `tunnel:error {code: 'ACCESS_REVOKED'}`. The app client keeps the device
 * in `subscribed()` ("The devices subscribed") and in the set it subscribes again after every
 * reconnect ("The devices the app subscribed to (until `unsubscribe()` or a refusal other than
 * `RATE_LIMITED`)"), though the service no longer sends it anything about the device.
 */

let service: TestService;
const cleanups: (() => unknown)[] = [];
beforeAll(async () => {
  service = await startTestService('embedded');
}, 60_000);
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});
afterAll(async () => {
  await service?.stop();
});

test('a subscription the service ends with ACCESS_REVOKED is no longer listed in subscribed()', async () => {
  const owner = await createUser(service);
  const viewer = await createUser(service);
  const uuid = randomUUID();
  expect((await api(service, 'POST', '/devices/register', { token: owner.accessToken, body: { uuid, deviceId: 'HUB-V', name: 'Hall' } })).status).toBe(201);
  expect((await api(service, 'POST', `/devices/${uuid}/link`, { token: owner.accessToken, body: { email: viewer.email, role: 'viewer' } })).status).toBeLessThan(300);

  const client = new AppClient({ baseUrl: service.baseUrl, session: memorySessionStore({ accessToken: viewer.accessToken, refreshToken: 'unused' }) });
  const tunnel = client.tunnel();
  cleanups.push(() => tunnel.close());
  const events: AppTunnelEvent[] = [];
  tunnel.on((event) => events.push(event));
  await tunnel.connected();
  expect(await tunnel.subscribe(uuid)).toMatchObject({ success: true, deviceUuid: uuid });
  expect(tunnel.subscribed()).toEqual([uuid]);

  expect((await api(service, 'DELETE', `/devices/${uuid}/users/${viewer.id}`, { token: owner.accessToken })).status).toBe(200);
  await eventually(() => events.find((e) => e.type === 'error' && e.error.code === 'ACCESS_REVOKED'), 5000, 'ACCESS_REVOKED');

  expect(tunnel.subscribed()).toEqual([]);
}, 30_000);
