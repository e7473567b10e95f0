import { createServer, type Server as HttpServer } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { Server, type ServerOptions } from 'socket.io';
import { TunnelEngine } from '../../src/tunnel/engine';
import { TunnelWebSocketServer } from '../../src/tunnel/websocket';

/**
 * An upgrade the tunnel refuses still gets its answer, written before the connection is cut:
 * the 101 and engine.io's open packet are written in one go (TunnelWebSocketServer corks the
 * TCP socket for a microtask), but a refusal engine.io makes after `ws` accepted (a protocol
 * other than 4: a Socket.IO v2 client) writes its 400 and destroys the socket at once, and a
 * socket destroyed while corked drops what it holds: the client heard nothing at all.
 */

let http: HttpServer;
let engine: TunnelEngine;
let port: number;

beforeEach(async () => {
  http = createServer();
  const options: Partial<ServerOptions> = { path: '/socket.io', perMessageDeflate: false, wsEngine: TunnelWebSocketServer };
  const io = new Server(options);
  engine = new TunnelEngine(options);
  engine.attach(http, options);
  io.bind(engine);
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  port = (http.address() as AddressInfo).port;
});

afterEach(async () => {
  engine.close();
  await new Promise<void>((resolve) => http.close(() => resolve()));
});

/** Sends a raw upgrade request; what the server wrote until it closed the connection (or 2 s passed). */
function exchange(path: string, headers: Record<string, string>): Promise<{ text: string }> {
  return new Promise((resolve) => {
    const tcp = connect(port, '127.0.0.1');
    let text = '';
    tcp.on('data', (chunk: Buffer) => (text += chunk.toString('latin1')));
    tcp.on('error', () => undefined);
    const timer = setTimeout(() => tcp.destroy(), 2000);
    tcp.on('close', () => {
      clearTimeout(timer);
      resolve({ text });
    });
    tcp.write(`GET ${path} HTTP/1.1\r\nHost: localhost\r\n${Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`).join('')}\r\n`);
  });
}

const UPGRADE = { Connection: 'Upgrade', Upgrade: 'websocket', 'Sec-WebSocket-Version': '13', 'Sec-WebSocket-Key': 'dGhlIHNhbXBsZSBub25jZQ==' };

test.each([
  ['protocol 3 (a Socket.IO v2 client)', '/socket.io/?EIO=3&transport=websocket'],
  ['protocol 5', '/socket.io/?EIO=5&transport=websocket'],
  ['no protocol', '/socket.io/?transport=websocket'],
])('an upgrade of %s is answered with engine.io\'s 400, not cut off silently', async (_what, path) => {
  const { text } = await exchange(path, UPGRADE);
  expect(text).toContain('HTTP/1.1 400 Bad Request');
  expect(text).toContain('Unsupported protocol version');
});

test.each([
  ['a bad Sec-WebSocket-Key', '/socket.io/?EIO=4&transport=websocket', { ...UPGRADE, 'Sec-WebSocket-Key': 'bad' }, 'Missing or invalid Sec-WebSocket-Key header'],
  ['an unknown sid', '/socket.io/?EIO=4&transport=websocket&sid=nope', UPGRADE, 'Session ID unknown'],
  ['an unknown transport', '/socket.io/?EIO=4&transport=carrier-pigeon', UPGRADE, 'Transport unknown'],
])('an upgrade with %s is answered 400 and closed', async (_what, path, headers, message) => {
  const { text } = await exchange(path, headers);
  expect(text).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
  expect(text).toContain(message);
});

test('an accepted upgrade still gets the 101 and the open packet', async () => {
  const opened = new Promise<string>((resolve) => {
    const tcp = connect(port, '127.0.0.1');
    let text = '';
    tcp.on('data', (chunk: Buffer) => {
      text += chunk.toString('latin1');
      if (text.includes('"sid"')) {
        tcp.destroy();
        resolve(text);
      }
    });
    tcp.write(`GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\nHost: localhost\r\n${Object.entries(UPGRADE).map(([n, v]) => `${n}: ${v}\r\n`).join('')}\r\n`);
  });
  const text = await opened;
  expect(text).toMatch(/^HTTP\/1\.1 101 /);
  expect(text).toContain('0{"sid":');
});
