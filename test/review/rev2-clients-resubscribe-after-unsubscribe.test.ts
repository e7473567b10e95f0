import { randomUUID } from 'node:crypto';
import { AppClient, memorySessionStore, type DeviceStatus } from '@home-hub-cloud/app-client';
import { HubClient } from '@home-hub-cloud/hub-client';
import { api, createUser, startTestService, type TestService } from '../support/harness';
import { eventually } from '../support/client-timers';

/**
 * The app client subscribes each device once per connection: a `subscribe()` that meets one
 * under way shares its answer (README: "each device subscribed once per connection"). But an
 * `unsubscribe()` sent after that subscribe undoes it on the service (the socket's events are
 * handled in the order they arrive), so a `subscribe()` made after the `unsubscribe()` must not
 * take the earlier answer as its own: here it resolves `success: true`, `subscribed()` lists the
 * device, and the app never hears of it again (no `device:status` when its hub connects).
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

test('subscribe, unsubscribe, subscribe again: the device is subscribed on the service', async () => {
  const owner = await createUser(service);
  const uuid = randomUUID();
  expect((await api(service, 'POST', '/devices/register', { token: owner.accessToken, body: { uuid, deviceId: 'HUB-R', name: 'Hall' } })).status).toBe(201);
  const client = new AppClient({ baseUrl: service.baseUrl, session: memorySessionStore({ accessToken: owner.accessToken, refreshToken: 'unused' }) });
  const tunnel = client.tunnel();
  cleanups.push(() => tunnel.close());
  const statuses: DeviceStatus[] = [];
  tunnel.onStatus((status) => statuses.push(status));
  await tunnel.connected();

  const first = tunnel.subscribe(uuid);
  // The first subscribe is on the wire (not answered yet); the app unsubscribes and,
  // before that is answered, subscribes again.
  await new Promise((resolve) => setImmediate(resolve));
  const unsubscribed = tunnel.unsubscribe(uuid);
  const again = await tunnel.subscribe(uuid);
  await Promise.all([first, unsubscribed]);
  expect(again).toMatchObject({ success: true, deviceUuid: uuid });
  expect(tunnel.subscribed()).toEqual([uuid]);

  // Subscribed, the app is told when the device's hub connects.
  const issued = await api(service, 'POST', `/devices/auth/${uuid}`, { token: owner.accessToken });
  const deviceToken = (issued.body as { token: string }).token;
  const hub = new HubClient({ baseUrl: service.baseUrl, uuid, tokens: { load: () => deviceToken, save: () => undefined } });
  cleanups.push(() => hub.stop());
  await hub.start();
  await eventually(() => statuses.find((s) => s.deviceUuid === uuid && s.tunnelConnected), 5000, 'device:status of the subscribed device');
}, 30_000);
