import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Socket as NetSocket } from 'node:net';
import { createTokens } from '../../src/auth/tokens';
import { newCommandContext, toNewEvents } from '../../src/commands/handler';
import { deviceDecider, type DeviceCommand } from '../../src/domain/device';
import { deviceStream } from '../../src/domain/events';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import type { EventStore } from '../../src/infra/eventstore/port';
import { createLogger } from '../../src/logger';
import type { DeviceStatus, MessageAck, MessageToDevice, SubscribeAck, TunnelError } from '../../src/tunnel/events';
import type { LimitDecision, TunnelLimiter, TunnelLimitKind, TunnelPrincipal } from '../../src/tunnel/limiter';
import { createTunnel, type Tunnel, type TunnelOptions } from '../../src/tunnel/tunnel';
import { OwnWebSocket } from '../../src/tunnel/own-websocket';
import { collectGarbage } from '../support/gc';
import { TEST_SECRETS } from '../support/server';
import { connect, request, type Probe } from '../support/tunnel';

/**
 * `createTunnel` built directly with its dependencies (pattern 8): the embedded event store
 * in a temp dir, the service's token module, and the hooks under test (a limiter, small
 * housekeeping limits). Devices are given as events, through the device decider.
 */

const tokens = createTokens({
  jwtAccessSecret: TEST_SECRETS.JWT_ACCESS_SECRET,
  jwtRefreshSecret: TEST_SECRETS.JWT_REFRESH_SECRET,
  jwtDeviceSecret: TEST_SECRETS.JWT_DEVICE_SECRET,
});

interface Rig {
  readonly baseUrl: string;
  readonly server: Server;
  readonly eventStore: EventStore;
  readonly tunnel: Tunnel;
  stop(): Promise<void>;
}

