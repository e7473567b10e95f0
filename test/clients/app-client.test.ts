import { randomUUID } from 'node:crypto';
import jwt from 'jsonwebtoken';
import { AppClient, memorySessionStore, SessionEndedError, type AppTunnelEvent, type Session } from '@home-hub-cloud/app-client';
import { HubClient } from '@home-hub-cloud/hub-client';
import type { DeviceStatus, MessageFromDevice } from '@home-hub-cloud/tunnel-contract';
import { createAccount, type Account } from '../support/accounts';
import { startTestService, type TestService } from '../support/harness';
import { startTestSmtpServer, type TestSmtpServer } from '../support/smtp';
import { signWith } from '../support/tunnel-fixture';
import { eventually } from '../support/client-timers';
import { startTcpProxy } from '../support/tcp-proxy';

/**
 * The app client against the real service: typed REST for every operation, the session
 * refreshed in a single flight, the tunnel with typed events, `device:status` as a callback
 * and subscriptions kept across reconnects.
 */

let smtp: TestSmtpServer;
let service: TestService;
const cleanups: Array<() => void> = [];

beforeAll(async () => {
  smtp = await startTestSmtpServer();
  service = await startTestService('embedded', { SMTP_URL: smtp.url });
}, 60_000);
afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
});
afterAll(async () => {
  await service?.stop();
  await smtp?.stop();
});

function countingFetch(pattern: RegExp): { fetch: typeof fetch; calls: () => number } {
  let calls = 0;
  return {
    calls: () => calls,
    fetch: (input, init) => {
      const url = input instanceof Request ? input.url : String(input);
      if (pattern.test(url)) calls++;
      return fetch(input, init);
    },
  };
}

async function loggedIn(account: Account, options: Partial<ConstructorParameters<typeof AppClient>[0]> = {}): Promise<AppClient> {
  const client = new AppClient({ baseUrl: service.baseUrl, ...options });
  await client.login(account.email, account.password);
  return client;
}

/** The session's access token, re-signed with the service's key to have expired 10 s ago. */
function expiredCopy(accessToken: string): string {
  const claims = jwt.decode(accessToken) as { sub: string; email: string; role: string; fam?: string };
  const now = Math.floor(Date.now() / 1000);
  return signWith(service.env.JWT_ACCESS_SECRET ?? '', { sub: claims.sub, email: claims.email, role: claims.role, ...(claims.fam !== undefined ? { fam: claims.fam } : {}), type: 'access', iat: now - 900, exp: now - 10 });
}

test('typed REST: log in, register a hub, list it, read it back', async () => {
  const account = await createAccount(service, smtp);
  const client = await loggedIn(account);
  const uuid = randomUUID();
  const registered = await client.api.POST('/devices/register', { body: { uuid, deviceId: 'HUB-A', name: 'Kitchen' } });
  expect(registered.response.status).toBe(201);
  expect(registered.data?.uuid).toBe(uuid);
  const list = await client.api.GET('/devices', { params: { query: { limit: 10, sort: 'name', order: 'asc' } } });
  expect(list.data?.data.map((d) => d.uuid)).toEqual([uuid]);
  const one = await client.api.GET('/devices/{id}', { params: { path: { id: uuid } } });
  expect(one.data?.name).toBe('Kitchen');
  const missing = await client.api.GET('/devices/{id}', { params: { path: { id: randomUUID() } } });
  expect(missing.response.status).toBe(404);
  expect(missing.error?.message).toBe('Device not found');
});

test('ten requests that find the access token expired cause one refresh, and all ten succeed', async () => {
  const account = await createAccount(service, smtp);
  const first = await loggedIn(account);
  const counting = countingFetch(/\/auth\/refresh$/);
  const store = memorySessionStore(null);
  const session = (await first.session()) as Session;
  store.current = { accessToken: expiredCopy(session.accessToken), refreshToken: session.refreshToken };
  const client = new AppClient({ baseUrl: service.baseUrl, session: store, fetch: counting.fetch });
  const answers = await Promise.all(Array.from({ length: 10 }, () => client.api.GET('/users/me')));
  expect(answers.map((a) => a.response.status)).toEqual(Array(10).fill(200));
  expect(answers.every((a) => a.data?.email === account.email)).toBe(true);
  expect(counting.calls()).toBe(1);
  expect(store.current?.refreshToken).not.toBe(session.refreshToken);
});

test('the same when the service is the one to say so (the app clock runs an hour late): one refresh, ten answers', async () => {
  const account = await createAccount(service, smtp);
  const first = await loggedIn(account);
  const session = (await first.session()) as Session;
  const counting = countingFetch(/\/auth\/refresh$/);
  const late = { now: () => Date.now() - 3_600_000, after: (ms: number, fire: () => void) => {
    const handle = setTimeout(fire, ms);
    return () => clearTimeout(handle);
  } };
  const client = new AppClient({ baseUrl: service.baseUrl, session: memorySessionStore({ accessToken: expiredCopy(session.accessToken), refreshToken: session.refreshToken }), fetch: counting.fetch, timers: late });
  const answers = await Promise.all(Array.from({ length: 10 }, () => client.api.GET('/devices', { params: { query: { limit: 5 } } })));
  expect(answers.map((a) => a.response.status)).toEqual(Array(10).fill(200));
  expect(counting.calls()).toBe(1);
});

