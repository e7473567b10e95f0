import type { DeviceStatus, MessageAck, MessageFromDevice, MessageToDevice, SubscribeAck, TunnelError } from '../../src/tunnel/events';
import { createUser } from '../support/harness';
import { connect, deleteHub, deviceToken, heartbeat, linkUser, registerHub, request, unlinkUser } from '../support/tunnel';
import { twoProcesses } from '../support/two-processes';

/**
 * The tunnel across two API processes sharing the stack (EventStoreDB stand-in, MongoDB
 * stand-in, Redis): each `TestService` is a whole service with its own HTTP server,
 * Socket.IO server, Redis connections and event subscription; they share nothing in
 * memory. Apps on one, devices on the other.
 */

type User = Awaited<ReturnType<typeof createUser>>;

const { a, b, on } = twoProcesses({ closeSockets: 'afterEach' });

async function household(): Promise<{ owner: User; viewer: User; hub: { id: string; uuid: string }; token: string }> {
  const [owner, viewer] = await Promise.all([createUser(a()), createUser(a())]);
  const hub = await registerHub(a(), owner);
  await linkUser(a(), hub, owner, viewer, 'viewer');
  return { owner, viewer, hub, token: await deviceToken(a(), hub, owner) };
}

test('an app on one process and its device on the other talk both ways', async () => {
  const { owner, viewer, hub, token } = await household();
  const app = await on(a(), owner.accessToken);
  const byViewer = await on(a(), viewer.accessToken);
  for (const p of [app, byViewer]) await request(p, 'tunnel:subscribe', { deviceUuid: hub.uuid });

  // Not connected anywhere yet.
  expect(await request<MessageAck>(app, 'tunnel:message', { deviceUuid: hub.uuid, type: 'x', payload: 0 })).toEqual({ success: true, delivered: false });

  // Reachable from the moment its client sees `connect`, from the other process too (decisions §5).
  const device = await on(b(), token);
  expect(await request<MessageAck>(app, 'tunnel:message', { deviceUuid: hub.uuid, id: 'm-1', type: 'light.set', payload: { on: true } })).toEqual({
    success: true,
    delivered: true,
  });
  expect(await device.next<MessageToDevice>('tunnel:message')).toEqual({
    id: 'm-1',
    deviceUuid: hub.uuid,
    from: { userId: owner.id },
    type: 'light.set',
    payload: { on: true },
    sentAt: expect.any(String),
  });

  expect(await request<MessageAck>(device, 'tunnel:message', { replyTo: 'm-1', type: 'ok', payload: { on: true } })).toEqual({ success: true, delivered: true });
  for (const p of [app, byViewer]) {
    expect(await p.next<MessageFromDevice>('tunnel:message')).toMatchObject({ deviceUuid: hub.uuid, from: 'device', replyTo: 'm-1', type: 'ok', payload: { on: true } });
  }
  device.socket.emit('tunnel:message', { to: viewer.id, type: 'private', payload: 1 });
  device.socket.emit('tunnel:message', { type: 'public', payload: 2 });
  expect((await byViewer.next<MessageFromDevice>('tunnel:message')).type).toBe('private');
  expect((await app.next<MessageFromDevice>('tunnel:message')).type).toBe('public');

  // The subscribe ack sees the device on the other process.
  const late = await on(a(), viewer.accessToken);
  expect(await request<SubscribeAck>(late, 'tunnel:subscribe', { deviceUuid: hub.uuid })).toEqual({ success: true, deviceUuid: hub.uuid, isOnline: false, tunnelConnected: true });
}, 30_000);

test('device:status reaches subscribers on the other process: socket connect and drop, heartbeat transitions', async () => {
  const { viewer, hub, token } = await household();
  const app = await on(a(), viewer.accessToken);
  await request(app, 'tunnel:subscribe', { deviceUuid: hub.uuid });

  const device = await on(b(), token);
  expect(await app.next<DeviceStatus>('device:status')).toEqual({ deviceUuid: hub.uuid, isOnline: false, lastSeenAt: null, tunnelConnected: true, tunnelSeq: expect.any(Number) });

  // A heartbeat through process B: DeviceWentOnline, seen by process A's own subscription, which knows the socket is on B.
  const beat = await heartbeat(b(), hub, token);
  expect(await app.next<DeviceStatus>('device:status')).toEqual({ deviceUuid: hub.uuid, isOnline: true, lastSeenAt: beat.lastSeenAt, tunnelConnected: true, tunnelSeq: expect.any(Number) });
  device.close();
  expect(await app.next<DeviceStatus>('device:status')).toEqual({ deviceUuid: hub.uuid, isOnline: true, lastSeenAt: beat.lastSeenAt, tunnelConnected: false, tunnelSeq: expect.any(Number) });
  expect(app.all('device:status')).toHaveLength(3);
}, 30_000);