async function rig(deps: { limiter?: TunnelLimiter; options?: Partial<TunnelOptions> }): Promise<Rig> {
  const dir = mkdtempSync(join(tmpdir(), 'hhc-tunnel-'));
  const eventStore = await openEmbeddedEventStore(dir);
  const server: Server = createServer((_req, res) => res.writeHead(404).end());
  const tunnel = await createTunnel(server, { tokens, eventStore, logger: createLogger('silent'), ...deps });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    server,
    eventStore,
    tunnel,
    stop: async () => {
      await tunnel.close();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await eventStore.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Given: a device registered by `ownerId`, with a device token. */
async function givenDevice(eventStore: EventStore, ownerId: string): Promise<{ uuid: string; token: string }> {
  const uuid = randomUUID();
  const id = randomUUID();
  const now = new Date().toISOString();
  const command: DeviceCommand = {
    type: 'RegisterDevice',
    data: { id, uuid, deviceId: 'HUB', name: 'Hub', actorUserId: ownerId, linkId: randomUUID(), ownedDeviceCount: 0, maxDevicesPerUser: 10, now },
  };
  const events = deviceDecider.decide(command, deviceDecider.initialState());
  await eventStore.append(deviceStream(uuid), toNewEvents(events, newCommandContext({ type: 'user', id: ownerId }, randomUUID()), now), 'no_stream');
  return { uuid, token: tokens.signDevice({ sub: id, deviceUuid: uuid, gen: 0 }) };
}

const userToken = (userId: string): string => tokens.signAccess({ sub: userId, email: `${userId}@example.com`, role: 'user' });

const open: Probe[] = [];
afterEach(() => {
  for (const p of open.splice(0)) p.close();
});
async function on(target: { baseUrl: string }, token: string): Promise<Probe> {
  const p = await connect(target, token);
  open.push(p);
  return p;
}

describe('the limiter hook', () => {
  test('asked per kind and principal; a refusal is RATE_LIMITED with retryAfter and nothing is relayed', async () => {
    const asked: Array<[TunnelLimitKind, TunnelPrincipal]> = [];
    const refuse = new Set<string>();
    const limiter: TunnelLimiter = {
      consume(kind, principal): LimitDecision | Promise<LimitDecision> {
        asked.push([kind, principal]);
        const allowed = !refuse.has(`${kind}:${principal.type}`);
        // Sometimes asynchronously, as a Redis-backed limiter would answer.
        const decision = { allowed, retryAfter: kind === 'subscribe' ? 7 : 2.5 };
        return kind === 'subscribe' ? Promise.resolve(decision) : decision;
      },
    };
    const r = await rig({ limiter });
    try {
      const ownerId = randomUUID();
      const { uuid, token } = await givenDevice(r.eventStore, ownerId);
      const device = await on(r, token);
      const app = await on(r, userToken(ownerId));

      expect(await request<SubscribeAck>(app, 'tunnel:subscribe', { deviceUuid: uuid })).toEqual({ success: true, deviceUuid: uuid, isOnline: false, tunnelConnected: true });
      expect(await request<MessageAck>(app, 'tunnel:message', { deviceUuid: uuid, type: 'x', payload: 1 })).toEqual({ success: true, delivered: true });
      await device.next<MessageToDevice>('tunnel:message');
      expect(asked).toEqual([
        ['subscribe', { type: 'user', id: ownerId }],
        ['message', { type: 'user', id: ownerId }],
      ]);

      refuse.add('subscribe:user');
      refuse.add('message:device');
      expect(await request<SubscribeAck>(app, 'tunnel:subscribe', { deviceUuid: uuid })).toEqual({
        success: false,
        error: { code: 'RATE_LIMITED', message: 'Rate limit exceeded', retryAfter: 7 },
      });
      expect(await app.next<TunnelError>('tunnel:error')).toEqual({ code: 'RATE_LIMITED', message: 'Rate limit exceeded', retryAfter: 7 });

      expect(await request<MessageAck>(device, 'tunnel:message', { type: 'refused', payload: 1 })).toEqual({ success: false, delivered: false });
      expect(await device.next<TunnelError>('tunnel:error')).toEqual({ code: 'RATE_LIMITED', message: 'Rate limit exceeded', retryAfter: 3 });
      expect(asked.at(-1)).toEqual(['message', { type: 'device', id: uuid }]);
      refuse.clear();
      await request(device, 'tunnel:message', { type: 'allowed', payload: 2 });
      expect((await app.next<{ type: string }>('tunnel:message')).type).toBe('allowed');
    } finally {
      await r.stop();
    }
  });

  test('events wait their turn in arrival order, boundedly: beyond the bound, RATE_LIMITED at once', async () => {
    const never: TunnelLimiter = { consume: (kind) => (kind === 'subscribe' ? new Promise<LimitDecision>(() => undefined) : { allowed: true, retryAfter: 0 }) };
    const r = await rig({ limiter: never, options: { maxPendingPerSocket: 4 } });
    try {
      const ownerId = randomUUID();
      const { uuid, token } = await givenDevice(r.eventStore, ownerId);
      const device = await on(r, token);
      const app = await on(r, userToken(ownerId));
      for (let i = 0; i < 6; i++) app.socket.emit('tunnel:subscribe', { deviceUuid: uuid });
      expect(await app.next<TunnelError>('tunnel:error')).toEqual({ code: 'RATE_LIMITED', message: expect.any(String), retryAfter: 1 });
      expect(await app.next<TunnelError>('tunnel:error')).toMatchObject({ code: 'RATE_LIMITED' });
      // A message arriving now would have to overtake the waiting subscribes: it is refused too, never reordered.
      expect(await request<MessageAck>(app, 'tunnel:message', { deviceUuid: uuid, type: 'x', payload: 1 })).toEqual({ success: false, delivered: false });
      expect(app.all('tunnel:error')).toHaveLength(3);
      expect(device.all('tunnel:message')).toEqual([]);
      // Another socket is not held up by this one's queue.
      const other = await on(r, userToken(ownerId));
      expect(await request<MessageAck>(other, 'tunnel:message', { deviceUuid: uuid, type: 'x', payload: 2 })).toEqual({ success: true, delivered: true });
      expect((await device.next<MessageToDevice>('tunnel:message')).payload).toBe(2);
    } finally {
      await r.stop();
    }
  });
});

test('a device that stops reading is cut off once its queue stays over the limit', async () => {
  const r = await rig({ options: { slowConsumerMaxQueued: 20, sweepEveryMs: 100 } });
  try {
    const ownerId = randomUUID();
    const { uuid, token } = await givenDevice(r.eventStore, ownerId);
    const device = await on(r, token);
    const app = await on(r, userToken(ownerId));
    await request(app, 'tunnel:subscribe', { deviceUuid: uuid });
    // The hub's process stalls: its TCP socket is no longer read.
    const transport = device.socket.io.engine.transport as unknown as { ws: { _socket: NetSocket } };
    transport.ws._socket.pause();
    const chunk = 'p'.repeat(60 * 1024);
    for (let i = 0; i < 400 && r.tunnel.stats().deviceSockets > 0; i++) {
      app.socket.emit('tunnel:message', { deviceUuid: uuid, type: 'bulk', payload: chunk });
      if (i % 20 === 19) await new Promise((resolve) => setImmediate(resolve));
    }
    expect(await app.next<DeviceStatus>('device:status', (s) => !s.tunnelConnected, 15_000)).toMatchObject({ deviceUuid: uuid, tunnelConnected: false });
    expect(r.tunnel.stats()).toMatchObject({ deviceSockets: 0, appSockets: 1 });
  } finally {
    await r.stop();
  }
}, 30_000);

describe('what an idle socket keeps', () => {
  /** The WebSocket the service made for a TCP connection (it tags the connection with it). */
  const websocketOf = (connection: NetSocket): OwnWebSocket | undefined =>
    Object.getOwnPropertySymbols(connection)
      .map((symbol) => (connection as unknown as Record<symbol, unknown>)[symbol])
      .find((value): value is OwnWebSocket => value instanceof OwnWebSocket);

  test("after a large message, the socket's WebSocket keeps no part of it, and has no listeners of its own", async () => {
    const r = await rig({});
    try {
      const connections: NetSocket[] = [];
      r.server.on('upgrade', (_req, connection: NetSocket) => connections.push(connection));
      const { token } = await givenDevice(r.eventStore, randomUUID());
      const device = await on(r, token);
      const large = 'x'.repeat(48 * 1024);
      expect(await request<MessageAck>(device, 'tunnel:message', { type: 'large', payload: large })).toEqual({ success: true, delivered: true });

      const websocket = websocketOf(connections[0] as NetSocket);
      expect(websocket).toBeDefined();
      const kept = websocket as unknown as { pending: unknown; fragments: unknown; _events?: unknown };
      // The message came in several chunks (48 KB): none of them is kept once it was handed over.
      expect(kept.pending).toBeNull();
      expect(kept.fragments).toBeNull();
      // Not an event emitter: engine.io's `error` listener for the upgrade is nowhere.
      expect(kept._events).toBeUndefined();
      expect(websocket?.connection).toBeDefined();

      // Still a working socket: the next message is relayed as before.
      expect(await request<MessageAck>(device, 'tunnel:message', { type: 'small', payload: 1 })).toEqual({ success: true, delivered: true });
    } finally {
      await r.stop();
    }
  });

  test("engine.io's stand-in response for the upgrade is let go: its close listener on the TCP connection is gone once the hub is connected", async () => {
    const r = await rig({});
    try {
      // engine.io's own `upgrade` listener ran first: the stand-in's listener is the connection's last.
      let standInListener: WeakRef<object> | undefined;
      let standInSource = '';
      let connection: NetSocket | undefined;
      r.server.on('upgrade', (_req, upgraded: NetSocket) => {
        connection = upgraded;
        const last = upgraded.listeners('close').at(-1);
        standInSource = String(last);
        if (last !== undefined) standInListener = new WeakRef(last);
      });
      const { token } = await givenDevice(r.eventStore, randomUUID());
      const device = await on(r, token);
      expect(standInSource).toBe('() => this.emit("close")');
      await collectGarbage();
      // Nothing holds the listener (and so the stand-in it calls) any more.
      expect(standInListener?.deref()).toBeUndefined();
      expect((connection as NetSocket).listeners('close').map(String)).not.toContain(standInSource);

      // Still a working socket, and its end still heard: the device goes offline when it leaves.
      expect(await request<MessageAck>(device, 'tunnel:message', { type: 'after', payload: 1 })).toEqual({ success: true, delivered: true });
      expect(r.tunnel.stats().deviceSockets).toBe(1);
      device.socket.disconnect();
      for (let i = 0; i < 100 && r.tunnel.stats().deviceSockets > 0; i++) await new Promise((resolve) => setTimeout(resolve, 20));
      expect(r.tunnel.stats().deviceSockets).toBe(0);
    } finally {
      await r.stop();
    }
  });
});
