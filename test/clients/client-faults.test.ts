import { randomUUID } from 'node:crypto';
import jwt from 'jsonwebtoken';
import { AppClient, memorySessionStore, SessionEndedError, type AppTunnelEvent, type Session } from '@home-hub-cloud/app-client';
import { HubClient, type HubEvent } from '@home-hub-cloud/hub-client';
import type { DeviceStatus } from '@home-hub-cloud/tunnel-contract';
import { createAccount, type Account } from '../support/accounts';
import { GENEROUS_RATE_LIMITS, startTestService, type TestService } from '../support/harness';
import { startTestSmtpServer, type TestSmtpServer } from '../support/smtp';
import { signWith } from '../support/tunnel-fixture';
import { eventually } from '../support/client-timers';
import { startTcpProxy } from '../support/tcp-proxy';

/**
 * The clients when the service or the code around them misbehaves: a refresh refused under
 * ten parallel calls, a refresh answered with garbage, a token generation replaced, a
 * listener that throws.
 */

let smtp: TestSmtpServer;
let service: TestService;
const cleanups: Array<() => void> = [];

beforeAll(async () => {
  smtp = await startTestSmtpServer();
  service = await startTestService('embedded', { SMTP_URL: smtp.url, RATE_LIMITS: GENEROUS_RATE_LIMITS });
}, 60_000);
afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
});
afterAll(async () => {
  await service?.stop();
  await smtp?.stop();
});

function expiredCopy(accessToken: string): string {
  const claims = jwt.decode(accessToken) as { sub: string; email: string; role: string; fam?: string };
  const now = Math.floor(Date.now() / 1000);
  return signWith(service.env.JWT_ACCESS_SECRET ?? '', { sub: claims.sub, email: claims.email, role: claims.role, ...(claims.fam !== undefined ? { fam: claims.fam } : {}), type: 'access', iat: now - 900, exp: now - 10 });
}

async function loggedIn(account: Account): Promise<AppClient> {
  const client = new AppClient({ baseUrl: service.baseUrl });
  await client.login(account.email, account.password);
  return client;
}

test('ten parallel calls, an expired access token, a refresh refused: all ten fail as SessionEndedError, one refresh, onSessionEnded once', async () => {
  const account = await createAccount(service, smtp);
  const client = await loggedIn(account);
  const session = (await client.session()) as Session;
  let refreshes = 0;
  const ended: SessionEndedError[] = [];
  const stale = new AppClient({
    baseUrl: service.baseUrl,
    session: memorySessionStore({ accessToken: expiredCopy(session.accessToken), refreshToken: session.refreshToken }),
    fetch: (input, init) => {
      if ((input instanceof Request ? input.url : String(input)).endsWith('/auth/refresh')) refreshes++;
      return fetch(input, init);
    },
    onSessionEnded: (e) => ended.push(e),
  });
  await client.logout();
  const outcomes = await Promise.allSettled(Array.from({ length: 10 }, () => stale.api.GET('/users/me')));
  expect(outcomes.map((o) => (o.status === 'rejected' && o.reason instanceof SessionEndedError ? o.reason.message : o.status))).toEqual(Array(10).fill('Refresh token has been revoked'));
  expect(refreshes).toBe(1);
  expect(ended).toHaveLength(1);
  expect(await stale.session()).toBeNull();
});

test('ten parallel calls that refresh once leave the session family intact', async () => {
  const account = await createAccount(service, smtp);
  const first = await loggedIn(account);
  const session = (await first.session()) as Session;
  const store = memorySessionStore({ accessToken: expiredCopy(session.accessToken), refreshToken: session.refreshToken });
  const client = new AppClient({ baseUrl: service.baseUrl, session: store });
  const answers = await Promise.all(Array.from({ length: 10 }, () => client.api.GET('/users/me')));
  expect(answers.map((a) => a.response.status)).toEqual(Array(10).fill(200));
  // The family was not revoked: the new pair refreshes again and works.
  const next = await client.refresh();
  expect(next.refreshToken).not.toBe(session.refreshToken);
  expect((await client.api.GET('/devices')).response.status).toBe(200);
});

test('a refresh answered 502 with an HTML page: the calls fail plainly, the session is kept, and the next call recovers', async () => {
  const account = await createAccount(service, smtp);
  const first = await loggedIn(account);
  const session = (await first.session()) as Session;
  let broken = true;
  const ended: SessionEndedError[] = [];
  const client = new AppClient({
    baseUrl: service.baseUrl,
    session: memorySessionStore({ accessToken: expiredCopy(session.accessToken), refreshToken: session.refreshToken }),
    onSessionEnded: (e) => ended.push(e),
    fetch: (input, init) => {
      if (broken && (input instanceof Request ? input.url : String(input)).endsWith('/auth/refresh')) return Promise.resolve(new Response('<html>Bad gateway</html>', { status: 502, headers: { 'Content-Type': 'text/html' } }));
      return fetch(input, init);
    },
  });
  const outcomes = await Promise.allSettled(Array.from({ length: 3 }, () => client.api.GET('/users/me')));
  expect(outcomes.every((o) => o.status === 'rejected' && !(o.reason instanceof SessionEndedError))).toBe(true);
  expect(await client.session()).not.toBeNull();
  broken = false;
  expect((await client.api.GET('/users/me')).response.status).toBe(200);
  expect(ended).toEqual([]);
});

