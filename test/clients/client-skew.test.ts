import { AppClient, memorySessionStore, type Session } from '@home-hub-cloud/app-client';
import { HubClient, type HubEvent, type Timers, type TokenStore } from '@home-hub-cloud/hub-client';
import { createAccount } from '../support/accounts';
import { createUser, GENEROUS_RATE_LIMITS, startTestService, type TestService } from '../support/harness';
import { startTestSmtpServer, type TestSmtpServer } from '../support/smtp';
import { deviceToken, registerHub } from '../support/tunnel';
import { eventually } from '../support/client-timers';

/**
 * The clients against the real service when things are not as they should be: a client
 * clock far from the service's, a session shared with another instance of the app, a
 * client stopped before it finished starting.
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

/** Real timers on a clock `offsetMs` away from the real one; every delay asked for is recorded. */
function skewedTimers(offsetMs: number): Timers & { asked: number[] } {
  const handles = new Set<NodeJS.Timeout>();
  cleanups.push(() => handles.forEach((h) => clearTimeout(h)));
  const asked: number[] = [];
  return {
    asked,
    now: () => Date.now() + offsetMs,
    after: (ms, fire) => {
      asked.push(ms);
      const handle = setTimeout(() => {
        handles.delete(handle);
        fire();
      }, Math.min(ms, 2 ** 31 - 1));
      handles.add(handle);
      return () => {
        clearTimeout(handle);
        handles.delete(handle);
      };
    },
  };
}

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

function store(token: string | null): TokenStore {
  let current = token;
  return { load: () => current, save: (t) => void (current = t) };
}

async function hubWithToken(): Promise<{ uuid: string; token: string }> {
  const owner = await createUser(service);
  const hub = await registerHub(service, owner);
  return { uuid: hub.uuid, token: await deviceToken(service, hub, owner) };
}

const HOUR = 3_600_000;

test('a hub whose clock runs 23 h ahead renews once, not in a loop', async () => {
  const { uuid, token } = await hubWithToken();
  const renewals = countingFetch(/\/renew$/);
  const events: HubEvent[] = [];
  const client = new HubClient({ baseUrl: service.baseUrl, uuid, tokens: store(token), timers: skewedTimers(23 * HOUR), fetch: renewals.fetch });
  cleanups.push(() => client.stop());
  client.on((e) => events.push(e));
  await client.start();
  await eventually(() => client.connected && events.some((e) => e.type === 'heartbeat'), 10_000, 'connected and beating');
  // Whatever the client did first, a fresh token from the service is not "already due" for renewal.
  await eventually(() => events.some((e) => e.type === 'heartbeat') && renewals.calls() <= 1 && events.filter((e) => e.type === 'renewed').length === renewals.calls(), 5_000, 'renewals settled');
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  expect(renewals.calls()).toBeLessThanOrEqual(1);
  expect(events.filter((e) => e.type === 'stopped')).toEqual([]);
});

test('a hub whose clock runs 20 h late still schedules its renewal inside the token lifetime (by the service clock)', async () => {
  const { uuid, token } = await hubWithToken();
  const timers = skewedTimers(-20 * HOUR);
  const events: HubEvent[] = [];
  const client = new HubClient({ baseUrl: service.baseUrl, uuid, tokens: store(token), timers, heartbeatIntervalMs: 60_000 });
  cleanups.push(() => client.stop());
  client.on((e) => events.push(e));
  await client.start();
  await eventually(() => events.some((e) => e.type === 'heartbeat'), 10_000, 'a heartbeat');
  // The renewal armed last (after the service's clock was seen) must fall inside 80 % of the 24 h lifetime from now.
  const renewalDelays = timers.asked.filter((ms) => ms > 60 * 60_000);
  expect(renewalDelays.length).toBeGreaterThan(0);
  expect(renewalDelays[renewalDelays.length - 1]).toBeLessThanOrEqual(0.8 * 24 * HOUR);
});

test('stop() while start() is still loading the token: no tunnel, no timers afterwards', async () => {
  const { uuid, token } = await hubWithToken();
  let release: (t: string) => void = () => undefined;
  const loading = new Promise<string>((resolve) => (release = resolve));
  const timers = skewedTimers(0);
  const client = new HubClient({ baseUrl: service.baseUrl, uuid, tokens: { load: () => loading, save: () => undefined }, timers });
  cleanups.push(() => client.stop());
  const events: HubEvent[] = [];
  client.on((e) => events.push(e));
  const starting = client.start();
  client.stop();
  release(token);
  await starting;
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  expect(client.connected).toBe(false);
  expect(events.map((e) => e.type)).toEqual(['stopped']);
  expect(timers.asked).toEqual([]);
});

test('an app whose clock runs an hour ahead does not refresh before every request', async () => {
  const account = await createAccount(service, smtp);
  const refreshes = countingFetch(/\/auth\/refresh$/);
  const client = new AppClient({ baseUrl: service.baseUrl, fetch: refreshes.fetch, timers: skewedTimers(HOUR) });
  await client.login(account.email, account.password);
  for (let i = 0; i < 5; i++) {
    const answer = await client.api.GET('/users/me');
    expect(answer.response.status).toBe(200);
  }
  expect(refreshes.calls()).toBe(0);
});

test('two app instances sharing one session store: the refresh token rotated by one is not replayed by the other', async () => {
  const account = await createAccount(service, smtp);
  const shared = memorySessionStore(null);
  const first = new AppClient({ baseUrl: service.baseUrl, session: shared });
  await first.login(account.email, account.password);
  const second = new AppClient({ baseUrl: service.baseUrl, session: shared });
  const before = (await second.session()) as Session;
  // The first instance refreshes (e.g. its timer fired); the second still holds the old pair in memory.
  await first.refresh();
  expect(shared.current?.refreshToken).not.toBe(before.refreshToken);
  // Then the second one needs a refresh too (say its tunnel handshake was refused).
  const fresh = await second.refresh(before.accessToken);
  expect(fresh.refreshToken).not.toBe(before.refreshToken);
  // Both instances still work, and the session was not revoked.
  expect((await first.api.GET('/users/me')).response.status).toBe(200);
  expect((await second.api.GET('/users/me')).response.status).toBe(200);
  await expect(first.refresh()).resolves.toMatchObject({ accessToken: expect.any(String) });
  await expect(second.refresh()).resolves.toMatchObject({ accessToken: expect.any(String) });
});
