import type { Socket } from 'socket.io';
import { WebSocket } from 'ws';
import { appHandshakeFrame } from '../../src/tunnel/admission';
import { TunnelWebSocketServer } from '../../src/tunnel/websocket';
import { startEngineServer, stopEngineServer, type EngineServer } from '../support/engine-harness';
import { nextTurn, until } from '../support/event-loop';
import { manualTurns, type ManualTurns } from '../support/manual-turns';

/**
 * A hub's first frame (its CONNECT) that waits its turn past Socket.IO's connect timeout
 * (src/tunnel/engine.ts `waitTurn`): the server closes the connection at the timeout, the
 * client hears the close (never left hanging on an open WebSocket nobody answers), and the turn,
 * when it comes, makes nothing of it. The connect timeout here is short (300 ms) and the turns
 * run only when the test releases them: nothing depends on how busy the machine is.
 */

let server: EngineServer;
let turns: ManualTurns;
const connections: string[] = [];
const sockets: WebSocket[] = [];

beforeEach(async () => {
  server = await startEngineServer({ path: '/socket.io', perMessageDeflate: false, wsEngine: TunnelWebSocketServer, connectTimeout: 300, pingInterval: 25_000, pingTimeout: 20_000 });
  turns = manualTurns();
  server.engine.handshakeTurns = { turns, atOnce: (frame) => appHandshakeFrame(frame, '/tunnel') };
  server.io.of('/tunnel').on('connection', (socket: Socket) => void connections.push(socket.id));
});

afterEach(async () => {
  for (const ws of sockets.splice(0)) ws.terminate();
  connections.splice(0);
  await stopEngineServer(server);
});

async function open(): Promise<{ ws: WebSocket; frames: string[]; closed: () => boolean }> {
  const ws = new WebSocket(`${server.url.replace('http', 'ws')}/socket.io/?EIO=4&transport=websocket`, { perMessageDeflate: false });
  sockets.push(ws);
  const frames: string[] = [];
  let closed = false;
  ws.on('error', () => undefined);
  ws.on('close', () => (closed = true));
  ws.on('message', (data: Buffer) => {
    const text = data.toString();
    frames.push(text);
    if (text === '2') ws.send('3');
  });
  await until(() => frames.length > 0, 'the open packet');
  return { ws, frames, closed: () => closed };
}

test('a CONNECT that waits past the connect timeout: the connection is closed at the timeout, and its late turn makes nothing of it', async () => {
  const thrown: unknown[] = [];
  const onError = (error: unknown): void => void thrown.push(error);
  process.on('uncaughtException', onError);
  try {
    const hubs = await Promise.all(Array.from({ length: 20 }, () => open()));
    for (const hub of hubs) hub.ws.send('40/tunnel,{"token":"a-device-token"}');
    await until(() => turns.jobs.length === 20, 'every CONNECT waiting its turn');
    // The connect timeout passes with every CONNECT still waiting: each connection is closed, not left open.
    await until(() => hubs.every((hub) => hub.closed()), 'every hub closed by the connect timeout', 10_000);
    await until(() => server.engine.clientsCount === 0, 'nothing kept by the engine');
    for (const hub of hubs) expect(hub.frames.filter((f) => f.startsWith('4'))).toEqual([]);
    // The turns come late: nothing connects, nothing throws.
    turns.release();
    for (let i = 0; i < 10; i++) await nextTurn();
    expect(connections).toEqual([]);
    expect(server.engine.clientsCount).toBe(0);
    expect(thrown).toEqual([]);
  } finally {
    process.off('uncaughtException', onError);
  }
});

test("an app's CONNECT is not held: it connects before the connect timeout while hubs' wait", async () => {
  const hub = await open();
  hub.ws.send('40/tunnel,{"token":"a-device-token"}');
  await until(() => turns.jobs.length === 1, "the hub's CONNECT waiting");
  const app = await open();
  // An access token's shape (read without verifying, only to order): the namespace accepts anyone here.
  const claims = Buffer.from(JSON.stringify({ type: 'access', sub: 'someone' })).toString('base64url');
  app.ws.send(`40/tunnel,${JSON.stringify({ token: `eyJhbGciOiJIUzI1NiJ9.${claims}.c2ln` })}`);
  await until(() => app.frames.some((f) => f.startsWith('40/tunnel,')), "the app's CONNECT answered");
  expect(connections).toHaveLength(1);
  await until(() => hub.closed(), 'the waiting hub closed by the connect timeout', 10_000);
  expect(app.closed()).toBe(false);
  turns.release();
  for (let i = 0; i < 10; i++) await nextTurn();
  expect(connections).toHaveLength(1);
});
