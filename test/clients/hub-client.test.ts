import jwt from 'jsonwebtoken';
import { io } from 'socket.io-client';
import { HubClient, type HubClientOptions, type HubEvent, type TokenStore } from '@home-hub-cloud/hub-client';
import type { MessageFromDevice } from '@home-hub-cloud/tunnel-contract';
import { api, createUser, GENEROUS_RATE_LIMITS, startTestService, type TestService } from '../support/harness';
import { connect, deleteHub, deviceToken, registerHub, request, type Hub, type Probe } from '../support/tunnel';
import { signWith } from '../support/tunnel-fixture';
import { eventually, ScaledTimers, sequence } from '../support/client-timers';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy';

/**
 * The hub client against the real service: every rule of the protocol it follows by
 * default (docs/hub-protocol.md). Heartbeats and tunnel messages have low limits here, so
 * the client meets real refusals; everything else is generous.
 */

let service: TestService;
const running: HubClient[] = [];
const probes: Probe[] = [];
const timers: ScaledTimers[] = [];

beforeAll(async () => {
  const limits = GENEROUS_RATE_LIMITS.replace(/heartbeat=[^,]+/, 'heartbeat=3/60').replace(/tunnelMessage=[^,]+/, 'tunnelMessage=3/60');
  service = await startTestService('embedded', { RATE_LIMITS: limits });
}, 60_000);
afterEach(() => {
  for (const client of running.splice(0)) client.stop();
  for (const p of probes.splice(0)) p.close();
  for (const t of timers.splice(0)) t.clear();
});
afterAll(async () => {
  await service?.stop();
});

type User = Awaited<ReturnType<typeof createUser>>;

class MemoryStore implements TokenStore {
  saved: string[] = [];
  constructor(public token: string | null) {}
  load(): string | null {
    return this.token;
  }
  save(token: string): void {
    this.token = token;
    this.saved.push(token);
  }
}

interface Started {
  readonly client: HubClient;
  readonly events: HubEvent[];
  readonly store: MemoryStore;
  readonly timers: ScaledTimers;
}

async function household(): Promise<{ owner: User; hub: Hub; token: string }> {
  const owner = await createUser(service);
  const hub = await registerHub(service, owner);
  return { owner, hub, token: await deviceToken(service, hub, owner) };
}

async function startHub(hub: Hub, token: string | null, options: Partial<HubClientOptions> & { factor?: number; baseUrl?: string } = {}): Promise<Started> {
  const scaled = new ScaledTimers(options.factor ?? 1);
  timers.push(scaled);
  const store = new MemoryStore(token);
  const client = new HubClient({ baseUrl: service.baseUrl, uuid: hub.uuid, tokens: store, timers: scaled, ...options });
  running.push(client);
  const events: HubEvent[] = [];
  client.on((event) => events.push(event));
  await client.start();
  return { client, events, store, timers: scaled };
}

const ofType = <T extends HubEvent['type']>(events: HubEvent[], type: T): Array<Extract<HubEvent, { type: T }>> =>
  events.filter((e): e is Extract<HubEvent, { type: T }> => e.type === type);

const connectedCount = (events: HubEvent[]): number => ofType(events, 'connected').length;

async function appOf(owner: User, hub: Hub): Promise<Probe> {
  const app = await connect(service, owner.accessToken);
  probes.push(app);
  await request(app, 'tunnel:subscribe', { deviceUuid: hub.uuid });
  return app;
}

/** Counts the requests made to paths matching `pattern` and lets a test fail some of them. */
function countingFetch(pattern: RegExp, failFirst = 0): { fetch: typeof fetch; calls: () => number } {
  let calls = 0;
  return {
    calls: () => calls,
    fetch: async (input, init) => {
      const url = String(input);
      if (pattern.test(url)) {
        calls++;
        if (calls <= failFirst) throw new TypeError('fetch failed (injected network error)');
      }
      return fetch(input, init);
    },
  };
}

test('heartbeats: the first at start, then on an interval spread by the jitter', async () => {
  const { owner, hub, token } = await household();
  // The client's minute passes in 60 ms; three beats fit the limit of this service.
  const started = await startHub(hub, token, { factor: 1000, heartbeatIntervalMs: 60_000, heartbeatJitter: 0.1, random: sequence(0, 1, 0.5) });
  await eventually(() => ofType(started.events, 'heartbeat').length >= 3, 10_000, 'three heartbeats');
  started.client.stop();
  expect(ofType(started.events, 'heartbeat').slice(0, 3).map((e) => e.status)).toEqual([200, 200, 200]);
  // The intervals the client asked for between beats: 60 s ± 10 %, as the random draws say
  // (the first draw, 0, placed the renewal; then 1 and 0.5).
  const intervals = started.timers.asked.filter((ms) => ms >= 50_000 && ms <= 70_000);
  expect(intervals.slice(0, 2)).toEqual([66_000, 60_000]);
  const device = await api(service, 'GET', `/devices/${hub.uuid}`, { token: owner.accessToken });
  expect((device.body as { isOnline: boolean }).isOnline).toBe(true);
});

