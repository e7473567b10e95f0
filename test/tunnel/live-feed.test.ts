import { randomUUID } from 'node:crypto';
import { deviceStream } from '../../src/domain/events';
import { type DeviceStatus, type MessageFromDevice, type SubscribeAck, type TunnelError } from '../../src/tunnel/events';
import { type TestService } from '../support/harness';
import { deleteHub, deviceToken, heartbeat, refusal, request, unlinkUser } from '../support/tunnel';
import { tunnelFixture } from '../support/tunnel-fixture';

/**
 * The live feed (src/tunnel/live-feed.ts): device events become `device:status` on presence transitions, and revocations on live sockets.
 * The real service (embedded mode) on port 0, real socket.io-client sockets over the
 * WebSocket transport, devices and links made through the HTTP API.
 */

const fixture = tunnelFixture();
const { on, household } = fixture;
let service: TestService;
beforeAll(() => {
  service = fixture.service();
});

describe('device:status', () => {
  test('on the online/offline transitions of presence (DeviceWentOnline, DeviceWentOffline)', async () => {
    const { viewer, hub, token } = await household();
    const app = await on(viewer.accessToken);
    await request(app, 'tunnel:subscribe', { deviceUuid: hub.uuid });
    const beat = await heartbeat(service, hub, token);
    expect(await app.next<DeviceStatus>('device:status')).toEqual({ deviceUuid: hub.uuid, isOnline: true, lastSeenAt: beat.lastSeenAt, tunnelConnected: false, tunnelSeq: expect.any(Number) });
    // The expiry job's event, as it appends it.
    const wentOfflineAt = new Date().toISOString();
    await service.eventStore.append(
      deviceStream(hub.uuid),
      [
        {
          id: randomUUID(),
          type: 'DeviceWentOffline',
          data: { uuid: hub.uuid, reason: 'heartbeat-timeout', lastSeenAt: beat.lastSeenAt, wentOfflineAt },
          metadata: { occurredAt: wentOfflineAt, actor: { type: 'system', id: 'presence' }, requestId: randomUUID(), causationId: randomUUID(), correlationId: randomUUID() },
        },
      ],
      'any',
    );
    expect(await app.next<DeviceStatus>('device:status')).toEqual({ deviceUuid: hub.uuid, isOnline: false, lastSeenAt: beat.lastSeenAt, tunnelConnected: false, tunnelSeq: expect.any(Number) });
  });
});

describe('revocation', () => {
  test('an unlink ends that user’s subscriptions at once (ACCESS_REVOKED)', async () => {
    const { owner, viewer, hub, token } = await household();
    const device = await on(token);
    const byViewer = await on(viewer.accessToken);
    const byOwner = await on(owner.accessToken);
    for (const app of [byViewer, byOwner]) await request(app, 'tunnel:subscribe', { deviceUuid: hub.uuid });
    await unlinkUser(service, hub, owner, viewer.id);
    expect(await byViewer.next<TunnelError>('tunnel:error')).toEqual({ code: 'ACCESS_REVOKED', message: expect.any(String) });

    await request(device, 'tunnel:message', { type: 'after', payload: null });
    expect((await byOwner.next<MessageFromDevice>('tunnel:message')).type).toBe('after');
    // The owner's copy arrived; the viewer, unsubscribed, got none, and cannot subscribe again.
    expect(byViewer.all('tunnel:message')).toEqual([]);
    expect(await request<SubscribeAck>(byViewer, 'tunnel:subscribe', { deviceUuid: hub.uuid })).toMatchObject({ success: false, error: { code: 'NOT_FOUND' } });
    expect(byOwner.all('tunnel:error')).toEqual([]);
  });

  test('a deletion revokes every subscriber and closes the device socket', async () => {
    const { owner, editor, hub, token } = await household();
    const device = await on(token);
    const apps = [await on(owner.accessToken), await on(editor.accessToken)];
    for (const app of apps) await request(app, 'tunnel:subscribe', { deviceUuid: hub.uuid });
    await deleteHub(service, hub, owner);
    for (const app of apps) expect((await app.next<TunnelError>('tunnel:error')).code).toBe('ACCESS_REVOKED');
    expect((await device.next<TunnelError>('tunnel:error')).code).toBe('ACCESS_REVOKED');
    expect(await device.next('disconnect')).toBe('io server disconnect');
    expect((await refusal(service, { token })).message).toBe('unauthorized');
  });

  test('a new device token revokes the connected older generation', async () => {
    const { owner, viewer, hub, token } = await household();
    const app = await on(viewer.accessToken);
    await request(app, 'tunnel:subscribe', { deviceUuid: hub.uuid });
    const device = await on(token);
    await app.next<DeviceStatus>('device:status', (s) => s.tunnelConnected);
    const fresh = await deviceToken(service, hub, owner);
    expect((await device.next<TunnelError>('tunnel:error')).code).toBe('ACCESS_REVOKED');
    expect(await device.next('disconnect')).toBe('io server disconnect');
    // The subscribers stay subscribed and see the device go, then come back with its new token.
    expect(await app.next<DeviceStatus>('device:status')).toMatchObject({ deviceUuid: hub.uuid, tunnelConnected: false });
    expect((await on(fresh)).socket.connected).toBe(true);
    expect(await app.next<DeviceStatus>('device:status')).toMatchObject({ deviceUuid: hub.uuid, tunnelConnected: true });
    expect(app.all('tunnel:error')).toEqual([]);
  });
});
