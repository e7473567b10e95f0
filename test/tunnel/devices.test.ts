import {
  type DeviceStatus,
  type MessageAck,
  type MessageFromDevice,
  type MessageToDevice,
  type TunnelError,
} from '../../src/tunnel/events';
import { createUser, api, type TestService } from '../support/harness';
import { heartbeat, request, type Probe } from '../support/tunnel';
import { ISO, tunnelFixture, UUID } from '../support/tunnel-fixture';

/**
 * Device sockets (src/tunnel/devices.ts): the one live socket per device, relay to its subscribers, and `device:status` when the socket connects or drops.
 * The real service (embedded mode) on port 0, real socket.io-client sockets over the
 * WebSocket transport, devices and links made through the HTTP API.
 */

type User = Awaited<ReturnType<typeof createUser>>;

const fixture = tunnelFixture();
const { on, household } = fixture;
let service: TestService;
beforeAll(() => {
  service = fixture.service();
});

describe('device:status', () => {
  test('when the device socket connects and drops: tunnelConnected changes, the heartbeat presence is the REST API\'s', async () => {
    const { viewer, hub, token } = await household();
    const app = await on(viewer.accessToken);
    await request(app, 'tunnel:subscribe', { deviceUuid: hub.uuid });
    const first = await on(token);
    expect(await app.next<DeviceStatus>('device:status')).toEqual({ deviceUuid: hub.uuid, isOnline: false, lastSeenAt: null, tunnelConnected: true, tunnelSeq: expect.any(Number) });
    first.close();
    expect(await app.next<DeviceStatus>('device:status')).toEqual({ deviceUuid: hub.uuid, isOnline: false, lastSeenAt: null, tunnelConnected: false, tunnelSeq: expect.any(Number) });

    // Online by its heartbeats: a dropped tunnel socket does not make it offline (two meanings of "online" no more).
    const beat = await heartbeat(service, hub, token);
    expect(await app.next<DeviceStatus>('device:status')).toEqual({ deviceUuid: hub.uuid, isOnline: true, lastSeenAt: beat.lastSeenAt, tunnelConnected: false, tunnelSeq: expect.any(Number) });
    const device = await on(token);
    expect(await app.next<DeviceStatus>('device:status')).toEqual({ deviceUuid: hub.uuid, isOnline: true, lastSeenAt: beat.lastSeenAt, tunnelConnected: true, tunnelSeq: expect.any(Number) });
    device.close();
    const dropped = await app.next<DeviceStatus>('device:status');
    expect(dropped).toEqual({ deviceUuid: hub.uuid, isOnline: true, lastSeenAt: beat.lastSeenAt, tunnelConnected: false, tunnelSeq: expect.any(Number) });
    const rest = (await api(service, 'GET', `/devices/${hub.uuid}`, { token: viewer.accessToken })).body as { isOnline: boolean; lastSeenAt: string };
    expect({ isOnline: rest.isOnline, lastSeenAt: rest.lastSeenAt }).toEqual({ isOnline: dropped.isOnline, lastSeenAt: dropped.lastSeenAt });
    // Ordered: every connection and every drop is newer than what came before; the heartbeat's status repeats the drop's order.
    const seqs = app.all<DeviceStatus>('device:status').map((s) => s.tunnelSeq);
    expect(seqs[1]).toBeGreaterThan(seqs[0] ?? Infinity);
    expect(seqs[2]).toBe(seqs[1]);
    expect(seqs[3]).toBeGreaterThan(seqs[2] ?? Infinity);
    expect(seqs[4]).toBe((seqs[3] ?? 0) + 1);
  });
});

describe('one live socket per device', () => {
  test('the newest wins; the old one gets SESSION_REPLACED and is closed', async () => {
    const { owner, hub, token } = await household();
    const app = await on(owner.accessToken);
    await request(app, 'tunnel:subscribe', { deviceUuid: hub.uuid });
    const first = await on(token);
    await app.next<DeviceStatus>('device:status', (s) => s.tunnelConnected);
    const second = await on(token);
    expect(await first.next<TunnelError>('tunnel:error')).toEqual({ code: 'SESSION_REPLACED', message: expect.any(String) });
    expect(await first.next('disconnect')).toBe('io server disconnect');
    await app.next<DeviceStatus>('device:status', (s) => s.tunnelConnected);

    expect(await request<MessageAck>(app, 'tunnel:message', { deviceUuid: hub.uuid, type: 'x', payload: 1 })).toEqual({ success: true, delivered: true });
    expect((await second.next<MessageToDevice>('tunnel:message')).payload).toBe(1);
    second.close();
    await app.next<DeviceStatus>('device:status', (s) => !s.tunnelConnected);
    // The replaced socket's drop was not news: connected, connected, dropped.
    expect(app.all<DeviceStatus>('device:status').map((s) => s.tunnelConnected)).toEqual([true, true, false]);
    expect(first.all('tunnel:message')).toEqual([]);
  });
});

describe('tunnel:message from a device', () => {
  test('from the device to every subscriber, or only to user `to`; replyTo is kept', async () => {
    const { owner, editor, viewer, hub, token } = await household();
    const device = await on(token);
    const apps = new Map<User, Probe>();
    for (const user of [owner, editor, viewer]) {
      const app = await on(user.accessToken);
      await request(app, 'tunnel:subscribe', { deviceUuid: hub.uuid });
      apps.set(user, app);
    }
    const notSubscribed = await on(owner.accessToken);

    const ack = await request<MessageAck>(device, 'tunnel:message', { id: 'r-1', replyTo: 'm-1', type: 'state', payload: { on: true } });
    expect(ack).toEqual({ success: true, delivered: true });
    for (const app of apps.values()) {
      expect(await app.next<MessageFromDevice>('tunnel:message')).toEqual({
        id: 'r-1',
        deviceUuid: hub.uuid,
        from: 'device',
        replyTo: 'm-1',
        type: 'state',
        payload: { on: true },
        sentAt: expect.stringMatching(ISO),
      });
    }

    device.socket.emit('tunnel:message', { to: viewer.id, type: 'private', payload: 'for the viewer' });
    device.socket.emit('tunnel:message', { type: 'public', payload: 'for all' });
    const toViewer = await apps.get(viewer)?.next<MessageFromDevice>('tunnel:message');
    expect(toViewer).toMatchObject({ type: 'private', from: 'device' });
    expect(toViewer?.id).toMatch(UUID);
    expect(toViewer).not.toHaveProperty('replyTo');
    for (const user of [owner, editor]) {
      // The first message after the shared one is the public one: the private one never came.
      expect((await apps.get(user)?.next<MessageFromDevice>('tunnel:message'))?.type).toBe('public');
    }
    expect((await apps.get(viewer)?.next<MessageFromDevice>('tunnel:message'))?.type).toBe('public');
    expect(notSubscribed.all('tunnel:message')).toEqual([]);
  });
});
