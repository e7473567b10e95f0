import type { DeviceStatus, MessageAck, SubscribeAck } from '../../src/tunnel/events';
import { serviceProcess, type ServiceProcess } from '../chaos/processes';
import { createUser, GENEROUS_RATE_LIMITS, startTestService, type TestService } from '../support/harness';
import { freePort } from '../support/ports';
import { connect, deviceToken, registerHub, request, type Probe } from '../support/tunnel';

/**
 * A hub's socket on a process that dies without a word (SIGKILL), an app on another one:
 * within 30 s the app's process acks `delivered: false`, a subscribe says
 * `tunnelConnected: false`, and the subscribers hear it in a `device:status` (decisions §5).
 * Statuses are ordered by `tunnelSeq`, so a reconnection elsewhere is newer than the drop.
 */

let a: TestService;
let b: ServiceProcess;
const open: Probe[] = [];

beforeAll(async () => {
  a = await startTestService('distributed');
  b = serviceProcess('b', await freePort(), { ...a.env, RATE_LIMITS: GENEROUS_RATE_LIMITS, LOG_LEVEL: 'warn' });
  await b.start();
}, 120_000);

afterAll(async () => {
  for (const p of open) p.close();
  await b.stop();
  await a.stop();
});

async function on(target: { baseUrl: string }, token: string): Promise<Probe> {
  const p = await connect(target, token);
  open.push(p);
  return p;
}

test('the hubs of a process killed with SIGKILL read as gone on the other process within 30 s', async () => {
  const owner = await createUser(a);
  const hub = await registerHub(a, owner);
  const token = await deviceToken(a, hub, owner);
  const app = await on(a, owner.accessToken);
  await request(app, 'tunnel:subscribe', { deviceUuid: hub.uuid });

  await on(b, token);
  const up = await app.next<DeviceStatus>('device:status', (s) => s.tunnelConnected);
  expect(up).toEqual({ deviceUuid: hub.uuid, isOnline: false, lastSeenAt: null, tunnelConnected: true, tunnelSeq: expect.any(Number) });
  expect(await request<MessageAck>(app, 'tunnel:message', { deviceUuid: hub.uuid, type: 'x', payload: 1 })).toEqual({ success: true, delivered: true });

  await b.kill();
  const down = await app.next<DeviceStatus>('device:status', (s) => !s.tunnelConnected, 30_000);
  expect(down).toEqual({ deviceUuid: hub.uuid, isOnline: false, lastSeenAt: null, tunnelConnected: false, tunnelSeq: up.tunnelSeq + 1 });
  expect(await request<MessageAck>(app, 'tunnel:message', { deviceUuid: hub.uuid, type: 'x', payload: 2 })).toEqual({ success: true, delivered: false });
  const late = await on(a, owner.accessToken);
  expect(await request<SubscribeAck>(late, 'tunnel:subscribe', { deviceUuid: hub.uuid })).toEqual({
    success: true,
    deviceUuid: hub.uuid,
    isOnline: false,
    tunnelConnected: false,
  });

  // The hub comes back on the surviving process: newer than the drop.
  await on(a, token);
  const again = await app.next<DeviceStatus>('device:status', (s) => s.tunnelConnected);
  expect(again.tunnelSeq).toBeGreaterThan(down.tunnelSeq);
  expect(await request<MessageAck>(app, 'tunnel:message', { deviceUuid: hub.uuid, type: 'x', payload: 3 })).toEqual({ success: true, delivered: true });
}, 90_000);
