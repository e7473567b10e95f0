import type { MessageAck, MessageFromDevice, MessageToDevice, TunnelError } from '../../src/tunnel/events';
import { createUser, GENEROUS_RATE_LIMITS, MODES, startTestService, type Mode, type TestService } from '../support/harness';
import { connect, deviceToken, registerHub, request, type Probe } from '../support/tunnel';
import { startTwoProcesses } from '../support/two-processes';

/**
 * A burst within the limits (decisions §5): 50 `tunnel:message`s sent at once (the limit is
 * 50 per 10 s) are relayed whole and in order, in both directions, in both modes and across
 * processes; the 51st is refused by the rate limit, not by the socket's queue.
 */

const BURST = 50;
const SPEC_TUNNEL_LIMITS = GENEROUS_RATE_LIMITS.replace(/tunnelMessage=[^,]+/, 'tunnelMessage=50/10').replace(/tunnelSubscribe=[^,]+/, 'tunnelSubscribe=10/60');

/** Emits every message without waiting, then collects the acks in order. */
async function burst(from: Probe, messages: readonly unknown[]): Promise<MessageAck[]> {
  const acks = messages.map((message) => request<MessageAck>(from, 'tunnel:message', message));
  return Promise.all(acks);
}

async function received<T>(p: Probe, count: number): Promise<T[]> {
  const out: T[] = [];
  for (let i = 0; i < count; i++) out.push(await p.next<T>('tunnel:message'));
  return out;
}

function scenario(label: string, start: () => Promise<{ appSide: TestService; hubSide: TestService; stop: () => Promise<void> }>): void {
  describe(label, () => {
    let appSide: TestService;
    let hubSide: TestService;
    let stop: () => Promise<void> = async () => undefined;
    const open: Probe[] = [];

    beforeAll(async () => {
      ({ appSide, hubSide, stop } = await start());
    }, 120_000);
    afterAll(async () => {
      for (const p of open) p.close();
      await stop();
    });

    test(`${BURST} messages at once, both ways: all relayed, in order, no error; one more is rate-limited`, async () => {
      const owner = await createUser(appSide);
      const hub = await registerHub(appSide, owner);
      const device = await connect(hubSide, await deviceToken(appSide, hub, owner));
      const app = await connect(appSide, owner.accessToken);
      open.push(device, app);
      expect((await request<{ success: boolean }>(app, 'tunnel:subscribe', { deviceUuid: hub.uuid })).success).toBe(true);

      const toDevice = Array.from({ length: BURST }, (_, i) => ({ deviceUuid: hub.uuid, id: `a-${i}`, type: 'cmd', payload: i }));
      expect(await burst(app, toDevice)).toEqual(Array.from({ length: BURST }, () => ({ success: true, delivered: true })));
      expect((await received<MessageToDevice>(device, BURST)).map((m) => m.payload)).toEqual(toDevice.map((m) => m.payload));

      const toApps = Array.from({ length: BURST }, (_, i) => ({ id: `d-${i}`, type: 'event', payload: i }));
      expect(await burst(device, toApps)).toEqual(Array.from({ length: BURST }, () => ({ success: true, delivered: true })));
      expect((await received<MessageFromDevice>(app, BURST)).map((m) => m.payload)).toEqual(toApps.map((m) => m.payload));

      expect(app.all<TunnelError>('tunnel:error')).toEqual([]);
      expect(device.all<TunnelError>('tunnel:error')).toEqual([]);

      // The limit itself still holds: the 51st within the window is refused by it.
      expect(await request<MessageAck>(app, 'tunnel:message', { deviceUuid: hub.uuid, type: 'cmd', payload: 'one more' })).toEqual({ success: false, delivered: false });
      expect((await app.next<TunnelError>('tunnel:error')).message).toBe('Rate limit exceeded');
    }, 60_000);
  });
}

for (const mode of MODES) {
  scenario(`a burst within the limits (${mode} mode, one process)`, async () => {
    const service = await startTestService(mode as Mode, { RATE_LIMITS: SPEC_TUNNEL_LIMITS });
    return { appSide: service, hubSide: service, stop: () => service.stop() };
  });
}

scenario('a burst within the limits (distributed mode, app and hub on two processes)', async () => {
  const { a, b, stop } = await startTwoProcesses({ RATE_LIMITS: SPEC_TUNNEL_LIMITS });
  return { appSide: a, hubSide: b, stop };
});
