import { availableParallelism } from 'node:os';
import { api, createUser, MODES, startTestService, type Mode, type TestService } from '../support/harness';
import { TIERS } from '../../src/ratelimit/limiter';
import { allEvents, createAccount, login, type Account } from '../support/accounts';
import { scrape, type Scrape } from '../support/metrics';
import { startTestSmtpServer, type TestSmtpServer } from '../support/smtp';
import { connect, deviceToken, registerHub, request, type Probe } from '../support/tunnel';

/**
 * `GET /metrics` against what the test did (decisions §8): every counter rises by exactly
 * the number of things done, every gauge reads what is open or waiting now.
 */

const HEARTBEAT_ROUTE = { method: 'POST', route: '/api/v1/devices/heartbeat/:uuid', status: '200' };

/** Everything but the heartbeat tier stays out of reach; the heartbeat tier is the spec's 10 per minute per device. */
const LIMITS = TIERS.map((tier) => (tier === 'heartbeat' ? 'heartbeat=10/60' : `${tier}=1000000/60`)).join(',');

async function waitForScrape(service: TestService, until: (s: Scrape) => boolean, what: string): Promise<Scrape> {
  const deadline = Date.now() + 5000;
  for (;;) {
    const s = await scrape(service);
    if (until(s)) return s;
    if (Date.now() > deadline) throw new Error(`metrics never showed ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe.each<Mode>(MODES)('metrics agree with what happened (%s mode)', (mode) => {
  let smtp: TestSmtpServer;
  let service: TestService;
  let account: Account;

  beforeAll(async () => {
    smtp = await startTestSmtpServer();
    service = await startTestService(mode, { SMTP_URL: smtp.url, RATE_LIMITS: LIMITS });
    account = await createAccount(service, smtp);
  }, 60_000);
  afterAll(async () => {
    await service?.stop();
    await smtp?.stop();
  });

  test('the exposition is Prometheus text with the process defaults', async () => {
    const res = await fetch(`${service.baseUrl}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    const s = await scrape(service);
    expect(s.value('process_cpu_user_seconds_total')).toBeGreaterThan(0);
    expect(s.value('nodejs_heap_size_used_bytes')).toBeGreaterThan(0);
    // The scrape itself is the one request in flight.
    expect(s.value('http_requests_in_flight')).toBe(1);
    // Series that have not counted anything yet still exist, at 0.
    expect(s.text).toMatch(/^tunnel_sockets\{.*kind="device".*\} \d+$/m);
    // Nothing whose scrape walks every socket of the process.
    expect(s.text).not.toMatch(/^nodejs_active_(handles|resources)/m);
    expect(s.text).toMatch(/^process_open_fds/m);
    expect(s.text).toMatch(/^logins_total\{.*outcome="failed".*\} \d+$/m);
  });

  test('logins: succeeded and failed, one each per answer', async () => {
    const before = await scrape(service);
    for (let i = 0; i < 3; i++) await login(service, account.email, account.password);
    for (const body of [
      { email: account.email, password: 'not-the-password-1' },
      { email: account.email, password: 'not-the-password-2' },
      { email: 'nobody.at.all@example.com', password: 'whatever-password' },
    ]) {
      expect((await api(service, 'POST', '/auth/login', { body })).status).toBe(401);
    }
    // Refused by validation: not a login attempt at all.
    expect((await api(service, 'POST', '/auth/login', { body: { email: 'not-an-email' } })).status).toBe(400);
    const after = await scrape(service);
    expect(after.value('logins_total', { outcome: 'succeeded' }) - before.value('logins_total', { outcome: 'succeeded' })).toBe(3);
    expect(after.value('logins_total', { outcome: 'failed' }) - before.value('logins_total', { outcome: 'failed' })).toBe(3);
    expect(after.value('http_requests_total', { route: '/api/v1/auth/login', status: '201' }) - before.value('http_requests_total', { route: '/api/v1/auth/login', status: '201' })).toBe(3);
    expect(after.value('http_requests_total', { route: '/api/v1/auth/login', status: '401' }) - before.value('http_requests_total', { route: '/api/v1/auth/login', status: '401' })).toBe(3);
  }, 30_000);

  test('password hashes waiting: logins beyond the hashing slots queue, and the queue drains', async () => {
    const burst = availableParallelism() * 3 + 4;
    let answered = 0;
    const logins = Array.from({ length: burst }, () =>
      api(service, 'POST', '/auth/login', { body: { email: account.email, password: 'a-wrong-password-to-verify' } }).then((res) => {
        answered++;
        return res.status;
      }),
    );
    let most = 0;
    while (answered < burst) {
      most = Math.max(most, (await scrape(service)).value('password_hashes_waiting'));
    }
    expect(await Promise.all(logins)).toEqual(Array.from({ length: burst }, () => 401));
    expect(most).toBeGreaterThan(0);
    expect((await scrape(service)).value('password_hashes_waiting')).toBe(0);
  }, 30_000);

  test('a request whose client went away before the answer is counted and logged with status 499', async () => {
    const route = { method: 'POST', route: '/api/v1/auth/login' };
    const before = await scrape(service);
    // Enough logins queued behind the hashing slots that many are still waiting when the clients leave.
    const burst = availableParallelism() * 10 + 10;
    const abort = new AbortController();
    const logins = Array.from({ length: burst }, () =>
      fetch(`${service.baseUrl}/api/v1/auth/login`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ email: account.email, password: account.password }),
        signal: abort.signal,
      }).then(
        async (res) => {
          await res.text();
          return res.status;
        },
        () => 'aborted' as const,
      ),
    );
    // Several logins inside the service and not answered yet, then the clients leave. (Waiting for
    // every login to be inside first raced: arrivals trickle in, and when the service answered as
    // fast as they came, none was left to abort.)
    for (let waiting = 0; waiting < 3; ) {
      waiting = (await scrape(service)).value('http_requests_in_flight') - 1;
    }
    abort.abort();
    const outcomes = await Promise.all(logins);
    const aborted = outcomes.filter((o) => o === 'aborted').length;
    const answered = outcomes.filter((o) => o === 201).length;
    expect(aborted).toBeGreaterThan(0);
    // Each login that reached the service is counted once, as 201 or, when its client had gone
    // before the answer was written, 499; a login aborted before it arrived is not counted at all.
    const rose = (s: Scrape, status: string): number => s.value('http_requests_total', { ...route, status }) - before.value('http_requests_total', { ...route, status });
    const after = await waitForScrape(service, (s) => s.value('http_requests_in_flight') === 1, 'every login answered or abandoned');
    expect(rose(after, '201')).toBeGreaterThanOrEqual(answered);
    expect(rose(after, '201') + rose(after, '499')).toBeLessThanOrEqual(burst);
    // An answer written just before its client left is a 201 the client never read.
    expect(rose(after, '499')).toBeGreaterThan(0);
    expect(rose(after, '499')).toBeLessThanOrEqual(aborted);
    expect(service.logs()).toMatch(/"route":"\/api\/v1\/auth\/login","status":499/);
  }, 30_000);

  test('heartbeats: N accepted → the counter rose by N; refusals counted by tier', async () => {
    const owner = await createUser(service);
    const [steady, chatty] = [await registerHub(service, owner), await registerHub(service, owner)];
    const [steadyToken, chattyToken] = [await deviceToken(service, steady, owner), await deviceToken(service, chatty, owner)];
    const before = await scrape(service);
    const statuses: number[] = [];
    for (let i = 0; i < 7; i++) statuses.push((await api(service, 'POST', `/devices/heartbeat/${steady.uuid}`, { token: steadyToken })).status);
    for (let i = 0; i < 13; i++) statuses.push((await api(service, 'POST', `/devices/heartbeat/${chatty.uuid}`, { token: chattyToken })).status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(17);
    expect(statuses.filter((s) => s === 429)).toHaveLength(3);

    const after = await scrape(service);
    const rose = (name: string, labels?: Record<string, string>): number => after.value(name, labels) - before.value(name, labels);
    expect(rose('heartbeats_accepted_total')).toBe(17);
    expect(rose('rate_limit_rejections_total', { tier: 'heartbeat' })).toBe(3);
    expect(rose('rate_limit_rejections_total')).toBe(3);
    expect(rose('http_requests_total', HEARTBEAT_ROUTE)).toBe(17);
    expect(rose('http_request_duration_seconds_count', HEARTBEAT_ROUTE)).toBe(17);
    expect(rose('http_request_duration_seconds_sum', HEARTBEAT_ROUTE)).toBeGreaterThan(0);
    // The first heartbeat of each device appended DeviceWentOnline; every append is timed.
    expect(rose('event_store_append_seconds_count')).toBeGreaterThanOrEqual(2);
    // Every write was answered after its projection: nothing this process appended is left waiting.
    const settledLag = await waitForScrape(service, (s) => s.value('projector_lag_events') === 0, 'no lag');
    expect(settledLag.value('projector_lag_milliseconds')).toBe(0);
  }, 30_000);

  test('tunnel: sockets by kind while open, relayed messages by direction', async () => {
    const owner = await createUser(service);
    const hub = await registerHub(service, owner);
    const token = await deviceToken(service, hub, owner);
    const before = await scrape(service);
    const opened: Probe[] = [];
    try {
      const device = await connect(service, token);
      opened.push(device);
      const apps = [await connect(service, owner.accessToken), await connect(service, owner.accessToken)];
      opened.push(...apps);
      const open = await waitForScrape(service, (s) => s.value('tunnel_sockets', { kind: 'app' }) === 2, 'two app sockets');
      expect(open.value('tunnel_sockets', { kind: 'device' })).toBe(1);

      const [app] = apps as [Probe, Probe];
      for (const a of apps) expect(await request(a, 'tunnel:subscribe', { deviceUuid: hub.uuid })).toMatchObject({ success: true });
      for (let i = 0; i < 4; i++) {
        expect(await request(app, 'tunnel:message', { deviceUuid: hub.uuid, type: 'ping', payload: { i } })).toEqual({ success: true, delivered: true });
      }
      for (let i = 0; i < 4; i++) await device.next('tunnel:message');
      for (let i = 0; i < 2; i++) {
        expect(await request(device, 'tunnel:message', { type: 'pong', payload: { i } })).toEqual({ success: true, delivered: true });
      }
      // One relay, two subscribed sockets: counted once.
      for (const a of apps) for (let i = 0; i < 2; i++) await a.next('tunnel:message');

      const after = await scrape(service);
      // One device handshake went through admission; app handshakes never do.
      expect(after.value('tunnel_device_handshakes_total', { outcome: 'admitted' }) - before.value('tunnel_device_handshakes_total', { outcome: 'admitted' })).toBe(1);
      expect(after.value('tunnel_device_handshakes_total', { outcome: 'refused' }) - before.value('tunnel_device_handshakes_total', { outcome: 'refused' })).toBe(0);
      expect(after.value('tunnel_device_handshake_admission', { measure: 'in_flight' })).toBe(0);
      expect(after.value('tunnel_device_handshake_admission', { measure: 'pace' })).toBeGreaterThan(0);
      expect(after.value('tunnel_messages_relayed_total', { direction: 'to_device' }) - before.value('tunnel_messages_relayed_total', { direction: 'to_device' })).toBe(4);
      expect(after.value('tunnel_messages_relayed_total', { direction: 'to_apps' }) - before.value('tunnel_messages_relayed_total', { direction: 'to_apps' })).toBe(2);
    } finally {
      for (const p of opened) p.close();
    }
    const closed = await waitForScrape(service, (s) => s.value('tunnel_sockets') === 0, 'every socket closed');
    expect(closed.value('tunnel_sockets', { kind: 'device' })).toBe(0);
    // Connects and disconnects are logged, one line each.
    const lines = service
      .logs()
      .split('\n')
      .filter((line) => line.includes(hub.uuid) && line.includes('"tunnel: '));
    expect(lines.filter((line) => line.includes('"tunnel: connected"'))).toHaveLength(1);
    expect(lines.filter((line) => line.includes('"tunnel: disconnected"'))).toHaveLength(1);
  }, 30_000);
});

