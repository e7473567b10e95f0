import { api, startTestService, type TestService } from '../support/harness';

/**
 * `APP_ORIGIN` is normalised the same way for the tunnel's Socket.IO CORS as for HTTP
 * (decisions §6): written with a trailing slash or a path, browsers still get their exact
 * origin back, so polling from the app works.
 */

const ORIGIN = 'https://app.example.com';

describe.each(['https://app.example.com/', 'https://app.example.com/app/'])('APP_ORIGIN=%s', (setting) => {
  let service: TestService;
  beforeAll(async () => {
    service = await startTestService('embedded', { APP_ORIGIN: setting });
  }, 60_000);
  afterAll(async () => {
    await service?.stop();
  });

  test('HTTP and the Socket.IO polling handshake both answer the browser origin exactly', async () => {
    const http = await api(service, 'GET', '/health', { headers: { Origin: ORIGIN } });
    expect(http.headers.get('access-control-allow-origin')).toBe(ORIGIN);

    const polling = await fetch(`${service.baseUrl}/socket.io/?EIO=4&transport=polling`, { headers: { Origin: ORIGIN } });
    expect(polling.status).toBe(200);
    expect(polling.headers.get('access-control-allow-origin')).toBe(ORIGIN);
    expect(polling.headers.get('access-control-allow-credentials')).toBe('true');
    await polling.text();

    const preflight = await fetch(`${service.baseUrl}/socket.io/?EIO=4&transport=polling`, {
      method: 'OPTIONS',
      headers: { Origin: ORIGIN, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'content-type' },
    });
    expect(preflight.headers.get('access-control-allow-origin')).toBe(ORIGIN);
  });
});
