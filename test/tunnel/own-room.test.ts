import type { ServerOptions, Socket } from 'socket.io';
import { io as connectClient, type Socket as ClientSocket } from 'socket.io-client';
import { withoutOwnRooms } from '../../src/tunnel/own-room';
import { TunnelWebSocketServer } from '../../src/tunnel/websocket';
import { startEngineServer, stopEngineServer, type EngineServer } from '../support/engine-harness';
import { until } from '../support/event-loop';

/**
 * `withoutOwnRooms` (src/tunnel/own-room.ts): a socket is in no room named by its id, its
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
  withoutOwnRooms(nsp.adapter);
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