test('a refresh refused (logged out elsewhere) ends the session and says so', async () => {
  const account = await createAccount(service, smtp);
  const client = await loggedIn(account);
  const session = (await client.session()) as Session;
  const other = new AppClient({ baseUrl: service.baseUrl, session: memorySessionStore({ accessToken: expiredCopy(session.accessToken), refreshToken: session.refreshToken }) });
  const ended: SessionEndedError[] = [];
  const third = new AppClient({ baseUrl: service.baseUrl, session: memorySessionStore({ accessToken: expiredCopy(session.accessToken), refreshToken: session.refreshToken }), onSessionEnded: (e) => ended.push(e) });
  await client.logout();
  await expect(other.api.GET('/users/me')).rejects.toBeInstanceOf(SessionEndedError);
  await expect(third.accessToken()).rejects.toMatchObject({ status: 401, message: 'Refresh token has been revoked' });
  expect(ended).toHaveLength(1);
});

test('the tunnel: typed messages, device:status as a callback, subscriptions made again after a reconnect', async () => {
  const account = await createAccount(service, smtp);
  const proxy = await startTcpProxy(service.baseUrl);
  cleanups.push(() => void proxy.close());
  const direct = await loggedIn(account);
  const uuid = randomUUID();
  await direct.api.POST('/devices/register', { body: { uuid, deviceId: 'HUB-T', name: 'Hall' } });
  const issued = await direct.api.POST('/devices/auth/{uuid}', { params: { path: { uuid } } });
  const deviceToken = issued.data?.token ?? '';

  const viaProxy = new AppClient({ baseUrl: proxy.baseUrl, session: memorySessionStore((await direct.session()) as Session) });
  const tunnel = viaProxy.tunnel({ reconnect: { baseMs: 100, capMs: 200 } });
  cleanups.push(() => tunnel.close());
  const statuses: DeviceStatus[] = [];
  const messages: MessageFromDevice[] = [];
  const events: AppTunnelEvent[] = [];
  tunnel.onStatus((s) => statuses.push(s));
  tunnel.onMessage((m) => messages.push(m));
  tunnel.on((e) => events.push(e));
  await tunnel.connected();
  const ack = await tunnel.subscribe(uuid);
  expect(ack).toEqual({ success: true, deviceUuid: uuid, isOnline: false, tunnelConnected: false });

  const hub = new HubClient({ baseUrl: service.baseUrl, uuid, tokens: { load: () => deviceToken, save: () => undefined } });
  cleanups.push(() => hub.stop());
  hub.onMessage((message, reply) => void reply({ type: 'pong', payload: message.payload }));
  await hub.start();
  await eventually(() => statuses.find((s) => s.tunnelConnected), 10_000, 'device:status tunnelConnected');

  // The app's connection drops; the client reconnects and subscribes again by itself.
  proxy.drop();
  await eventually(() => events.find((e) => e.type === 'resubscribed'), 10_000, 'resubscribed');
  expect(events.find((e) => e.type === 'resubscribed')).toEqual({ type: 'resubscribed', deviceUuids: [uuid] });
  const sent = await tunnel.send(uuid, 'ping', { n: 1 }, 'm-1');
  expect(sent).toEqual({ success: true, delivered: true });
  const reply = await eventually(() => messages.find((m) => m.replyTo === 'm-1'), 10_000, 'the reply');
  expect(reply).toMatchObject({ deviceUuid: uuid, from: 'device', type: 'pong', payload: { n: 1 } });

  // Still subscribed: the hub leaving arrives as device:status.
  const before = statuses.length;
  hub.stop();
  const dropped = await eventually(() => statuses.slice(before).find((s) => !s.tunnelConnected), 10_000, 'device:status on drop');
  expect(dropped.deviceUuid).toBe(uuid);
});

test('the tunnel handshake with an expired access token refreshes once and connects', async () => {
  const account = await createAccount(service, smtp);
  const first = await loggedIn(account);
  const session = (await first.session()) as Session;
  const counting = countingFetch(/\/auth\/refresh$/);
  const late = { now: () => Date.now() - 3_600_000, after: (ms: number, fire: () => void) => {
    const handle = setTimeout(fire, ms);
    return () => clearTimeout(handle);
  } };
  const client = new AppClient({ baseUrl: service.baseUrl, session: memorySessionStore({ accessToken: expiredCopy(session.accessToken), refreshToken: session.refreshToken }), fetch: counting.fetch, timers: late });
  const tunnel = client.tunnel();
  cleanups.push(() => tunnel.close());
  const events: AppTunnelEvent[] = [];
  tunnel.on((e) => events.push(e));
  await tunnel.connected();
  expect(counting.calls()).toBe(1);
  expect(events.filter((e) => e.type === 'reconnecting')).toEqual([{ type: 'reconnecting', attempt: 0, delayMs: 0, cause: 'unauthorized' }]);
});
