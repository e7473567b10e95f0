import { randomUUID } from 'node:crypto';
import { io, type Socket } from 'socket.io-client';
import {
  TUNNEL_NAMESPACE,
  type AppToServerEvents,
  type DeviceToServerEvents,
  type MessageAck,
  type MessageFromDevice,
  type MessageToDevice,
  type ServerToAppEvents,
  type ServerToDeviceEvents,
  type SubscribeAck,
  type TunnelError,
} from '../../src/tunnel/events';
import { api, createUser, type TestService, startTestService } from '../support/harness';
import { TEST_SECRETS } from '../support/server';
import { connect, deleteHub, deviceToken, heartbeat, refusal, request } from '../support/tunnel';
import { nowSeconds, signWith, tunnelFixture } from '../support/tunnel-fixture';

/**
 * The tunnel's connections and sessions (src/tunnel/connection.ts): the handshake, expiry with the token, the typed event maps, misbehaving clients and shutdown.
 * The real service (embedded mode) on port 0, real socket.io-client sockets over the
 * WebSocket transport, devices and links made through the HTTP API.
 */

const fixture = tunnelFixture();
const { on, household } = fixture;
let service: TestService;
beforeAll(() => {
  service = fixture.service();
});

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

  test('a hub whose handshake came before its heartbeat: a newer token refuses the older one on both paths', async () => {
    const { owner, hub, token: older } = await household();
    // The handshake folds the device first; the heartbeat path then starts from that fold.
    const first = await on(older);
    await heartbeat(service, hub, older);
    const newer = await deviceToken(service, hub, owner);
    expect((await api(service, 'POST', `/devices/heartbeat/${hub.uuid}`, { token: older })).status).toBe(401);
    expect(await refusal(service, { token: older })).toMatchObject({ message: 'unauthorized', data: { message: 'Token has been revoked' } });
    first.close();
    await heartbeat(service, hub, newer);
    (await on(newer)).close();
  });

  test('a device token is refused with the message its own verification gives, whatever key signed it', async () => {
    const { owner, hub } = await household();
    const cases: Array<[string, string, string]> = [
      ['device claims under the access key', signWith(TEST_SECRETS.JWT_ACCESS_SECRET, { sub: hub.id, deviceUuid: hub.uuid, gen: 1, type: 'device' }), 'Invalid token'],
      ['expired device token', signWith(TEST_SECRETS.JWT_DEVICE_SECRET, { sub: hub.id, deviceUuid: hub.uuid, gen: 1, type: 'device', exp: nowSeconds() - 5 }), 'Token has expired'],
      ['access claims under the device key', signWith(TEST_SECRETS.JWT_DEVICE_SECRET, { sub: owner.id, email: owner.email, role: 'user', type: 'access' }), 'Invalid token'],
      ['no type at all', signWith(TEST_SECRETS.JWT_DEVICE_SECRET, { sub: hub.id, deviceUuid: hub.uuid, gen: 1 }), 'Invalid token'],
    ];
    for (const [name, token, detail] of cases) {
      const error = await refusal(service, { token });
      expect({ name, message: error.message, data: error.data }).toEqual({ name, message: 'unauthorized', data: { message: detail } });
    }
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
