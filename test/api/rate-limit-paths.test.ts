import { randomUUID } from 'node:crypto';
import { tieredRouteOf, TIERED_ROUTES } from '../../src/ratelimit/routes';
import { createUser, MODES, startTestService, type Mode, type TestService } from '../support/harness';
import { expectOneTier, isUnknownRoute, pathVariants, rawRequest } from '../support/path-variants';
import { deviceToken, registerHub } from '../support/tunnel';

/**
 * The tier of a request is the tier of the route that answers it, however its path is
 * spelled (decisions §6): `/auth/Login`, `/AUTH/LOGIN/` count as login; `//auth//login`,
 * `/auth%2Flogin`, which no route answers, get the 404 of an unknown route in the general
 * tier and never reach the handler. Every tiered route, in both limiter stores; the erasure
 * and export routes also refuse every spelling without the access token.
 */

// Distinct limits, so the X-RateLimit-Limit header names the tier that counted.
const LIMITS = 'login=40/60,refresh=41/60,auth=42/60,sync=1000/60,register=43/60,heartbeat=44/60,general=100/60,ops=45/60,export=46/60';
const GENERAL = 100;

let ipCounter = 1;
const freshIp = (): string => `10.77.${Math.floor(ipCounter / 250)}.${ipCounter++ % 250}`;

describe.each<Mode>(MODES)('rate-limit tier by the route that answers (%s mode)', (mode) => {
  let service: TestService;

  beforeAll(async () => {
    service = await startTestService(mode, { RATE_LIMITS: LIMITS, TRUST_PROXY: 'true' });
  }, 60_000);
  afterAll(() => service?.stop());

  const post = (ip: string, body: unknown, headers: Record<string, string> = {}) => (path: string) =>
    rawRequest(service, 'POST', path, { body, headers: { 'X-Forwarded-For': ip, ...headers } });

  test('login (the reported case: 12 wrong logins at /auth/Login were not counted as login)', async () => {
    const send = post(freshIp(), { email: 'nobody@example.com', password: 'wrong-password' });
    await expectOneTier(send, '/api/v1/auth/login', { tier: 40, general: GENERAL });
  });

  test('login: past the limit, no spelling gets another try', async () => {
    const send = post(freshIp(), { email: 'nobody@example.com', password: 'wrong-password' });
    for (let i = 0; i < 40; i++) expect((await send(i % 2 === 0 ? '/api/v1/auth/Login' : '/API/V1/AUTH/LOGIN/')).status).toBe(401);
    for (const path of ['/api/v1/auth/login', ...pathVariants('/api/v1/auth/login').routed]) expect({ path, status: (await send(path)).status }).toEqual({ path, status: 429 });
  });

  test('refresh', async () => {
    await expectOneTier(post(freshIp(), { refreshToken: 'not.a.token' }), '/api/v1/auth/refresh', { tier: 41, general: GENERAL });
  });

  test('logout, password reset request and confirm: the authentication tier', async () => {
    await expectOneTier(post(freshIp(), {}), '/api/v1/auth/logout', { tier: 42, general: GENERAL });
    await expectOneTier(post(freshIp(), { email: `${randomUUID()}@example.com` }), '/api/v1/auth/password-reset/request', { tier: 42, general: GENERAL });
    await expectOneTier(post(freshIp(), { token: 'not-a-token', password: 'long-enough-1' }), '/api/v1/auth/password-reset/confirm', { tier: 42, general: GENERAL });
  });

  test('sync-customer: per API key', async () => {
    // The second configured key: the users of the other tests are made with the first.
    const send = post(freshIp(), { id: 'not-a-number' }, { 'X-Internal-Api-Key': 'test-crm-key-2' });
    await expectOneTier(send, '/api/v1/auth/sync-customer', { tier: 1000, general: GENERAL });
  });

  test('register: per user', async () => {
    const user = await createUser(service);
    const send = post(freshIp(), { name: '' }, { Authorization: `Bearer ${user.accessToken}` });
    await expectOneTier(send, '/api/v1/devices/register', { tier: 43, general: GENERAL });
  });

  test('heartbeat and renew: per device', async () => {
    const owner = await createUser(service);
    const [beating, renewing] = [await registerHub(service, owner), await registerHub(service, owner)];
    const beat = post(freshIp(), {}, { Authorization: `Bearer ${await deviceToken(service, beating, owner)}` });
    await expectOneTier(beat, `/api/v1/devices/heartbeat/${beating.uuid}`, { tier: 44, general: GENERAL }, pathVariants(`/api/v1/devices/heartbeat/${beating.uuid}`, { endsWithParam: true }));

    const renew = post(freshIp(), undefined, { Authorization: `Bearer ${await deviceToken(service, renewing, owner)}` });
    const path = `/api/v1/devices/auth/${renewing.uuid}/renew`;
    const variants = pathVariants(path);
    // `/devices/auth/<uuid>%2Frenew` is another route (a device token issued by its owner, general tier).
    const other = `/api/v1/devices/auth/${renewing.uuid}%2Frenew`;
    await expectOneTier(renew, path, { tier: 44, general: GENERAL }, { routed: variants.routed, unrouted: variants.unrouted.filter((v) => v.toLowerCase() !== other.toLowerCase()) });
    const issued = await renew(other);
    expect(issued.status).toBe(401);
    expect(issued.headers['x-ratelimit-limit']).toBe(String(GENERAL));
  });

  test('erasure by the person (DELETE /users/me): the authentication tier, and never without the token', async () => {
    const user = await createUser(service);
    const path = '/api/v1/users/me';
    const ip = freshIp();
    const wrongPassword = { password: 'not-the-password-1' };
    const send = (p: string) => rawRequest(service, 'DELETE', p, { body: wrongPassword, headers: { 'X-Forwarded-For': ip, Authorization: `Bearer ${user.accessToken}` } });
    await expectOneTier(send, path, { tier: 42, general: GENERAL });
    // Every routed spelling reaches the handler, which asks for the password (and erases nothing).
    for (const variant of [path, ...pathVariants(path).routed]) {
      const res = await send(variant);
      expect({ variant, status: res.status, body: res.body }).toEqual({ variant, status: 401, body: expect.objectContaining({ message: 'Invalid email or password' }) });
    }
    // Without the access token no spelling reaches it either.
    const anonymous = freshIp();
    for (const variant of [path, ...pathVariants(path).routed]) {
      const res = await rawRequest(service, 'DELETE', variant, { body: wrongPassword, headers: { 'X-Forwarded-For': anonymous } });
      expect({ variant, status: res.status }).toEqual({ variant, status: 401 });
    }
    expect((await rawRequest(service, 'GET', '/api/v1/users/me', { headers: { Authorization: `Bearer ${user.accessToken}` } })).status).toBe(200);
  });

  test('export (GET /users/me/export): the export tier per user, and never without the token', async () => {
    const user = await createUser(service);
    const path = '/api/v1/users/me/export';
    const send = (p: string) => rawRequest(service, 'GET', p, { headers: { 'X-Forwarded-For': freshIp(), Authorization: `Bearer ${user.accessToken}` } });
    // Per user: a new address for every request still counts against the same counter.
    await expectOneTier(send, path, { tier: 46, general: GENERAL });
    for (const variant of [path, ...pathVariants(path).routed]) {
      const res = await send(variant);
      expect({ variant, status: res.status, user: (res.body as { user?: { id?: unknown } } | null)?.user?.id }).toEqual({ variant, status: 200, user: user.id });
    }
    const anonymous = freshIp();
    for (const variant of [path, ...pathVariants(path).routed]) {
      const res = await rawRequest(service, 'GET', variant, { headers: { 'X-Forwarded-For': anonymous } });
      expect({ variant, status: res.status, export: typeof (res.body as { exportedAt?: unknown } | null)?.exportedAt }).toEqual({ variant, status: 401, export: 'undefined' });
    }
  });

  test('health and metrics: the operations tier', async () => {
    const get = (ip: string) => (path: string) => rawRequest(service, 'GET', path, { headers: { 'X-Forwarded-For': ip } });
    for (const path of ['/api/v1/health', '/health', '/metrics']) await expectOneTier(get(freshIp()), path, { tier: 45, general: GENERAL });
  });
});

