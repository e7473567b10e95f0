import { connect, type Socket as NetSocket } from 'node:net';
import { WebSocket } from 'ws';
import { TunnelWebSocketServer } from '../../src/tunnel/websocket';
import { startEngineServer, stopEngineServer, type EngineServer } from '../support/engine-harness';
import { nextTurn, until } from '../support/event-loop';
import { manualTurns, type ManualTurns } from '../support/manual-turns';

/**
 * WebSocket upgrades in turns (`TunnelEngine.upgradeTurns`, src/tunnel/engine.ts): an upgrade
 * waits for its turn with its TCP socket unread, a plain HTTP request is answered meanwhile,
 * and the upgrade completes at its turn; one whose client went away meanwhile is let go. The
 * turns here run a job only when the test releases them.
 */

let server: EngineServer;
let turns: ManualTurns;
const opened: WebSocket[] = [];

beforeEach(async () => {
  server = await startEngineServer({ path: '/socket.io', perMessageDeflate: false, wsEngine: TunnelWebSocketServer });
  turns = manualTurns();
  server.engine.upgradeTurns = turns;
});

afterEach(async () => {
  for (const ws of opened.splice(0)) ws.terminate();
  await stopEngineServer(server);
});

const wsUrl = (): string => `${server.url.replace('http', 'ws')}/socket.io/?EIO=4&transport=websocket`;

test('an upgrade waits for its turn; a plain HTTP request is answered meanwhile; at its turn the 101 and the open packet', async () => {
  const frames: string[] = [];
  const ws = new WebSocket(wsUrl());
  opened.push(ws);
  ws.on('error', () => undefined);
  ws.on('message', (data: Buffer) => frames.push(data.toString()));
  await until(() => turns.jobs.length === 1, 'the upgrade waiting');
  // Long polling's handshake, plain HTTP, is not behind it.
  const polled = await fetch(`${server.url}/socket.io/?EIO=4&transport=polling`);
  expect(polled.status).toBe(200);
  expect(await polled.text()).toMatch(/^0\{"sid":/);
  for (let i = 0; i < 5; i++) await nextTurn();
  expect(ws.readyState).toBe(WebSocket.CONNECTING);
  expect(frames).toEqual([]);
  turns.release();
  await until(() => frames.length === 1, 'the open packet');
  expect(frames[0]).toMatch(/^0\{"sid":/);
  expect(ws.readyState).toBe(WebSocket.OPEN);
});

test('a client that resets before its turn: nothing is opened, no error goes unheard, the next upgrade works', async () => {
  const upgraded: NetSocket[] = [];
  server.http.prependListener('upgrade', (_request: unknown, tcp: NetSocket) => upgraded.push(tcp));
  const raw = connect(Number(new URL(server.url).port), '127.0.0.1');
  raw.on('error', () => undefined);
  await new Promise<void>((resolve) => raw.once('connect', () => resolve()));
  raw.write(
    'GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n' +
      'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n',
  );
  await until(() => turns.jobs.length === 1, 'the upgrade waiting');
  raw.resetAndDestroy();
  const tcp = upgraded[0] as NetSocket;
  await until(() => tcp.destroyed, 'the service\'s side destroyed');
  turns.release();
  for (let i = 0; i < 5; i++) await nextTurn();
  expect(server.engine.clientsCount).toBe(0);

  const frames: string[] = [];
  const ws = new WebSocket(wsUrl());
  opened.push(ws);
  ws.on('message', (data: Buffer) => frames.push(data.toString()));
  await until(() => turns.jobs.length === 1, 'the next upgrade waiting');
  turns.release();
  await until(() => frames.length === 1, 'its open packet');
  expect(server.engine.clientsCount).toBe(1);
});

test('without turns an upgrade is handled at once', async () => {
  server.engine.upgradeTurns = undefined;
  const frames: string[] = [];
  const ws = new WebSocket(wsUrl());
  opened.push(ws);
  ws.on('message', (data: Buffer) => frames.push(data.toString()));
  await until(() => frames.length === 1, 'the open packet');
  expect(turns.jobs).toEqual([]);
});
