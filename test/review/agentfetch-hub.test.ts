import { agentFetch, HubClient, type HubClientOptions, type HubEvent } from '@home-hub-cloud/hub-client';
import { createUser, GENEROUS_RATE_LIMITS, startTestService, type TestService } from '../support/harness';
import { deviceToken, registerHub, type Hub } from '../support/tunnel';
import { eventually, ScaledTimers } from '../support/client-timers';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy';

/**
 * A hub client on `agentFetch` against the real service: refusals (429 with Retry-After, 401 of
 * a revoked token), its renewal, and the service going away and coming back on the same port
 * (a TCP proxy in front of it, cut and resumed). An unhandled rejection anywhere fails the test.
 */

let service: TestService;
const stops: Array<() => unknown> = [];

beforeAll(async () => {
  // Heartbeats: 3 a minute per device, so one hub meets a real 429.
  service = await startTestService('embedded', { RATE_LIMITS: GENEROUS_RATE_LIMITS.replace(/heartbeat=[^,]+/, 'heartbeat=3/60') });
}, 60_000);
afterEach(async () => {
  for (const stop of stops.splice(0).reverse()) await stop();
});
afterAll(async () => {
  await service?.stop();
});

async function household(): Promise<{ owner: Awaited<ReturnType<typeof createUser>>; hub: Hub; token: string }> {
  const owner = await createUser(service);
  const hub = await registerHub(service, owner);
  return { owner, hub, token: await deviceToken(service, hub, owner) };
}

function startHub(hub: Hub, token: string, options: Partial<HubClientOptions> & { factor?: number } = {}): { client: HubClient; events: HubEvent[]; timers: ScaledTimers; started: Promise<void> } {
  const http = agentFetch();
  const timers = new ScaledTimers(options.factor ?? 1);
  let current = token;
  const client = new HubClient({ baseUrl: service.baseUrl, uuid: hub.uuid, tokens: { load: () => current, save: (t) => void (current = t) }, timers, fetch: http, ...options });
  stops.push(() => {
    client.stop();
    timers.clear();
    http.close();
  });
  const events: HubEvent[] = [];
  client.on((event) => events.push(event));
  return { client, events, timers, started: client.start() };
}

const ofType = <T extends HubEvent['type']>(events: HubEvent[], type: T): Array<Extract<HubEvent, { type: T }>> =>
  events.filter((e): e is Extract<HubEvent, { type: T }> => e.type === type);

test('429: the hub waits the retryAfter the service gave, read through agentFetch', async () => {
  const { hub, token } = await household();
  // The client's minute passes in 60 ms.
  const { events, timers, started } = startHub(hub, token, { factor: 1000, heartbeatIntervalMs: 1000, heartbeatJitter: 0, random: () => 0 });
  await started;
  const refused = await eventually(() => ofType(events, 'refused')[0], 10_000, 'a refused heartbeat');
  expect(refused).toMatchObject({ code: 'RATE_LIMITED' });
  expect(refused.retryAfter).toBeGreaterThan(0);
  expect(ofType(events, 'heartbeat').map((e) => e.status).slice(0, 4)).toEqual([200, 200, 200, 429]);
  expect(timers.asked).toContain(refused.retryAfter * 1000);
  expect(ofType(events, 'error').filter((e) => e.where !== 'tunnel')).toEqual([]);
});

test('a revoked token (a newer one issued): one renewal refused, the hub stops as revoked', async () => {
  const { owner, hub, token } = await household();
  await deviceToken(service, hub, owner);
  const { client, events, started } = startHub(hub, token, { reconnect: { baseMs: 50, capMs: 100 } });
  await started;
  const stopped = await client.stopped();
  expect(stopped).toEqual({ reason: 'revoked', message: 'Token has been revoked' });
  expect(ofType(events, 'renewed')).toEqual([]);
});

describe('the service gone and back on the same port', () => {
  let proxy: TcpProxy;
  let generous: TestService;

  beforeAll(async () => {
    generous = await startTestService('embedded', { RATE_LIMITS: GENEROUS_RATE_LIMITS });
  }, 60_000);
  beforeEach(async () => {
    proxy = await startTcpProxy(generous.baseUrl);
  });
  afterEach(async () => {
    await proxy.close();
  });
  afterAll(async () => {
    await generous?.stop();
  });

  test('heartbeats fail while it is down, then succeed again on new connections; a renewal goes through after', async () => {
    const owner = await createUser(generous);
    const hub = await registerHub(generous, owner);
    const token = await deviceToken(generous, hub, owner);
    const http = agentFetch();
    let current = token;
    const client = new HubClient({
      baseUrl: proxy.baseUrl,
      uuid: hub.uuid,
      tokens: { load: () => current, save: (t) => void (current = t) },
      heartbeatIntervalMs: 100,
      heartbeatJitter: 0,
      requestTimeoutMs: 2000,
      reconnect: { baseMs: 50, capMs: 200 },
      fetch: http,
    });
    stops.push(() => {
      client.stop();
      http.close();
    });
    const events: HubEvent[] = [];
    client.on((event) => events.push(event));
    await client.start();
    await eventually(() => ofType(events, 'heartbeat').filter((e) => e.ok).length >= 3 && client.connected, 10_000, 'beating and connected');

    await proxy.cut();
    const down = events.length;
    await eventually(() => events.slice(down).filter((e) => e.type === 'error' && e.where === 'heartbeat').length >= 2, 10_000, 'heartbeats failing');
    await proxy.resume();
    const up = events.length;
    await eventually(() => ofType(events.slice(up), 'heartbeat').filter((e) => e.ok).length >= 3, 10_000, 'heartbeats answered again');
    await eventually(() => client.connected, 10_000, 'tunnel back');
    // Once up, no heartbeat failed: the first request after the restart was not lost on a dead connection.
    const afterFirstOk = events.slice(up).findIndex((e) => e.type === 'heartbeat' && e.ok);
    expect(events.slice(up + afterFirstOk).filter((e) => e.type === 'error' && e.where === 'heartbeat')).toEqual([]);
    expect(await client.renew()).toBe(true);
    expect(ofType(events, 'renewed')).toHaveLength(1);
  });
});
