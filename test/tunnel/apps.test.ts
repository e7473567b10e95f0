import { randomUUID } from 'node:crypto';
import { type MessageAck, type MessageToDevice, type SubscribeAck, type TunnelError } from '../../src/tunnel/events';
import { type TestService } from '../support/harness';
import { heartbeat, linkUser, request } from '../support/tunnel';
import { ISO, tunnelFixture, UUID } from '../support/tunnel-fixture';

/**
 * App sockets (src/tunnel/apps.ts): subscribe and relay to a device, with the permissions of the interface.
 * The real service (embedded mode) on port 0, real socket.io-client sockets over the
 * WebSocket transport, devices and links made through the HTTP API.
 */

const fixture = tunnelFixture();
const { on, household } = fixture;
let service: TestService;
beforeAll(() => {
  service = fixture.service();
});

describe('tunnel:subscribe', () => {
  test('any active link may subscribe; the ack tells the heartbeat presence and whether the tunnel socket is connected', async () => {
    const { owner, editor, viewer, hub, token } = await household();
    for (const user of [owner, editor, viewer]) {
      const app = await on(user.accessToken);
      expect(await request<SubscribeAck>(app, 'tunnel:subscribe', { deviceUuid: hub.uuid })).toEqual({
        success: true,
        deviceUuid: hub.uuid,
        isOnline: false,
        tunnelConnected: false,
      });
    }
    // Connected to the tunnel but silent: not online by its heartbeats (decisions §5).
    await on(token);
    const later = await on(viewer.accessToken);
    expect(await request<SubscribeAck>(later, 'tunnel:subscribe', { deviceUuid: hub.uuid.toUpperCase() })).toEqual({
      success: true,
      deviceUuid: hub.uuid,
      isOnline: false,
      tunnelConnected: true,
    });
    await heartbeat(service, hub, token);
    const third = await on(owner.accessToken);
    expect(await request<SubscribeAck>(third, 'tunnel:subscribe', { deviceUuid: hub.uuid })).toEqual({
      success: true,
      deviceUuid: hub.uuid,
      isOnline: true,
      tunnelConnected: true,
    });
  });

  test('without a link (or for an unknown device): NOT_FOUND in the ack and as tunnel:error', async () => {
    const { stranger, hub } = await household();
    const app = await on(stranger.accessToken);
    for (const deviceUuid of [hub.uuid, randomUUID()]) {
      const ack = await request<SubscribeAck>(app, 'tunnel:subscribe', { deviceUuid });
      expect(ack).toEqual({ success: false, error: { code: 'NOT_FOUND', message: 'Device not found' } });
      expect(await app.next<TunnelError>('tunnel:error')).toEqual({ code: 'NOT_FOUND', message: 'Device not found' });
    }
  });

  test('without an ack the refusal still arrives as tunnel:error', async () => {
    const { stranger, hub } = await household();
    const app = await on(stranger.accessToken);
    app.socket.emit('tunnel:subscribe', { deviceUuid: hub.uuid });
    expect((await app.next<TunnelError>('tunnel:error')).code).toBe('NOT_FOUND');
  });

  test('a bad payload is INVALID_PAYLOAD', async () => {
    const { owner } = await household();
    const app = await on(owner.accessToken);
    for (const payload of [{ deviceUuid: 'nope' }, {}, 'text', null, [1, 2]]) {
      const ack = await request<SubscribeAck>(app, 'tunnel:subscribe', payload);
      expect({ payload, ack }).toEqual({ payload, ack: { success: false, error: { code: 'INVALID_PAYLOAD', message: expect.any(String) } } });
    }
  });

  test('a device socket cannot subscribe', async () => {
    const { hub, token } = await household();
    const device = await on(token);
    const ack = await request<SubscribeAck>(device, 'tunnel:subscribe', { deviceUuid: hub.uuid });
    expect(ack).toEqual({ success: false, error: { code: 'FORBIDDEN', message: expect.any(String) } });
  });
});

