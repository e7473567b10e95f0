import type { DeviceStatus, MessageAck, SubscribeAck } from '../../src/tunnel/events';
import { processPair } from '../support/process-pair';
import { request } from '../support/tunnel';

/**
 * A hub's socket on a process that dies without a word (SIGKILL), an app on another one:
 * within 30 s the app's process acks `delivered: false`, a subscribe says
 * `tunnelConnected: false`, and the subscribers hear it in a `device:status` (decisions §5).
 * Statuses are ordered by `tunnelSeq`, so a reconnection elsewhere is newer than the drop.
 */

const pair = processPair();
const on = pair.on;

test('the hubs of a process killed with SIGKILL read as gone on the other process within 30 s', async () => {
  const a = pair.a();
  const b = pair.b();
  const { owner, hub, token, app } = await pair.watchedHub();

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
