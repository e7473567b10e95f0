import { randomUUID } from 'node:crypto';
import { api, CRM_KEY, createUser, MODES, startTestService, type Mode, type TestService } from '../support/harness';
import { pathVariants, rawRequest } from '../support/path-variants';
import { twoProcesses } from '../support/two-processes';

/** Each tier at its boundary, with limits made short through RATE_LIMITS. */
const LIMITS = 'login=3/60,refresh=3/60,auth=2/60,sync=1000/60,register=2/60,heartbeat=3/60,general=4/60,ops=1000/60';

let ipCounter = 1;
/** A fresh client IP per test (TRUST_PROXY is on), so tests never share a budget by accident. */
const freshIp = (): string => `10.${Math.floor(ipCounter / 250)}.${ipCounter++ % 250}.7`;

const from = (ip: string) => ({ 'X-Forwarded-For': ip });

type Call = () => Promise<{ status: number; body: unknown; headers: Headers }>;

/** Calls `limit` times (each must not be a 429), then once more, which must be the exact 429. */
async function expectBoundary(call: Call, limit: number): Promise<void> {
  for (let i = 0; i < limit; i++) {
    const res = await call();
    expect(res.status).not.toBe(429);
    expect(res.headers.get('x-ratelimit-limit')).toBe(String(limit));
    expect(res.headers.get('x-ratelimit-remaining')).toBe(String(limit - i - 1));
  }
  const refused = await call();
  expect(refused.status).toBe(429);
  const body = refused.body as { retryAfter: number };
  expect(body).toEqual({ statusCode: 429, message: 'Rate limit exceeded', error: 'Too Many Requests', retryAfter: expect.any(Number) });
  expect(body.retryAfter).toBeGreaterThanOrEqual(1);
  expect(refused.headers.get('retry-after')).toBe(String(body.retryAfter));
  expect(refused.headers.get('x-ratelimit-remaining')).toBe('0');
  expect(refused.headers.get('x-ratelimit-limit')).toBe(String(limit));
  const reset = Number(refused.headers.get('x-ratelimit-reset'));
  const now = Date.now() / 1000;
  expect(reset).toBeGreaterThan(now);
  expect(reset).toBeLessThan(now + 3700);
  expect(refused.headers.get('x-request-id')).toBeTruthy();
}

describe.each<Mode>(MODES)('rate limits (%s mode)', (mode) => {
  let service: TestService;

  beforeAll(async () => {
    service = await startTestService(mode, { RATE_LIMITS: LIMITS, TRUST_PROXY: 'true' });
  }, 60_000);
  afterAll(() => service?.stop());


  test('login: 3 per IP, then 429; another IP still passes', async () => {
    const ip = freshIp();
    const login = () => api(service, 'POST', '/auth/login', { headers: from(ip), body: { email: 'nobody@example.com', password: 'wrong-password' } });
    await expectBoundary(login, 3);
    // The attacker's spellings of the same route are the same tier and the same budget.
    for (const path of pathVariants('/api/v1/auth/login').routed) {
      const res = await rawRequest(service, 'POST', path, { headers: from(ip), body: { email: 'nobody@example.com', password: 'wrong-password' } });
      expect({ path, status: res.status }).toEqual({ path, status: 429 });
    }
    const other = await api(service, 'POST', '/auth/login', { headers: from(freshIp()), body: { email: 'nobody@example.com', password: 'wrong-password' } });
    expect(other.status).toBe(401);
  });

  test('refresh: 3 per IP', async () => {
    const ip = freshIp();
    await expectBoundary(() => api(service, 'POST', '/auth/refresh', { headers: from(ip), body: { refreshToken: 'not.a.token' } }), 3);
  });

  test('password reset counts as authentication: 2 per IP', async () => {
    const ip = freshIp();
    await expectBoundary(() => api(service, 'POST', '/auth/password-reset/request', { headers: from(ip), body: { email: `${randomUUID()}@example.com` } }), 2);
  });

  test('register: per user', async () => {
    const ip = freshIp();
    const [a, b] = await Promise.all([createUser(service), createUser(service)]);
    const register = (token: string) =>
      api(service, 'POST', '/devices/register', { token, headers: from(ip), body: { uuid: randomUUID(), deviceId: 'hub', name: 'Hub' } });
    await expectBoundary(() => register(a.accessToken), 2);
    expect((await register(b.accessToken)).status).toBe(201);
  });

  test('heartbeat: per device', async () => {
    const owner = await createUser(service);
    const uuids = [randomUUID(), randomUUID()];
    const tokens: string[] = [];
    for (const uuid of uuids) {
      const reg = await api(service, 'POST', '/devices/register', { token: owner.accessToken, headers: from(freshIp()), body: { uuid, deviceId: 'hub', name: 'Hub' } });
      expect(reg.status).toBe(201);
      const auth = await api(service, 'POST', `/devices/auth/${uuid}`, { token: owner.accessToken, headers: from(freshIp()) });
      tokens.push((auth.body as { token: string }).token);
    }
    const ip = freshIp();
    const beat = (i: number) => api(service, 'POST', `/devices/heartbeat/${uuids[i]}`, { token: tokens[i], headers: from(ip), body: {} });
    await expectBoundary(() => beat(0), 3);
    expect((await beat(1)).status).toBe(200);
  });

  test('everything else: per user when authenticated, per IP otherwise — failed authentication counts too', async () => {
    const ip = freshIp();
    const [a, b] = await Promise.all([createUser(service), createUser(service)]);
    await expectBoundary(() => api(service, 'GET', '/devices', { token: a.accessToken, headers: from(ip) }), 4);
    expect((await api(service, 'GET', '/devices', { token: b.accessToken, headers: from(ip) })).status).toBe(200);

    const anonymousIp = freshIp();
    await expectBoundary(() => api(service, 'GET', '/users/me', { token: 'bad.token.here', headers: from(anonymousIp) }), 4);
  });

  test('every response carries the headers, errors and unknown routes included', async () => {
    for (const [method, path] of [
      ['GET', '/nothing-here'],
      ['GET', '/health'],
      ['POST', '/auth/login'],
    ] as const) {
      const res = await api(service, method, path, { headers: from(freshIp()) });
      expect(res.headers.get('x-ratelimit-limit')).toMatch(/^\d+$/);
      expect(res.headers.get('x-ratelimit-remaining')).toMatch(/^\d+$/);
      expect(res.headers.get('x-ratelimit-reset')).toMatch(/^\d{10}$/);
      expect(res.headers.get('x-request-id')).toBeTruthy();
    }
  });
});

