import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { guardDescriptors } from '../../src/runtime/descriptor-headroom';

/**
 * The head-room guard's shedding of idle kept-alive connections (src/runtime/descriptor-headroom.ts),
 * on a bare HTTP server with a threshold of a few connections: what it closes must wait for nothing.
 *
 * Found by review: Node's `closeIdleConnections` counts as idle a connection whose answer is
 * still being written (`end()` was called, the bytes are not all out) and one whose next request
 * has arrived but is not read yet; the guard called it from the `connection` event, in the poll
 * phase, before the input that arrived with the new connection was read.
 */

const quiet = { warn: () => undefined, info: () => undefined };
const BIG = Buffer.alloc(32 * 1024 * 1024, 'x');

let server: Server;
let port: number;
const sockets: Socket[] = [];
const accepted: Socket[] = [];

const listen = async (limit: number, handler: (request: IncomingMessage, response: ServerResponse) => void): Promise<void> => {
  server = createServer(handler);
  server.on('connection', (socket: Socket) => accepted.push(socket));
  guardDescriptors(server, { limit, reserve: 0, baseline: 0, logger: quiet });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as AddressInfo).port;
};

afterEach(async () => {
  for (const socket of [...sockets.splice(0), ...accepted.splice(0)]) socket.destroy();
  await new Promise((resolve) => server.close(resolve));
});

const open = async (): Promise<Socket> => {
  const socket = connect(port, '127.0.0.1');
  sockets.push(socket);
  socket.on('error', () => undefined);
  await new Promise<void>((resolve) => socket.once('connect', resolve));
  return socket;
};
/** A connection opened without waiting: the pressing one. */
const press = (): Socket => {
  const socket = connect(port, '127.0.0.1');
  sockets.push(socket);
  socket.on('error', () => undefined);
  return socket;
};
const handler = (request: IncomingMessage, response: ServerResponse): void => {
  request.resume();
  request.once('end', () => {
    if (request.url === '/big') {
      response.setHeader('Content-Length', BIG.length);
      response.end(BIG);
    } else response.end('ok');
  });
};
const request = (path: string, method = 'GET'): string => `${method} ${path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n`;

/** Reads `socket` until it has `count` answers of `ok` or `BIG` bytes, or it closes; how many bytes it got and whether it closed first. */
const read = (socket: Socket, expected: number, slowly = false): Promise<{ bytes: number; cut: boolean }> =>
  new Promise((resolve) => {
    let bytes = 0;
    const done = (cut: boolean): void => {
      socket.removeAllListeners('data');
      socket.removeListener('close', closed);
      resolve({ bytes, cut });
    };
    const closed = (): void => done(true);
    socket.on('data', (chunk: Buffer) => {
      bytes += chunk.length;
      if (bytes >= expected) done(false);
      else if (slowly) {
        socket.pause();
        setTimeout(() => socket.resume(), 2);
      }
    });
    socket.once('close', closed);
  });
const busy = (ms: number): void => {
  const end = Date.now() + ms;
  while (Date.now() < end);
};

test('an answer still being written when the guard sheds is written whole', async () => {
  await listen(3, handler);
  const downloading = await open();
  downloading.write(request('/big'));
  const answer = read(downloading, BIG.length, true);
  await new Promise((resolve) => setTimeout(resolve, 200));
  // Two more connections: the third presses, and the guard sheds the idle ones.
  await open();
  press();
  const { bytes, cut } = await answer;
  expect({ cut, whole: bytes >= BIG.length }).toEqual({ cut: false, whole: true });
}, 30_000);

test('a request pipelined behind an answer still being written is answered when the guard sheds', async () => {
  await listen(3, handler);
  const pipelining = await open();
  // One write: the big answer, then `ok` for the POST sent with it.
  pipelining.write(request('/big') + request('/after', 'POST'));
  const answer = read(pipelining, BIG.length + 1, true);
  await new Promise((resolve) => setTimeout(resolve, 200));
  await open();
  press();
  const { bytes, cut } = await answer;
  expect(cut).toBe(false);
  expect(bytes).toBeGreaterThan(BIG.length);
}, 30_000);

test('a request that arrives on a kept-alive connection with the connection that presses is answered, not reset', async () => {
  await listen(3, handler);
  const kept = await open();
  kept.write(request('/first', 'POST'));
  expect((await read(kept, 1)).cut).toBe(false);
  await open();
  // The pressing connection reaches the server first, the kept one's next request right after,
  // while the server's loop is busy: both are in the same poll.
  press();
  await new Promise((resolve) => process.nextTick(resolve));
  busy(50);
  const answer = read(kept, 1);
  kept.write(request('/second', 'POST'));
  busy(50);
  expect(await answer).toMatchObject({ cut: false });
}, 30_000);

test('the guard still sheds: idle kept-alive connections are closed past the threshold, a WebSocket-like upgraded one is not', async () => {
  await listen(4, handler);
  server.on('upgrade', () => undefined);
  // Registered after the guard: it is the test's stand-in for an upgraded connection left open.
  const upgradedAfter = await open();
  upgradedAfter.write('GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n');
  const idle = await open();
  idle.write(request('/'));
  expect((await read(idle, 1)).cut).toBe(false);
  const idleClosed = new Promise<boolean>((resolve) => idle.once('close', () => resolve(true)));
  const half = await open();
  half.write('GET / HTTP/1.1\r\nHost: x\r\n'); // headers not finished
  await new Promise((resolve) => setTimeout(resolve, 50));
  press();
  expect(await idleClosed).toBe(true);
  await new Promise((resolve) => setTimeout(resolve, 100));
  expect({ upgraded: upgradedAfter.destroyed || upgradedAfter.readyState !== 'open', half: half.readyState !== 'open' }).toEqual({ upgraded: false, half: false });
}, 30_000);

test('the guard keeps no closure of its own on each connection: one close listener for all (an idle hub lives for days)', async () => {
  await listen(100, handler);
  const seen: Socket[] = [];
  server.on('connection', (socket: Socket) => seen.push(socket));
  await open();
  await open();
  await new Promise((resolve) => setTimeout(resolve, 50));
  const [first, second] = seen.map((socket) => socket.rawListeners('close'));
  // Every listener on the first connection's close that is not on the second's is a closure per connection
  // (but Node's own, a bound function; a `once` wrapper is bound too, and one per connection).
  const own = (listener: unknown): boolean => (listener as { listener?: unknown }).listener !== undefined || !String(listener).includes('[native code]');
  expect(first?.filter((listener) => own(listener) && !second?.includes(listener)).map(String)).toEqual([]);
});