test('a heartbeat answered 429 waits the retryAfter it was given before the next one', async () => {
  const { hub, token } = await household();
  const started = await startHub(hub, token, { factor: 1000, heartbeatIntervalMs: 1000, heartbeatJitter: 0, random: () => 0 });
  const refused = await eventually(() => ofType(started.events, 'refused')[0], 10_000, 'a refused heartbeat');
  started.client.stop();
  expect(refused.code).toBe('RATE_LIMITED');
  expect(refused.retryAfter).toBeGreaterThan(0);
  expect(ofType(started.events, 'heartbeat').map((e) => e.status).slice(0, 4)).toEqual([200, 200, 200, 429]);
  // Before the refusal the client waited its interval; after it, at least what it was told.
  expect(started.timers.asked).toContain(refused.retryAfter * 1000);
});

test('renewal: at 50-80 % of the token lifetime, the new token saved and accepted', async () => {
  const { hub, token } = await household();
  const claims = jwt.decode(token) as { sub: string; deviceUuid: string; gen: number };
  const now = Math.floor(Date.now() / 1000);
  // A token that lives 100 s, issued 10 s ago; the client's clock runs 20 times faster.
  const short = signWith(service.env.JWT_DEVICE_SECRET ?? '', { sub: claims.sub, deviceUuid: claims.deviceUuid, gen: claims.gen, type: 'device', iat: now - 10, exp: now + 90 });
  const before = Date.now();
  const started = await startHub(hub, short, { factor: 20, random: sequence(0.5) });
  // The client's clock once start() has returned: the renewal was armed before that, after `before`.
  const startedAt = started.timers.now();
  const renewed = await eventually(() => ofType(started.events, 'renewed')[0], 15_000, 'a renewal');
  // The renewal was scheduled for 65 % of the lifetime (0.5 + 0.3 × 0.5): at iat + 65 s, less
  // the client's time when it armed it, which lies between `before` and `startedAt` (however
  // long this process took in between: at 20×, a 250 ms pause is 5 s of the client's time).
  const dueAt = (now - 10 + 65) * 1000;
  const renewDelay = started.timers.asked[0] ?? 0;
  expect(renewDelay).toBeLessThanOrEqual(dueAt - before);
  expect(renewDelay).toBeGreaterThanOrEqual(dueAt - startedAt);
  expect(started.store.saved).toHaveLength(1);
  const fresh = started.store.saved[0] ?? '';
  expect(fresh).not.toBe(short);
  expect(renewed.expiresAt).toBeGreaterThan(Date.now() + 86_000_000);
  // The saved token is the one the client now uses, and the service accepts it.
  expect(started.client.currentToken).toBe(fresh);
  const beat = await api(service, 'POST', `/devices/auth/${hub.uuid}/renew`, { token: fresh });
  expect(beat.status).toBe(201);
});

test('renewal retries with growing backoff when the service cannot be reached', async () => {
  const { hub, token } = await household();
  const counting = countingFetch(/\/renew$/, 3);
  const started = await startHub(hub, token, { factor: 100, fetch: counting.fetch, random: () => 0.999, renewRetry: { baseMs: 1000, capMs: 3000 } });
  const ok = started.client.renew();
  expect(await ok).toBe(true);
  expect(counting.calls()).toBe(4);
  const retries = ofType(started.events, 'error').filter((e) => e.where === 'renew');
  expect(retries).toHaveLength(3);
  // Full jitter below a ceiling that doubles up to the cap: ~1 s, ~2 s, ~3 s (capped).
  expect(started.timers.asked.filter((ms) => ms > 900 && ms < 3000 + 1)).toEqual([999, 1998, 2997]);
  expect(started.store.saved).toHaveLength(1);
});

