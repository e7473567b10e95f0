import { createSecretKey, randomUUID } from 'node:crypto';
import jwt from 'jsonwebtoken';
import { io, type Socket } from 'socket.io-client';
import { deviceStream } from '../../src/domain/events';
import {
  TUNNEL_NAMESPACE,
  type AppToServerEvents,
  type DeviceStatus,
  type DeviceToServerEvents,
  type MessageAck,
  type MessageFromDevice,
  type MessageToDevice,
  type ServerToAppEvents,
  type ServerToDeviceEvents,
  type SubscribeAck,
  type TunnelError,
} from '../../src/tunnel/events';
import { api, createUser, startTestService, type TestService } from '../support/harness';
import { TEST_SECRETS } from '../support/server';
import {
  connect,
  deleteHub,
  deviceToken,
  heartbeat,
  linkUser,
  refusal,
  registerHub,
  request,
  unlinkUser,
  type Hub,
  type Probe,
} from '../support/tunnel';

/**
 * The tunnel in embedded mode: the real service on port 0, real socket.io-client sockets
 * over the WebSocket transport, devices and links made through the HTTP API.
 */

type User = Awaited<ReturnType<typeof createUser>>;

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

let service: TestService;
const open: Probe[] = [];

beforeAll(async () => {
  service = await startTestService('embedded');
}, 60_000);
afterEach(() => {
  for (const p of open.splice(0)) p.close();
});
afterAll(async () => {
  await service?.stop();
});

async function on(token: string, target: TestService = service): Promise<Probe> {
  const p = await connect(target, token);
  open.push(p);
  return p;
}

/** An owner with a hub, an editor, a viewer and a stranger. */
async function household(): Promise<{ owner: User; editor: User; viewer: User; stranger: User; hub: Hub; token: string }> {
  const [owner, editor, viewer, stranger] = await Promise.all([createUser(service), createUser(service), createUser(service), createUser(service)]);
  const hub = await registerHub(service, owner);
  await linkUser(service, hub, owner, editor, 'editor');
  await linkUser(service, hub, owner, viewer, 'viewer');
  return { owner, editor, viewer, stranger, hub, token: await deviceToken(service, hub, owner) };
}

const signWith = (secret: string, claims: Record<string, unknown>): string =>
  jwt.sign(claims, createSecretKey(Buffer.from(secret, 'utf8')), { algorithm: 'HS256' });
const nowSeconds = (): number => Math.floor(Date.now() / 1000);