test('a new token generation issued for the device: the hub with the old token reports revoked and stops, without looping', async () => {
  const account = await createAccount(service, smtp);
  const app = await loggedIn(account);
  const uuid = randomUUID();
  await app.api.POST('/devices/register', { body: { uuid, deviceId: 'HUB-G', name: 'Gen' } });
  const old = (await app.api.POST('/devices/auth/{uuid}', { params: { path: { uuid } } })).data?.token ?? '';
  let renewals = 0;
  const events: HubEvent[] = [];
  const hub = new HubClient({
    baseUrl: service.baseUrl,
    uuid,
    tokens: { load: () => old, save: () => undefined },
    heartbeatIntervalMs: 200,
    reconnect: { baseMs: 50, capMs: 100 },
    fetch: (input, init) => {
      if (input.endsWith('/renew')) renewals++;
      return fetch(input, init);
    },
  });
  cleanups.push(() => hub.stop());
  hub.on((e) => events.push(e));
  await hub.start();
  await eventually(() => hub.connected, 10_000, 'connected');
  expect((await app.api.POST('/devices/auth/{uuid}', { params: { path: { uuid } } })).response.status).toBe(201);
  const stopped = await hub.stopped();
  expect(stopped.reason).toBe('revoked');
  expect(renewals).toBe(1);
  expect(events.filter((e) => e.type === 'stopped')).toHaveLength(1);
});

test('a heartbeat answered 503 with garbage and a renewal answered 201 with garbage: reported, retried, never fatal', async () => {
  const account = await createAccount(service, smtp);
  const app = await loggedIn(account);
  const uuid = randomUUID();
  await app.api.POST('/devices/register', { body: { uuid, deviceId: 'HUB-J', name: 'Junk' } });
  let token: string | null = (await app.api.POST('/devices/auth/{uuid}', { params: { path: { uuid } } })).data?.token ?? '';
  let junk = 4;
  const events: HubEvent[] = [];
  const hub = new HubClient({
    baseUrl: service.baseUrl,
    uuid,
    tokens: { load: () => token, save: (t) => void (token = t) },
    heartbeatIntervalMs: 100,
    renewBetween: [0, 0],
    renewRetry: { baseMs: 50, capMs: 100 },
    fetch: (input, init) => {
      const url = input;
      if (junk > 0 && (url.endsWith('/renew') || url.includes('/heartbeat/'))) {
        junk--;
        return Promise.resolve(new Response(url.endsWith('/renew') ? '{"tok' : 'oops', { status: url.endsWith('/renew') ? 201 : 503 }));
      }
      return fetch(input, init);
    },
  });
  cleanups.push(() => hub.stop());
  hub.on((e) => events.push(e));
  await hub.start();
  await eventually(() => events.some((e) => e.type === 'renewed') && events.some((e) => e.type === 'heartbeat' && e.ok), 10_000, 'renewed and beating');
  expect(events.filter((e) => e.type === 'stopped')).toEqual([]);
  expect(events.some((e) => e.type === 'error' && e.where === 'renew')).toBe(true);
});

test('a tunnel listener that throws does not stop the other listeners nor the re-subscription after a reconnect', async () => {
  const account = await createAccount(service, smtp);
  const direct = await loggedIn(account);
  const uuid = randomUUID();
  await direct.api.POST('/devices/register', { body: { uuid, deviceId: 'HUB-L', name: 'Loud' } });
  const proxy = await startTcpProxy(service.baseUrl);
  cleanups.push(() => void proxy.close());
  const client = new AppClient({ baseUrl: proxy.baseUrl, session: memorySessionStore((await direct.session()) as Session) });
  const tunnel = client.tunnel({ reconnect: { baseMs: 50, capMs: 100 } });
  cleanups.push(() => tunnel.close());
  const events: AppTunnelEvent[] = [];
  tunnel.on(() => {
    throw new Error('an app bug');
  });
  tunnel.on((e) => events.push(e));
  const statuses: DeviceStatus[] = [];
  tunnel.onStatus(() => {
    throw new Error('another app bug');
  });
  tunnel.onStatus((s) => statuses.push(s));
  await tunnel.connected();
  expect((await tunnel.subscribe(uuid)).success).toBe(true);
  proxy.drop();
  await eventually(() => events.find((e) => e.type === 'resubscribed'), 10_000, 'resubscribed');
  const issued = (await direct.api.POST('/devices/auth/{uuid}', { params: { path: { uuid } } })).data?.token ?? '';
  const hub = new HubClient({ baseUrl: service.baseUrl, uuid, tokens: { load: () => issued, save: () => undefined } });
  cleanups.push(() => hub.stop());
  await hub.start();
  await eventually(() => statuses.find((s) => s.tunnelConnected), 10_000, 'device:status to the second listener');
});
