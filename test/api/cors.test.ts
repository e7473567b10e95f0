import { api, GENEROUS_RATE_LIMITS, MODES, startTestService, type Mode, type TestService } from '../support/harness';

/**
 * CORS for browser apps (decisions §6): preflights answered before the rate limiter and
 * never counted; every response to the allowed origin, errors and 429s included, carries
 * the CORS headers, and the rate-limit, retry and request-id headers are exposed.
 */

const APP = 'https://app.example.com';
const EXPOSED = ['X-Request-Id', 'X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset', 'Retry-After'];

function exposed(headers: Headers): string[] {
  return (headers.get('access-control-expose-headers') ?? '').split(',').map((h) => h.trim().toLowerCase());
}

describe.each<Mode>(MODES)('CORS (%s mode)', (mode) => {
  let service: TestService;

  beforeAll(async () => {
    // The general tier: 3 requests a minute, so a 429 is near.
    service = await startTestService(mode, { APP_ORIGIN: APP, RATE_LIMITS: GENEROUS_RATE_LIMITS.replace(/general=[^,]+/, 'general=3/60') });
  }, 60_000);
  afterAll(async () => {
    await service?.stop();
  });

  const preflight = (origin: string) =>
    fetch(`${service.baseUrl}/api/v1/users/me`, {
      method: 'OPTIONS',
      headers: { Origin: origin, 'Access-Control-Request-Method': 'GET', 'Access-Control-Request-Headers': 'authorization' },
    });

  test('preflights are answered before the limiter and never counted', async () => {
    for (let i = 0; i < 10; i++) {
      const res = await preflight(APP);
      expect(res.status).toBe(204);
      expect(res.headers.get('access-control-allow-origin')).toBe(APP);
      expect(res.headers.get('access-control-allow-methods')).toBe('GET, POST, PUT, DELETE, PATCH');
      expect(res.headers.get('access-control-allow-headers')).toBe('Authorization, Content-Type');
      expect(res.headers.get('x-ratelimit-limit')).toBeNull();
    }
    // The budget of this client is still whole: three requests, then 429.
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) statuses.push((await api(service, 'GET', '/users/me', { headers: { Origin: APP, 'X-Forwarded-For': '1.2.3.4' } })).status);
    expect(statuses).toEqual([401, 401, 401, 429]);
  });

  test('every response to the allowed origin carries the CORS headers, errors and 429s included, with the limit headers exposed', async () => {
    const responses = [
      await api(service, 'GET', '/health', { headers: { Origin: APP } }),
      await api(service, 'GET', '/no-such-route', { headers: { Origin: APP } }),
    ];
    let limited = await api(service, 'GET', '/devices', { headers: { Origin: APP } });
    while (limited.status !== 429) limited = await api(service, 'GET', '/devices', { headers: { Origin: APP } });
    responses.push(limited);
    expect(limited.headers.get('retry-after')).not.toBeNull();
    for (const res of responses) {
      expect(res.headers.get('access-control-allow-origin')).toBe(APP);
      expect(res.headers.get('access-control-allow-credentials')).toBe('true');
      expect(exposed(res.headers)).toEqual(EXPOSED.map((h) => h.toLowerCase()));
    }
  });

  test('another origin gets no CORS headers', async () => {
    const res = await api(service, 'GET', '/health', { headers: { Origin: 'https://evil.example.com' } });
    expect(res.headers.get('access-control-allow-origin')).toBeNull();
    expect((await preflight('https://evil.example.com')).headers.get('access-control-allow-origin')).toBeNull();
  });

  test('GET /health at the root answers as /api/v1/health', async () => {
    const res = await fetch(`${service.baseUrl}/health`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: 'ok', service: 'home-hub-cloud' });
  });
});
