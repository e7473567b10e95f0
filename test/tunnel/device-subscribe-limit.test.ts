import type { TunnelError } from '../../src/tunnel/events';
import { createUser, MODES, startTestService, type Mode, type TestService } from '../support/harness';
import { connect, deviceToken, registerHub, request, type Probe } from '../support/tunnel';

/**
 * `tunnel:subscribe` is limited per socket principal, user or device, and counted before it is
 * judged (decisions §5, §6): a device's subscribe, always refused, still costs a point, so a
 * hub flooding it is told RATE_LIMITED past its tier like an app.
 */
describe.each<Mode>(MODES)('a device socket\'s tunnel:subscribe is counted (%s mode)', (mode) => {
  let service: TestService;
  const open: Probe[] = [];

  beforeAll(async () => {
    service = await startTestService(mode, { RATE_LIMITS: 'tunnelSubscribe=2/60' });
  }, 60_000);
  afterAll(async () => {
    for (const p of open) p.close();
    await service?.stop();
  });

  test('past 2 subscribes, a device gets RATE_LIMITED instead of FORBIDDEN', async () => {
    const owner = await createUser(service);
    const hub = await registerHub(service, owner);
    const device = await connect(service, await deviceToken(service, hub, owner));
    open.push(device);
    const codes: string[] = [];
    for (let i = 0; i < 4; i++) {
      const ack = await request<{ success: boolean; error?: { code: string } }>(device, 'tunnel:subscribe', { deviceUuid: hub.uuid });
      expect(ack.success).toBe(false);
      codes.push(ack.error?.code ?? '');
    }
    expect(codes).toEqual(['FORBIDDEN', 'FORBIDDEN', 'RATE_LIMITED', 'RATE_LIMITED']);
    const limited = await device.next<TunnelError>('tunnel:error', (e) => e.code === 'RATE_LIMITED');
    expect(limited.retryAfter).toBeGreaterThanOrEqual(1);
  });
});