describe('tunnel:message', () => {
  test('from an owner or an editor to the device, in the spec shape, acked delivered', async () => {
    const { owner, editor, hub, token } = await household();
    const device = await on(token);
    for (const user of [owner, editor]) {
      const app = await on(user.accessToken);
      const ack = await request<MessageAck>(app, 'tunnel:message', { deviceUuid: hub.uuid, id: `m-${user.id}`, type: 'light.set', payload: { on: true } });
      expect(ack).toEqual({ success: true, delivered: true });
      expect(await device.next<MessageToDevice>('tunnel:message')).toEqual({
        id: `m-${user.id}`,
        deviceUuid: hub.uuid,
        from: { userId: user.id },
        type: 'light.set',
        payload: { on: true },
        sentAt: expect.stringMatching(ISO),
      });
    }
  });

  test('the id is generated when absent; a subscription is not needed to send', async () => {
    const { owner, hub, token } = await household();
    const device = await on(token);
    const app = await on(owner.accessToken);
    app.socket.emit('tunnel:message', { deviceUuid: hub.uuid, type: 'ping', payload: null });
    const received = await device.next<MessageToDevice>('tunnel:message');
    expect(received.id).toMatch(UUID);
    expect(received.payload).toBeNull();
  });

  test('a viewer gets FORBIDDEN, a stranger NOT_FOUND; nothing reaches the device', async () => {
    const { owner, viewer, stranger, hub, token } = await household();
    const device = await on(token);
    const byViewer = await on(viewer.accessToken);
    expect(await request<MessageAck>(byViewer, 'tunnel:message', { deviceUuid: hub.uuid, type: 'x', payload: 1 })).toEqual({ success: false, delivered: false });
    expect(await byViewer.next<TunnelError>('tunnel:error')).toEqual({ code: 'FORBIDDEN', message: expect.any(String) });
    const byStranger = await on(stranger.accessToken);
    expect(await request<MessageAck>(byStranger, 'tunnel:message', { deviceUuid: hub.uuid, type: 'x', payload: 2 })).toEqual({ success: false, delivered: false });
    expect(await byStranger.next<TunnelError>('tunnel:error')).toEqual({ code: 'NOT_FOUND', message: 'Device not found' });
    // Messages reach the device in order: the first it sees is the owner's.
    const byOwner = await on(owner.accessToken);
    await request(byOwner, 'tunnel:message', { deviceUuid: hub.uuid, type: 'x', payload: 3 });
    expect((await device.next<MessageToDevice>('tunnel:message')).payload).toBe(3);
    expect(device.all('tunnel:message')).toHaveLength(1);
  });

  test('a role change takes effect on the next messages (editor → viewer → editor)', async () => {
    const { owner, editor, hub, token } = await household();
    const device = await on(token);
    const app = await on(editor.accessToken);
    const send = (payload: number): Promise<MessageAck> => request<MessageAck>(app, 'tunnel:message', { deviceUuid: hub.uuid, type: 'x', payload });
    expect(await send(1)).toEqual({ success: true, delivered: true });
    // The permission check reads the cache the live event subscription keeps; it follows the
    // write within moments, so poll (bounded) rather than assume the very next message.
    const until = async (wanted: MessageAck): Promise<void> => {
      const deadline = Date.now() + 2000;
      while (JSON.stringify(await send(0)) !== JSON.stringify(wanted)) {
        if (Date.now() > deadline) throw new Error(`still not ${JSON.stringify(wanted)}`);
      }
    };
    await linkUser(service, hub, owner, editor, 'viewer');
    await until({ success: false, delivered: false });
    expect((await app.next<TunnelError>('tunnel:error')).code).toBe('FORBIDDEN');
    await linkUser(service, hub, owner, editor, 'editor');
    await until({ success: true, delivered: true });
    expect((await device.next<MessageToDevice>('tunnel:message')).payload).toBe(1);
  });

  test('delivered is false when the device is not connected', async () => {
    const { owner, hub } = await household();
    const app = await on(owner.accessToken);
    expect(await request<MessageAck>(app, 'tunnel:message', { deviceUuid: hub.uuid, type: 'x', payload: {} })).toEqual({ success: true, delivered: false });
  });

  test('bad payloads are INVALID_PAYLOAD and the socket keeps working', async () => {
    const { owner, hub, token } = await household();
    const device = await on(token);
    const app = await on(owner.accessToken);
    const bad: unknown[] = [
      'text',
      null,
      42,
      [hub.uuid],
      { deviceUuid: hub.uuid, payload: 1 },
      { deviceUuid: hub.uuid, type: '', payload: 1 },
      { deviceUuid: 'not-a-uuid', type: 'x', payload: 1 },
      { deviceUuid: hub.uuid, type: 'x', id: 7, payload: 1 },
      { deviceUuid: hub.uuid, type: 'x', payload: 'p'.repeat(70 * 1024) },
      { deviceUuid: hub.uuid, type: 'x', payload: JSON.parse('['.repeat(40) + ']'.repeat(40)) as unknown },
    ];
    for (const payload of bad) {
      expect(await request<MessageAck>(app, 'tunnel:message', payload)).toEqual({ success: false, delivered: false });
      expect((await app.next<TunnelError>('tunnel:error')).code).toBe('INVALID_PAYLOAD');
    }
    const size = await request<MessageAck>(device, 'tunnel:message', { type: 'x', payload: 'p'.repeat(70 * 1024) });
    expect(size).toEqual({ success: false, delivered: false });
    expect(await device.next<TunnelError>('tunnel:error')).toEqual({ code: 'INVALID_PAYLOAD', message: 'Message is larger than 64 KiB' });
    // Just under the limit is fine, and both sockets still work.
    expect(await request<MessageAck>(app, 'tunnel:message', { deviceUuid: hub.uuid, type: 'x', payload: 'p'.repeat(60 * 1024) })).toEqual({ success: true, delivered: true });
    expect((await device.next<MessageToDevice>('tunnel:message')).payload).toHaveLength(60 * 1024);
  });
});