describe('the tier table follows Express routing', () => {
  test('every tiered route matches its spellings that Express routes, and none that it does not', () => {
    for (const route of TIERED_ROUTES) {
      const path = route.path.replace(':uuid', randomUUID());
      const method = route.method ?? 'GET';
      const variants = pathVariants(path, { endsWithParam: route.path.endsWith(':uuid') });
      for (const variant of [path, ...variants.routed]) expect({ variant, tier: tieredRouteOf(method, variant.split('?')[0] ?? '')?.tier }).toEqual({ variant, tier: route.tier });
      for (const variant of variants.unrouted) {
        const found = tieredRouteOf(method, variant);
        // Only `<uuid>%2Frenew`, the owner's device-token route, is another route's.
        if (found !== null) expect({ variant, found }).toEqual({ variant, found: null });
      }
    }
    expect(isUnknownRoute({ status: 404, body: { message: 'Cannot POST /x' }, headers: {} })).toBe(true);
  });

  test('other methods on a tiered path are not tiered (GET /auth/login is an unknown route)', () => {
    expect(tieredRouteOf('GET', '/api/v1/auth/login')).toBeNull();
    expect(tieredRouteOf('POST', '/api/v1/devices/heartbeat')).toBeNull();
    expect(tieredRouteOf('POST', '/api/v1/devices/heartbeat/a%2Fb')?.tier).toBe('heartbeat');
  });
});
