import { createLogger } from '../../src/logger';
import type { DeviceAccess } from '../../src/tunnel/access';
import { createLocalCluster, type TunnelCluster } from '../../src/tunnel/cluster';
import {
  CONNECTED_DEVICE_DATA,
  createSessions,
  DEFAULT_TUNNEL_OPTIONS,
  principalOf,
  type DeviceSession,
  type TunnelContext,
  type TunnelNamespace,
  type TunnelSocket,
} from '../../src/tunnel/context';
import { createDeviceSockets } from '../../src/tunnel/devices';
import { createEventRunner } from '../../src/tunnel/limits';
import { unlimited } from '../../src/tunnel/limiter';

/**
 * What a connected hub's socket keeps (src/tunnel/devices.ts, context.ts): its session holds
 * what the handshake proved, the socket's `data` is one object for every connected hub, and
 * in a process alone the socket is in no room of its device (only another process's apps
 * would reach it through one). With other processes it joins it, as before.
 */

const UUID = '3f2b8c1e-9d4a-4e6b-8f1a-2c3d4e5f6a7b';

interface FakeSocket {
  readonly socket: TunnelSocket;
  readonly joined: string[];
  readonly left: string[];
}

function fakeSocket(id: string): FakeSocket {
  const joined: string[] = [];
  const left: string[] = [];
  const socket = {
    id,
    connected: false,
    data: {},
    join: (room: string | string[]) => {
      joined.push(...(Array.isArray(room) ? room : [room]));
      return Promise.resolve();
    },
    leave: (room: string) => {
      left.push(room);
      return Promise.resolve();
    },
    emit: () => true,
    disconnect: () => undefined,
    conn: { readyState: 'open', once: () => undefined, removeListener: () => undefined },
  };
  return { socket: socket as unknown as TunnelSocket, joined, left };
}

function context(cluster: TunnelCluster): TunnelContext {
  const emitter = { emit: () => true };
  const nsp = { to: () => emitter, local: { to: () => emitter } } as unknown as TunnelNamespace;
  const access: DeviceAccess = {
    fresh: () => Promise.reject(new Error('not read here')),
    peek: () => undefined,
    verifiedRecently: () => false,
    apply: () => undefined,
  };
  return {
    nsp,
    options: DEFAULT_TUNNEL_OPTIONS,
    logger: createLogger('silent'),
    now: () => new Date().toISOString(),
    cluster,
    access,
    sessions: createSessions(),
    readStore: undefined,
    onRelayed: undefined,
    track: (work) => void work.catch(() => undefined),
    closing: () => false,
  };
}

const auth = { kind: 'device', uuid: UUID, gen: 3, exp: Math.floor(Date.now() / 1000) + 3600, authorizedAt: '7' } as const;

test('a process alone: the hub joins no room of its device; once connected its data is the shared object and its session says who it is', async () => {
  const ctx = context(createLocalCluster());
  const devices = createDeviceSockets(ctx, createEventRunner(ctx, unlimited));
  const { socket, joined } = fakeSocket('s1');
  socket.data.auth = auth;
  await devices.admit(socket, auth);
  expect(joined).toEqual([]);
  const session = socket.data.device as DeviceSession;
  expect(session).toMatchObject({ kind: 'device', uuid: UUID, gen: 3, authorizedAt: 7n, expiresAt: auth.exp * 1000, ended: false });
  expect(principalOf(session)).toEqual({ type: 'device', id: UUID });
  expect(ctx.sessions.live.get(UUID)).toBe(session);
  expect(await devices.connected(UUID)).toBe(true);

  devices.accepted(session);
  expect(socket.data).toBe(CONNECTED_DEVICE_DATA);
  expect(Object.isFrozen(socket.data)).toBe(true);

  // Leaving still lets the device go.
  ctx.sessions.all.set(socket.id, session);
  devices.left(session);
  expect(ctx.sessions.live.has(UUID)).toBe(false);
  expect(ctx.sessions.all.size).toBe(0);
  expect(await devices.connected(UUID)).toBe(false);
});

test('with other processes the hub joins its device room, and leaves it when its handshake is abandoned', async () => {
  const local = createLocalCluster();
  const shared: TunnelCluster = { ...local, adapter: (() => undefined) as unknown as TunnelCluster['adapter'] };
  const ctx = context(shared);
  const devices = createDeviceSockets(ctx, createEventRunner(ctx, unlimited));
  const { socket, joined } = fakeSocket('s2');
  socket.data.auth = auth;
  await devices.admit(socket, auth);
  expect(joined).toEqual([`device:${UUID}`]);

  // A handshake that fails after its claim (the client gone meanwhile) leaves the room.
  const second = fakeSocket('s3');
  (second.socket.conn as unknown as { readyState: string }).readyState = 'closed';
  second.socket.data.auth = auth;
  await expect(devices.admit(second.socket, auth)).rejects.toThrow();
  expect(second.joined).toEqual([`device:${UUID}`]);
  expect(second.left).toEqual([`device:${UUID}`]);
});

test('an app session counts against its user', () => {
  const session = { kind: 'app', userId: 'u-1' } as unknown as Parameters<typeof principalOf>[0];
  expect(principalOf(session)).toEqual({ type: 'user', id: 'u-1' });
});