test('one live socket per device across processes: the newest wins', async () => {
  const { owner, hub, token } = await household();
  const app = await on(a(), owner.accessToken);
  await request(app, 'tunnel:subscribe', { deviceUuid: hub.uuid });
  const first = await on(a(), token);
  await app.next<DeviceStatus>('device:status', (s) => s.tunnelConnected);
  const second = await on(b(), token);
  expect(await first.next<TunnelError>('tunnel:error')).toEqual({ code: 'SESSION_REPLACED', message: expect.any(String) });
  expect(await first.next('disconnect')).toBe('io server disconnect');
  await app.next<DeviceStatus>('device:status', (s) => s.tunnelConnected);

  expect(await request<MessageAck>(app, 'tunnel:message', { deviceUuid: hub.uuid, type: 'x', payload: 'to the newest' })).toEqual({ success: true, delivered: true });
  expect((await second.next<MessageToDevice>('tunnel:message')).payload).toBe('to the newest');
  expect(first.all('tunnel:message')).toEqual([]);

  // And back: a third connection on A replaces the one on B.
  const third = await on(a(), token);
  expect((await second.next<TunnelError>('tunnel:error')).code).toBe('SESSION_REPLACED');
  await request(app, 'tunnel:message', { deviceUuid: hub.uuid, type: 'x', payload: 'to the third' });
  expect((await third.next<MessageToDevice>('tunnel:message')).payload).toBe('to the third');
  await app.next<DeviceStatus>('device:status', (s) => s.tunnelConnected);
  // The replaced sockets' drops were never news: connected three times, never dropped.
  expect(app.all<DeviceStatus>('device:status').map((s) => s.tunnelConnected)).toEqual([true, true, true]);
}, 30_000);

test('an unlink and a deletion made through one process act on sockets held by the other', async () => {
  const { owner, viewer, hub, token } = await household();
  const byViewer = await on(a(), viewer.accessToken);
  const byOwner = await on(a(), owner.accessToken);
  for (const p of [byViewer, byOwner]) await request(p, 'tunnel:subscribe', { deviceUuid: hub.uuid });
  const device = await on(a(), token);

  await unlinkUser(b(), hub, owner, viewer.id);
  expect(await byViewer.next<TunnelError>('tunnel:error')).toEqual({ code: 'ACCESS_REVOKED', message: expect.any(String) });
  await request(device, 'tunnel:message', { type: 'after-unlink', payload: null });
  expect((await byOwner.next<MessageFromDevice>('tunnel:message')).type).toBe('after-unlink');
  expect(byViewer.all('tunnel:message')).toEqual([]);

  await deleteHub(b(), hub, owner);
  expect((await byOwner.next<TunnelError>('tunnel:error')).code).toBe('ACCESS_REVOKED');
  expect((await device.next<TunnelError>('tunnel:error')).code).toBe('ACCESS_REVOKED');
  expect(await device.next('disconnect')).toBe('io server disconnect');
}, 30_000);

test('a message to a device that left the other process is not delivered', async () => {
  const { owner, hub, token } = await household();
  const app = await on(a(), owner.accessToken);
  await request(app, 'tunnel:subscribe', { deviceUuid: hub.uuid });
  const device = await on(b(), token);
  expect(await request<MessageAck>(app, 'tunnel:message', { deviceUuid: hub.uuid, type: 'x', payload: 1 })).toEqual({ success: true, delivered: true });
  await app.next<DeviceStatus>('device:status', (s) => s.tunnelConnected);
  device.close();
  await app.next<DeviceStatus>('device:status', (s) => !s.tunnelConnected);
  expect(await request<MessageAck>(app, 'tunnel:message', { deviceUuid: hub.uuid, type: 'x', payload: 2 })).toEqual({ success: true, delivered: false });
}, 30_000);

test('a hub is reachable from the other process the moment its client sees connect (20 fresh connections)', async () => {
  const { owner, hub, token } = await household();
  const app = await on(a(), owner.accessToken);
  const acks: MessageAck[] = [];
  for (let i = 0; i < 20; i++) {
    const device = await connect(b(), token);
    acks.push(await request<MessageAck>(app, 'tunnel:message', { deviceUuid: hub.uuid, type: 'ping', payload: i }));
    expect((await device.next<MessageToDevice>('tunnel:message')).payload).toBe(i);
    device.close();
    // Gone from the other process's view before the next one connects.
    for (let tries = 0; tries < 100; tries++) {
      const ack = await request<MessageAck>(app, 'tunnel:message', { deviceUuid: hub.uuid, type: 'probe', payload: null });
      if (!ack.delivered) break;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
  expect(acks.filter((ack) => ack.delivered)).toHaveLength(20);
}, 60_000);
