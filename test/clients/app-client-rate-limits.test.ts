import { randomUUID } from 'node:crypto';
import { AppClient, memorySessionStore, type AppTunnel, type AppTunnelEvent } from '@home-hub-cloud/app-client';
import { TIERS } from '../../src/ratelimit/limiter';
import { api, createUser, startTestService, type TestService } from '../support/harness';
import { eventually } from '../support/client-timers';

/**
 * The app client and the tunnel's two rate tiers, which are separate (decisions §6): a
 * subscribe refused `RATE_LIMITED` holds back the subscribes, not the messages, and the client
 * subscribes the refused device again after `retryAfter` (again after a further refusal); a
 * message refused `RATE_LIMITED` holds back the messages, not the subscribes. Here 1 subscribe
 * and 3 messages per 3 s, so the waits are short.
 */

const WINDOW_SECONDS = 3;

let service: TestService;
const tunnels: AppTunnel[] = [];

beforeAll(async () => {
  const limits = TIERS.filter((tier) => tier !== 'tunnelSubscribe' && tier !== 'tunnelMessage').map((tier) => `${tier}=1000000/60`);
  service = await startTestService('embedded', {
    RATE_LIMITS: [...limits, `tunnelSubscribe=1/${WINDOW_SECONDS}`, `tunnelMessage=3/${WINDOW_SECONDS}`].join(','),
  });
}, 60_000);
afterEach(() => {
  for (const tunnel of tunnels.splice(0)) tunnel.close();
});
afterAll(async () => {
  await service?.stop();
});

async function userWithDevices(count: number): Promise<{ tunnel: AppTunnel; events: AppTunnelEvent[]; uuids: string[] }> {
  const owner = await createUser(service);
  const uuids: string[] = [];
  for (let i = 0; i < count; i++) {
    const uuid = randomUUID();
    const res = await api(service, 'POST', '/devices/register', { token: owner.accessToken, body: { uuid, deviceId: `HUB-${uuid.slice(0, 6)}`, name: `Hub ${i}` } });
    expect(res.status).toBe(201);
    uuids.push(uuid);
  }
  const client = new AppClient({ baseUrl: service.baseUrl, session: memorySessionStore({ accessToken: owner.accessToken, refreshToken: 'unused' }) });
  const tunnel = client.tunnel();
  tunnels.push(tunnel);
  const events: AppTunnelEvent[] = [];
  tunnel.on((e) => events.push(e));
  await tunnel.connected();
  return { tunnel, events, uuids };
}

test('a subscribe refused RATE_LIMITED holds back subscribes, not messages, and is made again after retryAfter', async () => {
  const { tunnel, events, uuids } = await userWithDevices(3);
  const [a, b, c] = uuids as [string, string, string];
  expect(await tunnel.subscribe(a)).toMatchObject({ success: true, deviceUuid: a });

  const refusedAcks = await Promise.all([tunnel.subscribe(b), tunnel.subscribe(c)]);
  for (const ack of refusedAcks) expect(ack).toMatchObject({ success: false, error: { code: 'RATE_LIMITED' } });
  // Not claimed subscribed while refused.
  expect(tunnel.subscribed()).toEqual([a]);

  // The message tier is untouched: a message goes at once.
  const started = Date.now();
  expect(await tunnel.send(a, 'ping', {})).toEqual({ success: true, delivered: false });
  expect(Date.now() - started).toBeLessThan(1000);

  // The client subscribes b and c again by itself: one per window, so one of them is refused
  // a second time and waits once more.
  const resubscribed = await eventually(() => events.find((e): e is Extract<AppTunnelEvent, { type: 'resubscribed' }> => e.type === 'resubscribed'), 20_000, 'resubscribed');
  expect([...resubscribed.deviceUuids].sort()).toEqual([b, c].sort());
  expect(tunnel.subscribed().sort()).toEqual([a, b, c].sort());
  expect(events.filter((e) => e.type === 'refused').length).toBeGreaterThanOrEqual(3);
}, 60_000);

test('a message refused RATE_LIMITED holds back messages, not subscribes', async () => {
  const { tunnel, events, uuids } = await userWithDevices(1);
  const [a] = uuids as [string];
  for (let i = 0; i < 3; i++) expect(await tunnel.send(a, 'ping', { i })).toEqual({ success: true, delivered: false });
  expect(await tunnel.send(a, 'ping', { i: 3 })).toEqual({ success: false, delivered: false });
  const refused = events.find((e): e is Extract<AppTunnelEvent, { type: 'refused' }> => e.type === 'refused');
  expect(refused).toMatchObject({ code: 'RATE_LIMITED' });

  // The subscribe tier is untouched: a subscribe goes at once.
  let started = Date.now();
  expect(await tunnel.subscribe(a)).toMatchObject({ success: true, deviceUuid: a });
  expect(Date.now() - started).toBeLessThan(1000);

  // The next message waits the retryAfter out, then goes through.
  started = Date.now();
  expect(await tunnel.send(a, 'ping', { i: 4 })).toEqual({ success: true, delivered: false });
  expect(Date.now() - started).toBeGreaterThanOrEqual((refused?.retryAfter ?? 0) * 1000 - 300);
}, 60_000);