describe('projector lag (distributed mode: an API process with no projector running)', () => {
  let api1: TestService;
  let projector: TestService | null = null;

  beforeAll(async () => {
    api1 = await startTestService('distributed', { ROLES: 'api', READ_YOUR_WRITES_TIMEOUT_MS: '100' });
  }, 60_000);
  afterAll(async () => {
    await projector?.stop();
    await api1?.stop();
  });

  test('the events it appended are lag until a projector applies them', async () => {
    const idle = await scrape(api1);
    expect(idle.value('projector_lag_events')).toBe(0);
    expect(idle.value('projector_lag_milliseconds')).toBe(0);

    // Three users through the CRM endpoint: their events (the user's, its e-mail reservation's) nobody projects.
    const stored = (await allEvents(api1)).length;
    for (let i = 0; i < 3; i++) await createUser(api1);
    const appended = (await allEvents(api1)).length - stored;
    expect(appended).toBeGreaterThanOrEqual(3);
    await new Promise((resolve) => setTimeout(resolve, 100));
    const behind = await scrape(api1);
    expect(behind.value('projector_lag_events')).toBe(appended);
    expect(behind.value('projector_lag_milliseconds')).toBeGreaterThanOrEqual(100);

    // A projector process starts and applies them: the lag this process reports goes to 0.
    projector = await api1.startAnother({ ROLES: 'projector' });
    const caughtUp = await waitForScrape(api1, (s) => s.value('projector_lag_events') === 0, 'the lag gone');
    expect(caughtUp.value('projector_lag_milliseconds')).toBe(0);

    // The projector process has no API, but answers its operator: metrics, health and readiness.
    const own = await scrape(projector);
    expect(own.value('process_cpu_user_seconds_total')).toBeGreaterThan(0);
    expect((await api(projector, 'GET', '/health')).body).toEqual({ status: 'ok', service: 'home-hub-cloud' });
    expect((await api(projector, 'GET', '/health/ready')).status).toBe(200);
    expect((await api(projector, 'GET', '/devices')).status).toBe(404);
    expect((await api(projector, 'POST', '/auth/login', { body: { email: 'a@example.com', password: 'whatever-1' } })).status).toBe(404);
  }, 60_000);
});
