import type { TunnelError } from '../../src/tunnel/events';
import { createUser, MODES, startTestService, type Mode, type TestService } from '../support/harness';
import { connect, deviceToken, handshakeFrom, registerHub, request, type HandshakeOutcome, type Probe } from '../support/tunnel';

/**
 * Tunnel handshakes and events under the rate limits (decisions §5, §6): failed handshakes
 * count per client IP in the general tier, like failed HTTP authentication; past the limit a
 * handshake is refused before any token check (`connect_error` `rate_limited`, `data:
 * {retryAfter}`). Tunnel events are counted before they are validated, so invalid payloads
 * use up the budget as valid ones do.
 */

describe.each<Mode>(MODES)('tunnel handshakes and events under the rate limits (%s mode)', (mode) => {
  let service: TestService;
  const open: Probe[] = [];
  let ipCounter = 1;
  const freshIp = (): string => `10.88.${Math.floor(ipCounter / 250)}.${ipCounter++ % 250}`;

  beforeAll(async () => {
    service = await startTestService(mode, { RATE_LIMITS: 'general=5/60,tunnelMessage=5/60,tunnelSubscribe=3/60', TRUST_PROXY: 'true' });
  }, 60_000);
  afterEach(() => {
    for (const p of open.splice(0)) p.close();
  });
  afterAll(async () => {
    await service?.stop();
  });

  /** A handshake from `ip` (X-Forwarded-For; TRUST_PROXY is on, as for HTTP). */
  const handshake = (ip: string, token: string): Promise<HandshakeOutcome> => handshakeFrom(service, ip, token);

  test('failed handshakes: 5 per IP, then rate_limited before any token check, even for a good token; other IPs unaffected', async () => {
    const user = await createUser(service);
    const ip = freshIp();
    for (let i = 0; i < 5; i++) expect(await handshake(ip, `not-a-token-${i}`)).toMatchObject({ connected: false, message: 'unauthorized' });
    const refused = await handshake(ip, 'not-a-token-6');
    expect(refused).toEqual({ connected: false, message: 'rate_limited', data: { retryAfter: expect.any(Number) } });
    const retryAfter = (refused.data as { retryAfter: number }).retryAfter;
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
    // A good token from that IP is refused too: the token is never looked at.
    expect(await handshake(ip, user.accessToken)).toMatchObject({ connected: false, message: 'rate_limited' });
    // Another IP still connects.
    expect(await handshake(freshIp(), user.accessToken)).toEqual({ connected: true });
  });

  test('a revoked device token counts as a failure; successful handshakes do not count at all', async () => {
    const owner = await createUser(service);
    const hub = await registerHub(service, owner);
    const old = await deviceToken(service, hub, owner);
    const current = await deviceToken(service, hub, owner);
    const ip = freshIp();
    for (let i = 0; i < 12; i++) expect(await handshake(ip, i % 2 === 0 ? owner.accessToken : current)).toEqual({ connected: true });
    for (let i = 0; i < 5; i++) expect(await handshake(ip, old)).toMatchObject({ connected: false, message: 'unauthorized' });
    expect(await handshake(ip, old)).toMatchObject({ connected: false, message: 'rate_limited' });
  });

  test('tunnel:message is counted before it is validated: invalid messages use up the budget', async () => {
    const owner = await createUser(service);
    const hub = await registerHub(service, owner);
    const device = await connect(service, await deviceToken(service, hub, owner));
    const app = await connect(service, owner.accessToken);
    open.push(device, app);
    const codes: string[] = [];
    for (let i = 0; i < 8; i++) {
      expect(await request(app, 'tunnel:message', { deviceUuid: 'not-a-uuid', type: '', payload: i })).toEqual({ success: false, delivered: false });
      codes.push((await app.next<TunnelError>('tunnel:error')).code);
    }
    expect(codes).toEqual(['INVALID_PAYLOAD', 'INVALID_PAYLOAD', 'INVALID_PAYLOAD', 'INVALID_PAYLOAD', 'INVALID_PAYLOAD', 'RATE_LIMITED', 'RATE_LIMITED', 'RATE_LIMITED']);
    // A valid message now is refused and not relayed.
    expect(await request(app, 'tunnel:message', { deviceUuid: hub.uuid, type: 'ping', payload: {} })).toEqual({ success: false, delivered: false });
    expect((await app.next<TunnelError>('tunnel:error')).code).toBe('RATE_LIMITED');
    // The same holds for a device's messages.
    for (let i = 0; i < 5; i++) await request(device, 'tunnel:message', { type: 42 });
    expect(await request(device, 'tunnel:message', { type: 'pong', payload: {} })).toEqual({ success: false, delivered: false });
    expect(await device.next<TunnelError>('tunnel:error', (e) => e.code === 'RATE_LIMITED')).toMatchObject({ code: 'RATE_LIMITED' });
    expect(device.all('tunnel:message')).toHaveLength(0);
  });

  test('tunnel:subscribe is counted before it is validated', async () => {
    const owner = await createUser(service);
    const hub = await registerHub(service, owner);
    const app = await connect(service, owner.accessToken);
    open.push(app);
    for (let i = 0; i < 3; i++) {
      const ack = await request<{ success: boolean; error?: { code: string } }>(app, 'tunnel:subscribe', { deviceUuid: 'nope' });
      expect(ack.error?.code).toBe('INVALID_PAYLOAD');
    }
    const refused = await request<{ success: boolean; error?: { code: string } }>(app, 'tunnel:subscribe', { deviceUuid: hub.uuid });
    expect(refused).toMatchObject({ success: false, error: { code: 'RATE_LIMITED' } });
  });
});
