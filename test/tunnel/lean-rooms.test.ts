import type { ServerOptions, Socket } from 'socket.io';
import { io as connectClient, type Socket as ClientSocket } from 'socket.io-client';
import { leanRooms } from '../../src/tunnel/lean-rooms';
import { TunnelWebSocketServer } from '../../src/tunnel/websocket';
import { startEngineServer, stopEngineServer, type EngineServer } from '../support/engine-harness';
import { until } from '../support/event-loop';

/**
 * `leanRooms` (src/tunnel/lean-rooms.ts): a socket is in no room named by its id, its
 * other rooms work as before (joined, reached, left), and the adapter forgets it when it goes.
 */

interface Adapter {
  rooms: Map<string, Set<string>>;
  sids: Map<string, Set<string>>;
}

let server: EngineServer;
const clients: ClientSocket[] = [];
const connected: Socket[] = [];

beforeEach(async () => {
  const options: Partial<ServerOptions> = { path: '/socket.io', perMessageDeflate: false, wsEngine: TunnelWebSocketServer };
  server = await startEngineServer(options);
  const nsp = server.io.of('/tunnel');
  leanRooms(nsp.adapter);
  nsp.on('connection', (socket) => {
    connected.push(socket);
    void socket.join('device:one');
  });
});

afterEach(async () => {
  for (const client of clients.splice(0)) client.close();
  connected.splice(0);
  await stopEngineServer(server);
});

test('a socket is in its rooms but not in one of its own; a room reaches it; the adapter forgets it when it goes', async () => {
  const client = connectClient(`${server.url}/tunnel`, { transports: ['websocket'], reconnection: false, forceNew: true });
  clients.push(client);
  await until(() => connected.length === 1, 'connected');
  const socket = connected[0] as Socket;
  const adapter = server.io.of('/tunnel').adapter as unknown as Adapter;
  await until(() => adapter.rooms.has('device:one'), 'the room joined');
  expect([...socket.rooms]).toEqual(['device:one']);
  expect(adapter.rooms.has(socket.id)).toBe(false);
  expect([...(adapter.sids.get(socket.id) ?? [])]).toEqual(['device:one']);

  const heard = new Promise<unknown>((resolve) => client.once('tunnel:message', resolve));
  server.io.of('/tunnel').to('device:one').emit('tunnel:message', { type: 'ping' });
  await expect(heard).resolves.toEqual({ type: 'ping' });

  // Asked in so many words, it is still left out.
  await socket.join(['device:two', socket.id]);
  expect([...socket.rooms].sort()).toEqual(['device:one', 'device:two']);

  client.close();
  await until(() => !adapter.sids.has(socket.id), 'forgotten');
  expect(adapter.rooms.size).toBe(0);
});

test('a room of many members, and a socket in many rooms: every member reached, each left cleanly', async () => {
  const many = 4;
  for (let i = 0; i < many; i++) clients.push(connectClient(`${server.url}/tunnel`, { transports: ['websocket'], reconnection: false, forceNew: true }));
  await until(() => connected.length === many, 'all connected');
  const adapter = server.io.of('/tunnel').adapter as unknown as Adapter;
  await until(() => adapter.rooms.get('device:one')?.size === many, 'all in the room');
  const first = connected[0] as Socket;
  await first.join(['a', 'b', 'c']);
  expect([...first.rooms]).toEqual(['device:one', 'a', 'b', 'c']);
  const heard = clients.map((client) => new Promise<unknown>((resolve) => client.once('hello', resolve)));
  server.io.of('/tunnel').to('device:one').emit('hello', 1);
  await expect(Promise.all(heard)).resolves.toEqual([1, 1, 1, 1]);
  await first.leave('b');
  expect([...first.rooms]).toEqual(['device:one', 'a', 'c']);
  expect(adapter.rooms.has('b')).toBe(false);
  for (const client of clients) client.close();
  await until(() => adapter.rooms.size === 0 && adapter.sids.size === 0, 'every room gone');
});
