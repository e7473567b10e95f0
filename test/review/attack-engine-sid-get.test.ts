import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import WebSocket from 'ws';
import { startServerProcess, type ServerProcess } from '../support/server';

/**
 * Outside attack on the tunnel's own WebSocket connection (src/tunnel/engine.ts). Anyone may
 * open a WebSocket on `/socket.io/?EIO=4&transport=websocket`: the open packet names the
 * connection's id before any token is asked for. A plain HTTP request (no Upgrade) that names
 * that id with the same transport, `GET /socket.io/?EIO=4&transport=websocket&sid=<id>`, passes
 * engine.io's `verify` (the connection's `transport.name` is `websocket`, as the query says),
 * and engine.io then calls `transport.onRequest(req)`, which engine.io's own transports have and
 * `WebSocketConnection` has not: a TypeError inside a promise callback, an unhandled rejection,
 * and the whole process exits. One unauthenticated client brings down every hub and app.
 *
 * The service must stay up, not answer the stray request with a 5xx, and go on serving.
 */

let dataDir: string;
let server: ServerProcess | undefined;
const sockets: WebSocket[] = [];

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'hhc-attack-engine-sid-'));
  server = await startServerProcess({ DATA_DIR: dataDir }, 60_000);
}, 70_000);

afterAll(async () => {
  for (const socket of sockets) socket.terminate();
  await server?.kill();
  rmSync(dataDir, { recursive: true, force: true });
});

async function openRaw(port: number): Promise<{ socket: WebSocket; sid: string }> {
  const socket = new WebSocket(`ws://127.0.0.1:${port}/socket.io/?EIO=4&transport=websocket`);
  sockets.push(socket);
  const open = await new Promise<string>((resolve, reject) => {
    socket.once('message', (data: Buffer) => resolve(data.toString()));
    socket.once('error', reject);
  });
  return { socket, sid: (JSON.parse(open.slice(1)) as { sid: string }).sid };
}

async function status(url: string): Promise<number | string> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(3000) });
    await res.arrayBuffer();
    return res.status;
  } catch (error) {
    return `no answer (${(error as Error).message})`;
  }
}

test('a plain HTTP request naming a WebSocket connection\'s id neither crashes the service nor gets a 5xx', async () => {
  const s = server as ServerProcess;
  const { socket, sid } = await openRaw(s.port);
  const stray = await status(`${s.baseUrl}/socket.io/?EIO=4&transport=websocket&sid=${encodeURIComponent(sid)}`);
  await new Promise((resolve) => setTimeout(resolve, 500));
  const health = await status(`${s.baseUrl}/health`);
  const fresh = await openRaw(s.port).then(
    () => 'opened',
    (error: unknown) => `refused (${(error as Error).message})`,
  );
  const crashed = /TypeError[^\n]*/.exec(s.output())?.[0] ?? null;
  expect({
    // Answered with a 4xx, or left unanswered as engine.io leaves it for its own WebSocket transport; never a 5xx.
    strayNot5xx: typeof stray !== 'number' || stray < 500,
    health,
    newConnection: fresh,
    crashed,
    firstConnectionOpen: socket.readyState === WebSocket.OPEN,
  }).toEqual({ strayNot5xx: true, health: 200, newConnection: 'opened', crashed: null, firstConnectionOpen: true });
}, 30_000);
