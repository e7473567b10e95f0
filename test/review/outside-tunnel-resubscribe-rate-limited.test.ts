import { randomUUID } from 'node:crypto';
import { AppClient, memorySessionStore, type AppTunnelEvent } from '@home-hub-cloud/app-client';
import type { MessageFromDevice } from '@home-hub-cloud/tunnel-contract';
import { io, type Socket } from 'socket.io-client';
import { TIERS } from '../../src/ratelimit/limiter';
import { api, createUser, startTestService, type TestService } from '../support/harness';
import { eventually } from '../support/client-timers';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy';

/**
 * The app client promises "subscriptions made again after every reconnect" (README) and
 * "every `retryAfter` obeyed". `tunnel:subscribe` is limited per user (interface: 10 per 60 s;
 * here 3 per 4 s so the test is short). An app subscribed to as many devices as the tier
 * allows whose connection drops within the window reconnects, and its resubscriptions are
 * answered `RATE_LIMITED` with a `retryAfter`. The client must subscribe them again once
 * that time has passed; it keeps them in `subscribed()` and reports them `resubscribed`, but
 * never sends them again, so the app silently stops hearing from those devices.
 */

const SUBSCRIBES = 3;
const WINDOW_SECONDS = 4;

let service: TestService;
let proxy: TcpProxy;
const sockets: Socket[] = [];

beforeAll(async () => {
  const limits = TIERS.filter((tier) => tier !== 'tunnelSubscribe').map((tier) => `${tier}=1000000/60`);
  service = await startTestService('embedded', { RATE_LIMITS: [...limits, `tunnelSubscribe=${SUBSCRIBES}/${WINDOW_SECONDS}`].join(',') });
  proxy = await startTcpProxy(service.baseUrl);
}, 60_000);
afterAll(async () => {
  for (const socket of sockets) socket.disconnect();
  await proxy?.close();
  await service?.stop();
});

async function connectedHub(ownerToken: string): Promise<{ uuid: string; socket: Socket }> {
  const uuid = randomUUID();
  const registered = await api(service, 'POST', '/devices/register', { token: ownerToken, body: { uuid, deviceId: `HUB-${uuid.slice(0, 6)}`, name: 'Hub' } });
  expect(registered.status).toBe(201);
  const issued = await api(service, 'POST', `/devices/auth/${uuid}`, { token: ownerToken });
  const socket = io(`${service.baseUrl}/tunnel`, { auth: { token: (issued.body as { token: string }).token }, transports: ['websocket'], reconnection: false, forceNew: true });
  sockets.push(socket);
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', () => resolve());
    socket.once('connect_error', reject);
  });
  return { uuid, socket };
}

test('resubscriptions refused RATE_LIMITED after a reconnect are made again after retryAfter', async () => {
  const owner = await createUser(service);
  const hubs = await Promise.all(Array.from({ length: SUBSCRIBES }, () => connectedHub(owner.accessToken)));

  const client = new AppClient({ baseUrl: proxy.baseUrl, session: memorySessionStore({ accessToken: owner.accessToken, refreshToken: 'unused' }) });
  const tunnel = client.tunnel({ reconnect: { baseMs: 100, capMs: 200 } });
  const events: AppTunnelEvent[] = [];
  const messages: MessageFromDevice[] = [];
  tunnel.on((e) => events.push(e));
  tunnel.onMessage((m) => messages.push(m));
  try {
    await tunnel.connected();
    for (const hub of hubs) expect(await tunnel.subscribe(hub.uuid)).toMatchObject({ success: true });

    // The app's connection drops within the subscribe window: the client reconnects and subscribes again.
    proxy.drop();
    await eventually(() => events.find((e) => e.type === 'resubscribed'), 10_000, 'resubscribed');
    const refused = events.filter((e): e is Extract<AppTunnelEvent, { type: 'refused' }> => e.type === 'refused');
    // The precondition of the defect: the resubscriptions met the tier.
    expect(refused.length).toBeGreaterThan(0);
    const wait = Math.max(...refused.map((r) => r.retryAfter));
    expect(tunnel.subscribed().sort()).toEqual(hubs.map((h) => h.uuid).sort());

    // Once the service's retryAfter (plus the client's spread of up to 1 s) has passed, every
    // device the client says it is subscribed to must reach the app again.
    await new Promise((resolve) => setTimeout(resolve, wait * 1000 + 2500));
    for (const hub of hubs) hub.socket.emit('tunnel:message', { type: 'after-reconnect', payload: hub.uuid });
    await eventually(() => messages.filter((m) => m.type === 'after-reconnect').length === hubs.length, 5000, 'a message from every subscribed device').catch(() => undefined);
    expect(messages.filter((m) => m.type === 'after-reconnect').map((m) => m.deviceUuid).sort()).toEqual(hubs.map((h) => h.uuid).sort());
  } finally {
    tunnel.close();
  }
}, 60_000);
