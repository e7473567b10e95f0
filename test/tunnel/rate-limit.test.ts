import type { TunnelError } from '../../src/tunnel/events';
import { createUser, MODES, startTestService, type Mode, type TestService } from '../support/harness';
import { connect, deviceToken, registerHub, request, type Probe } from '../support/tunnel';

/** Both tunnel limits with real sockets: the message is not relayed, the subscribe not made. */
describe.each<Mode>(MODES)('tunnel rate limits (%s mode)', (mode) => {
  let service: TestService;
  const open: Probe[] = [];

  beforeAll(async () => {
    service = await startTestService(mode, { RATE_LIMITS: 'tunnelMessage=3/10,tunnelSubscribe=2/60' });
  }, 60_000);
  afterAll(async () => {
    for (const p of open) p.close();
    await service?.stop();
  });

  test('tunnel:message: 3 per principal, then RATE_LIMITED with retryAfter and nothing relayed', async () => {
    const owner = await createUser(service);
    const hub = await registerHub(service, owner);
    const device = await connect(service, await deviceToken(service, hub, owner));
    const app = await connect(service, owner.accessToken);
    open.push(device, app);

    for (let i = 0; i < 3; i++) {
      const ack = await request<{ success: boolean; delivered: boolean }>(app, 'tunnel:message', { deviceUuid: hub.uuid, type: 'ping', payload: { i } });
      expect(ack).toEqual({ success: true, delivered: true });
    }
    for (let i = 0; i < 3; i++) await device.next('tunnel:message');

    app.socket.emit('tunnel:message', { deviceUuid: hub.uuid, type: 'ping', payload: { i: 3 } });
    const error = await app.next<TunnelError>('tunnel:error');
    expect(error.code).toBe('RATE_LIMITED');
    expect(error.retryAfter).toBeGreaterThanOrEqual(1);
    expect(error.retryAfter).toBeLessThanOrEqual(10);
    await new Promise((r) => setTimeout(r, 300));
    expect(device.all('tunnel:message')).toHaveLength(3);

    // Another principal has a budget of its own: the device can still answer.
    const answer = await request<{ success: boolean }>(device, 'tunnel:message', { type: 'pong', payload: {} });
    expect(answer.success).toBe(true);
  });

  test('tunnel:subscribe: 2 per principal, then RATE_LIMITED', async () => {
    const owner = await createUser(service);
    const hub = await registerHub(service, owner);
    const app = await connect(service, owner.accessToken);
    open.push(app);
    for (let i = 0; i < 2; i++) {
      const ack = await request<{ success: boolean }>(app, 'tunnel:subscribe', { deviceUuid: hub.uuid });
      expect(ack.success).toBe(true);
    }
    const refused = await request<{ success: boolean; error?: { code: string } }>(app, 'tunnel:subscribe', { deviceUuid: hub.uuid });
    expect(refused.success).toBe(false);
    const error = await app.next<TunnelError>('tunnel:error', (e) => e.code === 'RATE_LIMITED');
    expect(error.retryAfter).toBeGreaterThanOrEqual(1);
  });
});