describe.each<Mode>(MODES)('sync-customer limit (%s mode)', (mode) => {
  let service: TestService;
  beforeAll(async () => {
    service = await startTestService(mode, { RATE_LIMITS: 'sync=3/60,auth=2/60', TRUST_PROXY: 'true' });
  }, 60_000);
  afterAll(() => service?.stop());

  test('sync-customer: per API key, not per IP; a wrong key counts per IP', async () => {
    const ip = freshIp();
    let id = 700_000 + Math.floor(Math.random() * 100_000);
    const sync = (key: string, sourceIp: string) =>
      api(service, 'POST', '/auth/sync-customer', {
        headers: { 'X-Internal-Api-Key': key, ...from(sourceIp) },
        body: { id: id++, first_name: 'R', last_name: 'L', email: `${randomUUID()}@example.com`, active: true },
      });
    // One key from changing addresses still shares one budget.
    await expectBoundary(() => sync(CRM_KEY, freshIp()), 3);
    expect((await sync('test-crm-key-2', ip)).status).toBe(201);
    const badIp = freshIp();
    await expectBoundary(() => sync('wrong-key', badIp), 2);
  });

});

describe('rate-limit windows and client addresses (embedded mode)', () => {
  test('a window resets', async () => {
    // A window long enough to hold the boundary's three logins (each hashes a password) on a
    // busy machine: with 1 s they took longer there, and the third was rightly let through.
    // Its end is waited for, not slept through.
    const service = await startTestService('embedded', { RATE_LIMITS: 'login=2/5' });
    try {
      const login = () => api(service, 'POST', '/auth/login', { body: { email: 'nobody@example.com', password: 'wrong-password' } });
      await expectBoundary(login, 2);
      const deadline = Date.now() + 20_000;
      let status = 429;
      while (status === 429 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 200));
        status = (await login()).status;
      }
      expect(status).toBe(401);
    } finally {
      await service.stop();
    }
  });

  test('X-Forwarded-For is ignored unless TRUST_PROXY allows it', async () => {
    const service = await startTestService('embedded', { RATE_LIMITS: 'login=2/60' });
    try {
      const login = () =>
        api(service, 'POST', '/auth/login', { headers: { 'X-Forwarded-For': freshIp() }, body: { email: 'nobody@example.com', password: 'wrong-password' } });
      await expectBoundary(login, 2);
    } finally {
      await service.stop();
    }
  });
});

describe('rate limits across processes (distributed mode)', () => {
  // No expiry role here: this is about the API's counters (BullMQ's own outage handling is tested with presence).
  const { a: first, b: second } = twoProcesses({ env: { RATE_LIMITS: 'login=4/60,general=1000/60', ROLES: 'api,projector' } });

  const login = (on: TestService) => api(on, 'POST', '/auth/login', { body: { email: 'nobody@example.com', password: 'wrong-password' } });

  test('two processes share one budget', async () => {
    const statuses = [];
    for (let i = 0; i < 5; i++) statuses.push((await login(i % 2 === 0 ? first() : second())).status);
    expect(statuses).toEqual([401, 401, 401, 401, 429]);
  });

  test('Redis briefly down: requests are still answered (fail open, logged), counting resumes when it is back', async () => {
    const redis = first().redis;
    if (redis === null) throw new Error('no private redis');
    const user = await createUser(first());
    await redis.kill();
    try {
      for (let i = 0; i < 3; i++) {
        const res = await api(first(), 'GET', '/devices', { token: user.accessToken });
        expect(res.status).toBe(200);
      }
      expect(first().logs()).toContain('rate-limit store unreachable');
    } finally {
      await redis.restart();
    }
    const deadline = Date.now() + 10_000;
    let statuses: number[] = [];
    while (Date.now() < deadline) {
      const res = await login(second());
      statuses.push(res.status);
      if (res.status === 429) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    // Back in business: the fresh Redis counts again and refuses the fifth login.
    expect(statuses.at(-1)).toBe(429);
    statuses = statuses.filter((s) => s !== 429);
    expect(statuses.every((s) => s === 401)).toBe(true);
  }, 30_000);
});