test('the tunnel reconnects after a drop with capped exponential backoff and full jitter', async () => {
  const { owner, hub, token } = await household();
  const proxy: TcpProxy = await startTcpProxy(service.baseUrl);
  try {
    const started = await startHub(hub, token, { baseUrl: proxy.baseUrl, factor: 10, random: () => 0.999, reconnect: { baseMs: 1000, capMs: 4000 } });
    await eventually(() => connectedCount(started.events) === 1, 10_000, 'connected');
    proxy.setDown(true);
    proxy.drop();
    await eventually(() => ofType(started.events, 'reconnecting').length >= 5, 20_000, 'five attempts while down');
    proxy.setDown(false);
    await eventually(() => connectedCount(started.events) === 2, 20_000, 'connected again');
    const delays = ofType(started.events, 'reconnecting').map((e) => e.delayMs);
    // 0.999 of a ceiling that doubles from 1 s and stops at 4 s.
    expect(delays.slice(0, 5)).toEqual([999, 1998, 3996, 3996, 3996]);
    expect(ofType(started.events, 'reconnecting').map((e) => e.attempt).slice(0, 5)).toEqual([0, 1, 2, 3, 4]);
    // Reachable again: an app sees it connected.
    const app = await appOf(owner, hub);
    const ack = await request<{ delivered: boolean }>(app, 'tunnel:message', { deviceUuid: hub.uuid, type: 'ping', payload: {} });
    expect(ack.delivered).toBe(true);
    // After a successful connection the backoff starts over.
    proxy.drop();
    await eventually(() => connectedCount(started.events) === 3, 20_000, 'connected a third time');
    expect(ofType(started.events, 'reconnecting').at(-1)?.attempt).toBe(0);
  } finally {
    await proxy.close();
  }
});

test('a slow service: an attempt waits connectTimeoutMs (30 s by default) before it is given up', async () => {
  const { hub, token } = await household();
  // The default, as the client hands it to Socket.IO.
  let timeoutGiven: unknown;
  const capture = (url: string, options: Parameters<typeof io>[1]): ReturnType<typeof io> => {
    timeoutGiven = options?.timeout;
    return io(url, options);
  };
  await startHub(hub, token, { io: capture });
  expect(timeoutGiven).toBe(30_000);
  running.splice(0).forEach((client) => client.stop());
  // A crowded service: every chunk of the handshake passed on 500 ms late (~2 s in all).
  const proxy: TcpProxy = await startTcpProxy(service.baseUrl);
  try {
    proxy.delay(500);
    const impatient = await startHub(hub, token, { baseUrl: proxy.baseUrl, connectTimeoutMs: 800, reconnect: { baseMs: 60_000, capMs: 60_000 } });
    await eventually(() => ofType(impatient.events, 'reconnecting').length >= 1, 10_000, 'the impatient attempt given up');
    expect(ofType(impatient.events, 'reconnecting')[0]?.cause).toBe('timeout');
    expect(connectedCount(impatient.events)).toBe(0);
    impatient.client.stop();
    const patient = await startHub(hub, token, { baseUrl: proxy.baseUrl, connectTimeoutMs: 10_000 });
    await eventually(() => connectedCount(patient.events) === 1, 15_000, 'connected on its first attempt');
    expect(ofType(patient.events, 'reconnecting')).toEqual([]);
  } finally {
    await proxy.close();
  }
});

test('messages go to the handler; replies carry replyTo', async () => {
  const { owner, hub, token } = await household();
  const started = await startHub(hub, token);
  started.client.onMessage(async (message, reply) => {
    await reply({ type: `${message.type}.done`, payload: message.payload });
  });
  await eventually(() => started.client.connected, 10_000, 'connected');
  const app = await appOf(owner, hub);
  const sent = await request<{ delivered: boolean }>(app, 'tunnel:message', { deviceUuid: hub.uuid, id: 'cmd-1', type: 'light.set', payload: { on: true } });
  expect(sent.delivered).toBe(true);
  const answer = await app.next<MessageFromDevice>('tunnel:message');
  expect(answer).toMatchObject({ deviceUuid: hub.uuid, from: 'device', replyTo: 'cmd-1', type: 'light.set.done', payload: { on: true } });
});

