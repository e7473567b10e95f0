import { tieredRouteOf } from '../../src/ratelimit/routes';
import { createUser, startTestService, type TestService } from '../support/harness';
import { rawRequest } from '../support/path-variants';

/**
 * Express answers HEAD with the GET route of the same path, running its handler: a HEAD
 * request is counted in the tier of the GET route that answers it (decisions §6), so HEAD
 * never escapes the export tier (5 an hour) into the general one.
 */

describe('HEAD counts in the tier of the GET route that answers it', () => {
  let service: TestService;

  beforeAll(async () => {
    service = await startTestService('embedded', { RATE_LIMITS: 'export=2/3600,general=100/60' });
  }, 60_000);
  afterAll(() => service?.stop());

  test('HEAD /users/me/export is in the export tier, however spelled', () => {
    expect(tieredRouteOf('HEAD', '/api/v1/users/me/export')?.tier).toBe('export');
    expect(tieredRouteOf('HEAD', '/API/V1/users/ME/Export/')?.tier).toBe('export');
    expect(tieredRouteOf('HEAD', '/api/v1/auth/login')).toBeNull();
  });

  test('past the export limit, HEAD gets no more exports than GET', async () => {
    const user = await createUser(service);
    const auth = { Authorization: `Bearer ${user.accessToken}` };
    const seen: Array<{ method: string; status: number; limit: unknown }> = [];
    for (const method of ['HEAD', 'GET', 'HEAD', 'GET']) {
      const res = await rawRequest(service, method, '/api/v1/users/me/export', { headers: auth });
      seen.push({ method, status: res.status, limit: res.headers['x-ratelimit-limit'] });
    }
    expect(seen).toEqual([
      { method: 'HEAD', status: 200, limit: '2' },
      { method: 'GET', status: 200, limit: '2' },
      { method: 'HEAD', status: 429, limit: '2' },
      { method: 'GET', status: 429, limit: '2' },
    ]);
  });
});