describe('handshake', () => {
  test('an access token and a device token are accepted', async () => {
    const { owner, token } = await household();
    const app = await on(owner.accessToken);
    const device = await on(token);
    expect(app.socket.connected).toBe(true);
    expect(device.socket.connected).toBe(true);
  });

  test('anything else is refused with connect_error `unauthorized`', async () => {
    const { owner, hub, token: oldGeneration } = await household();
    const current = await deviceToken(service, hub, owner);
    const refresh = service.tokens.signRefresh({ sub: owner.id, fam: randomUUID() }).token;
    const cases: Array<[string, Record<string, unknown> | undefined]> = [
      ['no auth', undefined],
      ['no token', {}],
      ['empty', { token: '' }],
      ['not a string', { token: { $gt: '' } }],
      ['malformed', { token: 'not.a.jwt' }],
      ['wrong key', { token: signWith('another-secret-0123456789abcdef0123456789', { sub: owner.id, email: owner.email, role: 'user', type: 'access' }) }],
      ['expired access', { token: signWith(TEST_SECRETS.JWT_ACCESS_SECRET, { sub: owner.id, email: owner.email, role: 'user', type: 'access', exp: nowSeconds() - 5 }) }],
      ['refresh token', { token: refresh }],
      ['access claims under the device key', { token: signWith(TEST_SECRETS.JWT_DEVICE_SECRET, { sub: owner.id, email: owner.email, role: 'user', type: 'access' }) }],
      ['older device generation', { token: oldGeneration }],
      ['expired device token', { token: signWith(TEST_SECRETS.JWT_DEVICE_SECRET, { sub: hub.id, deviceUuid: hub.uuid, gen: 2, type: 'device', exp: nowSeconds() - 5 }) }],
      ['device token of an unknown device', { token: signWith(TEST_SECRETS.JWT_DEVICE_SECRET, { sub: randomUUID(), deviceUuid: randomUUID(), gen: 0, type: 'device' }) }],
    ];
    for (const [name, auth] of cases) {
      const error = await refusal(service, auth);
      expect({ name, message: error.message }).toEqual({ name, message: 'unauthorized' });
    }
    // The current generation still works; after deletion it does not.
    (await on(current)).close();
    await deleteHub(service, hub, owner);
    expect((await refusal(service, { token: current })).message).toBe('unauthorized');
  });

  test('the main namespace is closed', async () => {
    const { owner } = await household();
    expect((await refusal(service, { token: owner.accessToken }, '/')).message).toBe('unauthorized');
  });

  test('a socket is dropped when its token expires, after TOKEN_EXPIRED', async () => {
    const { owner } = await household();
    const shortLived = signWith(TEST_SECRETS.JWT_ACCESS_SECRET, { sub: owner.id, email: owner.email, role: 'user', type: 'access', exp: nowSeconds() + 2 });
    const app = await on(shortLived);
    const error = await app.next<TunnelError>('tunnel:error', undefined, 5000);
    expect(error).toEqual({ code: 'TOKEN_EXPIRED', message: expect.any(String) });
    expect(await app.next('disconnect')).toBe('io server disconnect');
  });
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

describe('device:status', () => {
  test('when the device socket connects and drops: tunnelConnected changes, the heartbeat presence is the REST API\'s', async () => {
    const { viewer, hub, token } = await household();
    const app = await on(viewer.accessToken);
    await request(app, 'tunnel:subscribe', { deviceUuid: hub.uuid });
    const first = await on(token);
    expect(await app.next<DeviceStatus>('device:status')).toEqual({ deviceUuid: hub.uuid, isOnline: false, lastSeenAt: null, tunnelConnected: true });
    first.close();
    expect(await app.next<DeviceStatus>('device:status')).toEqual({ deviceUuid: hub.uuid, isOnline: false, lastSeenAt: null, tunnelConnected: false });

    // Online by its heartbeats: a dropped tunnel socket does not make it offline (two meanings of "online" no more).
    const beat = await heartbeat(service, hub, token);
    expect(await app.next<DeviceStatus>('device:status')).toEqual({ deviceUuid: hub.uuid, isOnline: true, lastSeenAt: beat.lastSeenAt, tunnelConnected: false });
    const device = await on(token);
    expect(await app.next<DeviceStatus>('device:status')).toEqual({ deviceUuid: hub.uuid, isOnline: true, lastSeenAt: beat.lastSeenAt, tunnelConnected: true });
    device.close();
    const dropped = await app.next<DeviceStatus>('device:status');
    expect(dropped).toEqual({ deviceUuid: hub.uuid, isOnline: true, lastSeenAt: beat.lastSeenAt, tunnelConnected: false });
    const rest = (await api(service, 'GET', `/devices/${hub.uuid}`, { token: viewer.accessToken })).body as { isOnline: boolean; lastSeenAt: string };
    expect({ isOnline: rest.isOnline, lastSeenAt: rest.lastSeenAt }).toEqual({ isOnline: dropped.isOnline, lastSeenAt: dropped.lastSeenAt });
  });

  test('on the online/offline transitions of presence (DeviceWentOnline, DeviceWentOffline)', async () => {
    const { viewer, hub, token } = await household();
    const app = await on(viewer.accessToken);
    await request(app, 'tunnel:subscribe', { deviceUuid: hub.uuid });
    const beat = await heartbeat(service, hub, token);
    expect(await app.next<DeviceStatus>('device:status')).toEqual({ deviceUuid: hub.uuid, isOnline: true, lastSeenAt: beat.lastSeenAt, tunnelConnected: false });
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
    expect(await app.next<DeviceStatus>('device:status')).toEqual({ deviceUuid: hub.uuid, isOnline: false, lastSeenAt: beat.lastSeenAt, tunnelConnected: false });
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

describe('the typed event maps', () => {
  test('app and hub code written against src/tunnel/events.ts', async () => {
    const { owner, hub, token } = await household();
    const options = { transports: ['websocket'], reconnection: false, forceNew: true };
    const hubSocket: Socket<ServerToDeviceEvents, DeviceToServerEvents> = io(`${service.baseUrl}${TUNNEL_NAMESPACE}`, { ...options, auth: { token } });
    const appSocket: Socket<ServerToAppEvents, AppToServerEvents> = io(`${service.baseUrl}${TUNNEL_NAMESPACE}`, { ...options, auth: { token: owner.accessToken } });
    try {
      // A hub that answers every command with a reply to it.
      hubSocket.on('tunnel:message', (command: MessageToDevice) => {
        hubSocket.emit('tunnel:message', { replyTo: command.id, type: `${command.type}.done`, payload: command.payload });
      });
      await new Promise<void>((resolve) => hubSocket.once('connect', () => resolve()));
      const subscribed: SubscribeAck = await appSocket.timeout(5000).emitWithAck('tunnel:subscribe', { deviceUuid: hub.uuid });
      expect(subscribed).toEqual({ success: true, deviceUuid: hub.uuid, isOnline: false, tunnelConnected: true });
      const reply = new Promise<MessageFromDevice>((resolve) => appSocket.on('tunnel:message', resolve));
      const ack: MessageAck = await appSocket.timeout(5000).emitWithAck('tunnel:message', { deviceUuid: hub.uuid, id: 'cmd-1', type: 'scene.run', payload: { scene: 'evening' } });
      expect(ack).toEqual({ success: true, delivered: true });
      expect(await reply).toMatchObject({ from: 'device', replyTo: 'cmd-1', type: 'scene.run.done', payload: { scene: 'evening' } });
    } finally {
      hubSocket.disconnect();
      appSocket.disconnect();
    }
  });
});

describe('a misbehaving client', () => {
  test('a frame over the engine limit closes that connection only', async () => {
    const { owner, hub, token } = await household();
    const device = await on(token);
    const rude = await on(owner.accessToken);
    rude.socket.emit('tunnel:message', { deviceUuid: hub.uuid, type: 'x', payload: 'p'.repeat(300 * 1024) });
    expect(await rude.next('disconnect')).toMatch(/transport (close|error)/);
    const polite = await on(owner.accessToken);
    expect(await request<MessageAck>(polite, 'tunnel:message', { deviceUuid: hub.uuid, type: 'x', payload: 1 })).toEqual({ success: true, delivered: true });
    expect((await device.next<MessageToDevice>('tunnel:message')).payload).toBe(1);
  });

  test('garbage packets close that connection only', async () => {
    const { owner } = await household();
    const rude = await on(owner.accessToken);
    const engine = rude.socket.io.engine as unknown as { write(data: string): void };
    engine.write('garbage that is no socket.io packet');
    expect(await rude.next('disconnect')).toMatch(/transport (close|error)/);
    expect((await on(owner.accessToken)).socket.connected).toBe(true);
  });

  test('a flood of events without acks, unknown events and junk arguments leaves the process serving', async () => {
    const { owner, hub, token } = await household();
    const device = await on(token);
    const rude = await on(owner.accessToken);
    const loose = rude.socket as unknown as { emit(event: string, ...args: unknown[]): void };
    for (let i = 0; i < 2000; i++) {
      loose.emit('tunnel:message', { deviceUuid: hub.uuid, type: 'flood', payload: i });
      loose.emit('no-such-event', i);
      loose.emit('tunnel:subscribe', i, 'extra', { more: true });
    }
    // The flood may be cut short (a socket has a bounded number of events in flight), but
    // what gets through is relayed and the process keeps serving everyone else.
    const first = await device.next<MessageToDevice>('tunnel:message', (m) => m.type === 'flood', 15_000);
    expect(first.payload).toBe(0);
    const polite = await on(owner.accessToken);
    expect(await request<SubscribeAck>(polite, 'tunnel:subscribe', { deviceUuid: hub.uuid })).toMatchObject({ success: true });
    expect(await request<MessageAck>(polite, 'tunnel:message', { deviceUuid: hub.uuid, type: 'after', payload: 1 })).toEqual({ success: true, delivered: true });
    expect((await device.next<MessageToDevice>('tunnel:message', (m) => m.type === 'after', 15_000)).payload).toBe(1);
  }, 30_000);
});

describe('shutdown', () => {
  test('closes the transports, so clients reconnect (to another process)', async () => {
    const other = await startTestService('embedded');
    const user = await createUser(other);
    const app = await connect(other, user.accessToken);
    await other.stop();
    expect(await app.next('disconnect')).toBe('transport close');
  }, 60_000);
});