test('RATE_LIMITED on the tunnel: the next send waits the retryAfter', async () => {
  const { owner, hub, token } = await household();
  const started = await startHub(hub, token, { factor: 1000, heartbeatIntervalMs: 3_600_000 });
  let refusedTime: number | undefined;
  started.client.on((event) => {
    if (event.type === 'refused' && refusedTime === undefined) refusedTime = started.timers.now();
  });
  await eventually(() => started.client.connected, 10_000, 'connected');
  await appOf(owner, hub);
  const acks = [];
  for (let i = 0; i < 4; i++) acks.push(await started.client.send({ type: 'status', payload: { i } }));
  expect(acks.map((a) => a.success)).toEqual([true, true, true, false]);
  const refused = await eventually(() => ofType(started.events, 'refused')[0], 5000, 'RATE_LIMITED');
  expect(refused.code).toBe('RATE_LIMITED');
  const refusedAt = refusedTime ?? 0;
  await started.client.send({ type: 'status', payload: { i: 5 } });
  // It held the message until the refusal's end: retryAfter seconds of the client's clock
  // (up to 5 ms of wall time between the refusal and this test's listener, at 1000×).
  // (The service's window is wall-clock time, so it may still refuse: only the wait is checked.)
  expect(started.timers.now()).toBeGreaterThanOrEqual(refusedAt + refused.retryAfter * 1000 - 5000);
});

test('unauthorized handshake: renews once and connects with the new token', async () => {
  const { hub, token } = await household();
  let handshakes = 0;
  // The first handshake presents a damaged token, as a hub might after a bad write.
  const factory: HubClientOptions['io'] = (url, options) =>
    io(url, {
      ...options,
      auth: (cb: (data: object) => void) => {
        handshakes++;
        (options.auth as (cb: (data: object) => void) => void)((data) => cb(handshakes === 1 ? { token: 'x.y.z' } : data));
      },
    });
  const counting = countingFetch(/\/renew$/);
  const started = await startHub(hub, token, { io: factory, fetch: counting.fetch });
  await eventually(() => started.client.connected, 10_000, 'connected');
  expect(handshakes).toBe(2);
  expect(counting.calls()).toBe(1);
  expect(ofType(started.events, 'reconnecting')).toEqual([{ type: 'reconnecting', attempt: 0, delayMs: 0, cause: 'unauthorized' }]);
});

test('a deleted device: the hub renews once, reports revoked, and stops trying', async () => {
  const { owner, hub, token } = await household();
  const counting = countingFetch(/\/renew$/);
  const started = await startHub(hub, token, { fetch: counting.fetch, reconnect: { baseMs: 50, capMs: 100 } });
  await eventually(() => started.client.connected, 10_000, 'connected');
  await deleteHub(service, hub, owner);
  const stopped = await started.client.stopped();
  expect(stopped).toEqual({ reason: 'revoked', message: 'Token has been revoked' });
  expect(counting.calls()).toBe(1);
  const attempts = ofType(started.events, 'reconnecting').length;
  await new Promise((resolve) => setTimeout(resolve, 500));
  expect(ofType(started.events, 'reconnecting').length).toBe(attempts);
  expect(started.client.connected).toBe(false);
});

test('SESSION_REPLACED: the replaced instance stops and reports; the new one keeps the tunnel', async () => {
  const { hub, token } = await household();
  const first = await startHub(hub, token);
  await eventually(() => first.client.connected, 10_000, 'first connected');
  const second = await startHub(hub, token);
  expect(await first.client.stopped()).toMatchObject({ reason: 'replaced' });
  await eventually(() => second.client.connected, 10_000, 'second connected');
  await new Promise((resolve) => setTimeout(resolve, 500));
  expect(second.client.connected).toBe(true);
  expect(ofType(second.events, 'stopped')).toEqual([]);
  expect(connectedCount(first.events)).toBe(1);
});

test('no token in the store: stops at once with no-token', async () => {
  const { hub } = await household();
  const started = await startHub(hub, null);
  expect(await started.client.stopped()).toMatchObject({ reason: 'no-token' });
});

test('a heartbeat that could not reach the service is sent again as soon as the tunnel is back', async () => {
  const { hub, token } = await household();
  const proxy = await startTcpProxy(service.baseUrl);
  try {
    proxy.setDown(true);
    // The next regular heartbeat would be a minute away: only the reconnection can bring one sooner.
    const started = await startHub(hub, token, { baseUrl: proxy.baseUrl, heartbeatIntervalMs: 60_000, reconnect: { baseMs: 100, capMs: 200 } });
    await eventually(() => ofType(started.events, 'error').find((e) => e.where === 'heartbeat'), 10_000, 'a failed heartbeat');
    await eventually(() => ofType(started.events, 'reconnecting').length >= 2, 10_000, 'attempts while down');
    proxy.setDown(false);
    await eventually(() => ofType(started.events, 'heartbeat').find((e) => e.ok), 10_000, 'a heartbeat after the reconnection');
    const order = started.events.filter((e) => e.type === 'connected' || (e.type === 'heartbeat' && e.ok)).map((e) => e.type);
    expect(order.slice(0, 2)).toEqual(['connected', 'heartbeat']);
  } finally {
    await proxy.close();
  }
});
