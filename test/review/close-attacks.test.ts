import type { Socket as NetSocket } from 'node:net';
import type { Writable } from 'node:stream';
import type { ServerOptions, Socket } from 'socket.io';
import { io as connectClient, type Socket as ClientSocket } from 'socket.io-client';
import WebSocket, { type ServerOptions as WsServerOptions } from 'ws';
import { handshakeError } from '../../src/tunnel/connection';
import type { WebSocketConnection } from '../../src/tunnel/engine';
import { CLOSED, CLOSING, type OwnWebSocket } from '../../src/tunnel/own-websocket';
import { RateLimitedHandshake } from '../../src/tunnel/handshake-limit';
import { TunnelWebSocketServer } from '../../src/tunnel/websocket';
import { startEngineServer, stopEngineServer, type EngineServer } from '../support/engine-harness';

/**
 * Attacks on how the tunnel's own WebSocket connection closes (src/tunnel/engine.ts: its
 * WebSocket, src/tunnel/own-websocket.ts, is asked to close only while open), on `ws`'s
 * receiver ended once (src/tunnel/websocket.ts: the WebSocket of an upgraded long-polling
 * client) and on the refused handshake's error made without a stack (src/tunnel/connection.ts).
 * Real servers on port 0, real clients; the service's TCP side is watched directly. The
 * closing timer (30 s in the service) is short here, so that a test sees it fire or sees that
 * none is armed.
 */

const PING_INTERVAL = 200;
const PING_TIMEOUT = 300;
// Long enough that a loaded machine's delays do not pass for it.
const CLOSE_TIMEOUT = 1000;

class ShortCloseWebSocketServer extends TunnelWebSocketServer {
  constructor(options?: WsServerOptions, callback?: () => void) {
    // `closeTimeout` is one of ws's options its types do not list (the tunnel's own WebSocket reads it too).
    super({ ...options, closeTimeout: CLOSE_TIMEOUT } as WsServerOptions, callback);
  }
}

type ServerWebSocket = OwnWebSocket;

interface Harness extends EngineServer {
  readonly connected: Socket[];
  /** Why each Socket.IO socket disconnected, in order. */
  readonly reasons: string[];
  /** Socket.IO events `hit` heard. */
  hits: number;
  /** How the main namespace's middleware refuses a handshake, by the `kind` of its auth. */
  readonly refusals: Record<string, () => Error>;
}

let harness: Harness;
const raws: WebSocket[] = [];
const clients: ClientSocket[] = [];

beforeEach(async () => {
  const options: Partial<ServerOptions> = { path: '/socket.io', pingInterval: PING_INTERVAL, pingTimeout: PING_TIMEOUT, perMessageDeflate: false, wsEngine: ShortCloseWebSocketServer, maxHttpBufferSize: 1e6 };
  const server = await startEngineServer(options);
  const refusals: Record<string, () => Error> = {};
  server.io.use((socket, next) => {
    const refuse = refusals[String((socket.handshake.auth as { kind?: unknown }).kind)];
    next(refuse?.());
  });
  harness = { ...server, connected: [], reasons: [], hits: 0, refusals };
  server.io.on('connection', (socket) => {
    harness.connected.push(socket);
    socket.on('disconnect', (reason) => harness.reasons.push(reason));
    socket.on('hit', () => harness.hits++);
  });
});

afterEach(async () => {
  for (const client of clients.splice(0)) client.close();
  for (const raw of raws.splice(0)) raw.terminate();
  await stopEngineServer(harness);
});

async function until<T>(what: string, read: () => T | undefined | false, timeoutMs = 4000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = read();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** A raw `ws` client, errors ignored: every text frame it receives. */
function rawClient(): { socket: WebSocket; frames: string[] } {
  const socket = new WebSocket(`${harness.url.replace('http', 'ws')}/socket.io/?EIO=4&transport=websocket`);
  raws.push(socket);
  socket.on('error', () => undefined);
  const frames: string[] = [];
  socket.on('message', (data: Buffer) => frames.push(data.toString()));
  return { socket, frames };
}

interface Joined {
  readonly socket: WebSocket;
  /** The client's TCP side. */
  readonly tcp: NetSocket;
  readonly frames: string[];
  readonly connection: WebSocketConnection;
  /** The service's WebSocket, and its TCP side. */
  readonly server: ServerWebSocket;
  readonly serverTcp: NetSocket;
  readonly io: Socket;
  /** Why the connection closed, in order (as Socket.IO hears it), and when. */
  readonly closes: string[];
  readonly closedAt: number[];
}

/** A raw client that joined the main namespace, and the service's side of it. */
/** The service lets the connection go: its TCP side destroyed (by the close timer at the latest), then its WebSocket closed. */
async function letGo(client: Joined): Promise<void> {
  await until('the service\'s TCP side destroyed', () => client.serverTcp.destroyed, CLOSE_TIMEOUT + 3000);
  await wsClosed(client.server);
}

async function joined(): Promise<Joined> {
  const { socket, frames } = rawClient();
  await until('the open packet', () => frames.length > 0);
  const count = harness.connected.length;
  socket.send('40');
  const io = await until('the Socket.IO socket', () => harness.connected[count]);
  const connection = io.conn as unknown as WebSocketConnection;
  const server = connection.websocket;
  const closes: string[] = [];
  const closedAt: number[] = [];
  connection.on('close', (reason: string) => {
    closes.push(reason);
    closedAt.push(Date.now());
  });
  if (server.socket === null) throw new Error('no TCP socket');
  return { socket, tcp: (socket as unknown as { _socket: NetSocket })._socket, frames, connection, server, serverTcp: server.socket, io, closes, closedAt };
}

/** Fills the way to a client that reads nothing: the service's writes to it no longer end. */
async function stall({ io, connection }: Joined): Promise<void> {
  const big = 'x'.repeat(64 * 1024);
  for (let i = 0; i < 400 && connection.writeBuffer.length < 3; i++) {
    io.emit('n', big);
    await new Promise((resolve) => setImmediate(resolve));
  }
  expect(connection.writable).toBe(false);
}

/** A frame as a client sends it (masked, with a zero mask: the payload as it is); `masked: false` breaks the protocol. */
function clientFrame(opcode: number, payload: Buffer | string, masked = true): Buffer {
  const body = Buffer.from(payload);
  if (body.length > 125) throw new Error('a short frame only');
  const head = Buffer.from([0x80 | opcode, (masked ? 0x80 : 0) | body.length]);
  return Buffer.concat([head, masked ? Buffer.alloc(4) : Buffer.alloc(0), body]);
}
const closeFrame = (): Buffer => clientFrame(0x8, Buffer.from([0x03, 0xe8]));
const textFrame = (text: string): Buffer => clientFrame(0x1, text);

const wsClosed = async (server: ServerWebSocket): Promise<void> => {
  await until('the service\'s WebSocket closed', () => server.readyState === CLOSED, CLOSE_TIMEOUT + 3000);
};

describe('a client that ends its side (FIN, no close frame) and reads nothing', () => {
  // `ws` ends its own side at the client's end and is closing from then on, without the timer a
  // `close()` arms: its end waits behind what the client never reads. The connection closing
  // (for a ping timeout, or a slow consumer's discarding close) asked `ws` nothing more.
  test.each([
    ['a ping timeout', 'ping timeout', (_: Joined): void => undefined],
    ['the slow-consumer close that discards', 'forced close', (client: Joined): void => void client.connection.close(true)],
  ])('the TCP connection is let go a close timeout after the connection closes for %s', async (_what, reason, close) => {
    const client = await joined();
    client.tcp.pause();
    await stall(client);
    client.tcp.end();
    await until('ws closing at the client\'s end', () => client.server.readyState === CLOSING);
    close(client);
    await until('the connection closed', () => client.closes[0]);
    // When it closed (its close timer armed then), not when this test saw it.
    const closedAt = client.closedAt[0] ?? 0;
    expect(client.closes).toEqual([reason]);
    expect(harness.engine.clientsCount).toBe(0);
    await until('the service\'s TCP side destroyed', () => client.serverTcp.destroyed, CLOSE_TIMEOUT + 3000);
    expect(Date.now() - closedAt).toBeGreaterThanOrEqual(CLOSE_TIMEOUT - 20);
    await wsClosed(client.server);
    // ws's close, after the connection's own, is no second close.
    expect(client.closes).toEqual([reason]);
  });

  test('a client that ends its side and reads on is let go as soon as it has read (no timer needed, none left behind)', async () => {
    const client = await joined();
    client.tcp.pause();
    await stall(client);
    client.tcp.end();
    await until('ws closing at the client\'s end', () => client.server.readyState === CLOSING);
    client.connection.close(true);
    const closedAt = Date.now();
    client.tcp.resume();
    await wsClosed(client.server);
    expect(client.serverTcp.destroyed).toBe(true);
    expect(Date.now() - closedAt).toBeLessThan(CLOSE_TIMEOUT);
    expect(client.closes).toEqual(['forced close']);
    // The deadline the close gave it is cleared with the connection (it would hold the WebSocket until it fires).
    const timer = (client.server as unknown as { closeTimer: (NodeJS.Timeout & { _destroyed?: boolean }) | null }).closeTimer;
    expect(timer === null || timer._destroyed === true).toBe(true);
  });
});

describe('the closing handshake (ws asked to close only while open)', () => {
  test('a client that sends its close frame and then neither reads nor ends: ws\'s timer destroys the TCP side; a service close meanwhile closes the connection once', async () => {
    const client = await joined();
    client.tcp.pause();
    client.tcp.write(closeFrame());
    await until('ws closing, its side ended', () => client.server.readyState === CLOSING && client.serverTcp.writableEnded);
    // Socket.IO closes the connection while ws is closing: its disconnect packet, written to a
    // closing `ws`, fails, and the connection closes for that (as before the change, and as
    // engine.io's own transport does: a write error), before its close.
    client.io.disconnect(true);
    await until('the connection closed', () => client.closes[0]);
    expect(client.closes).toEqual(['transport error']);
    expect(harness.reasons).toEqual(['server namespace disconnect']);
    expect(harness.engine.clientsCount).toBe(0);
    await letGo(client);
    expect(client.closes).toEqual(['transport error']);
  });

  test('a service close while writes never end (close(true)): the close frame waits behind them, ws\'s timer destroys the TCP side', async () => {
    const client = await joined();
    client.tcp.pause();
    await stall(client);
    client.connection.close(true);
    expect(client.closes).toEqual(['forced close']);
    expect(client.server.readyState).toBe(CLOSING);
    expect(harness.engine.clientsCount).toBe(0);
    await letGo(client);
    expect(client.closes).toEqual(['forced close']);
  });

  test('a close that waits for its writes, and the client\'s close frame meanwhile: closed once, forgotten, the TCP side let go', async () => {
    const client = await joined();
    client.tcp.pause();
    await stall(client);
    client.connection.close();
    expect(client.connection.readyState).toBe('closing');
    client.tcp.write(closeFrame());
    await until('ws closing', () => client.server.readyState === CLOSING);
    // The writes never end: the connection closes when ws gives up (its timer) or at the ping timeout, whichever is first.
    await until('the connection closed', () => client.closes[0], CLOSE_TIMEOUT + 3000);
    expect(client.closes.length).toBe(1);
    expect(harness.engine.clientsCount).toBe(0);
    await letGo(client);
    expect(client.closes.length).toBe(1);
  });

  test('a client that vanishes (RST) while the service\'s close waits behind unread writes: closed once, forgotten, no error unheard', async () => {
    const client = await joined();
    client.tcp.pause();
    await stall(client);
    client.io.disconnect(true);
    client.connection.close(true);
    expect(client.closes).toEqual(['forced close']);
    client.tcp.resetAndDestroy();
    await wsClosed(client.server);
    expect(client.serverTcp.destroyed).toBe(true);
    expect(client.closes).toEqual(['forced close']);
    expect(harness.reasons).toEqual(['server namespace disconnect']);
    expect(harness.engine.clientsCount).toBe(0);
  });

  test('a client that vanishes (RST) after its close frame: transport close, once', async () => {
    const client = await joined();
    client.tcp.pause();
    client.tcp.write(closeFrame());
    await until('ws closing, its side ended', () => client.server.readyState === CLOSING && client.serverTcp.writableEnded);
    client.tcp.resetAndDestroy();
    await wsClosed(client.server);
    await until('the disconnect', () => harness.reasons[0]);
    expect(client.closes).toEqual(['transport close']);
    expect(harness.reasons).toEqual(['transport close']);
    expect(harness.engine.clientsCount).toBe(0);
  });

  test('a message after the client\'s close frame is not heard', async () => {
    const client = await joined();
    client.tcp.write(Buffer.concat([closeFrame(), textFrame('42["hit"]')]));
    await wsClosed(client.server);
    await until('the disconnect', () => harness.reasons[0]);
    expect(harness.reasons).toEqual(['transport close']);
    expect(harness.hits).toBe(0);
  });

  test('a message after the service\'s close (before the client\'s close frame) is not heard; the closing handshake ends', async () => {
    const client = await joined();
    // The client reads nothing for now: it has not seen the service's close frame when it writes.
    client.tcp.pause();
    client.socket.send('42["hit"]');
    await until('the first hit', () => harness.hits === 1);
    client.io.disconnect(true);
    await until('ws closing', () => client.server.readyState === CLOSING);
    client.tcp.write(Buffer.concat([textFrame('42["hit"]'), closeFrame()]));
    client.tcp.resume();
    await wsClosed(client.server);
    expect(harness.hits).toBe(1);
    expect(client.closes).toEqual(['forced close']);
    expect(harness.reasons).toEqual(['server namespace disconnect']);
    // The closing handshake completed: not ended by ws's timer.
    expect(client.serverTcp.destroyed).toBe(true);
  });

  test('a protocol error after the service\'s close (an unmasked frame): refused, nothing more read, the TCP side is let go', async () => {
    const client = await joined();
    client.tcp.pause();
    client.io.disconnect(true);
    client.tcp.write(Buffer.concat([clientFrame(0x1, '42["hit"]', false), textFrame('42["hit"]')]));
    await until('the frame refused', () => (client.server as unknown as { failed: boolean }).failed);
    await letGo(client);
    expect(harness.hits).toBe(0);
    expect(client.closes).toEqual(['forced close']);
  });

  test('a protocol error while open: transport error, once, and the closing handshake ends', async () => {
    const client = await joined();
    client.tcp.write(clientFrame(0x1, '42["hit"]', false));
    await wsClosed(client.server);
    expect(client.closes).toEqual(['transport error']);
    expect(harness.reasons).toEqual(['transport error']);
    expect(harness.engine.clientsCount).toBe(0);
    expect(client.serverTcp.destroyed).toBe(true);
  });

  test.each([
    ['its close frame', (socket: WebSocket): void => socket.close()],
    ['its end (FIN)', (socket: WebSocket): void => void (socket as unknown as { _socket: NetSocket })._socket.end()],
  ])('a client that goes while its connection\'s id is made (%s): nothing is opened, nothing is counted, the TCP side is let go', async (_what, go) => {
    let release: (id: string) => void = () => undefined;
    const engine = harness.engine as unknown as { generateId: () => Promise<string> };
    engine.generateId = () => new Promise<string>((resolve) => (release = resolve));
    const upgraded: NetSocket[] = [];
    harness.http.prependListener('upgrade', (_request: unknown, tcp: NetSocket) => upgraded.push(tcp));
    const { socket } = rawClient();
    await new Promise<void>((resolve) => socket.once('open', () => resolve()));
    go(socket);
    const tcp = await until('the upgraded TCP connection', () => upgraded[0]);
    await until('the service\'s TCP side ended', () => tcp.writableEnded);
    release('made-too-late');
    await until('the service\'s TCP side destroyed', () => tcp.destroyed, CLOSE_TIMEOUT + 3000);
    expect(harness.engine.clientsCount).toBe(0);
    expect(harness.connected).toEqual([]);
  });
});

describe('the receiver ended once (`ws`, under a long-polling client upgraded to WebSocket)', () => {
  type WsSide = WebSocket & { _socket: NetSocket; _receiver: Writable };
  /** The upgraded client's side (its `ws` WebSocket, as `socket`, and TCP) and the service's (`server`, `serverTcp`, the closes its Socket.IO socket heard). */
  const receiverOf = async (): Promise<{ client: { socket: WsSide; tcp: NetSocket; server: WsSide; serverTcp: NetSocket; closes: string[] }; receiver: Writable }> => {
    const io = connectClient(harness.url, { transports: ['polling', 'websocket'], reconnection: false, forceNew: true });
    clients.push(io);
    await until('the upgrade', () => io.connected && io.io.engine.transport.name === 'websocket');
    const serverSocket = await until('the server side', () => harness.connected[0]);
    await until('the service\'s transport upgraded', () => serverSocket.conn.transport.name === 'websocket');
    const server = (serverSocket.conn.transport as unknown as { socket: WsSide }).socket;
    const socket = (io.io.engine.transport as unknown as { ws: WsSide }).ws;
    const closes: string[] = [];
    serverSocket.conn.on('close', (reason: string) => closes.push(reason));
    return { client: { socket, tcp: socket._socket, server, serverTcp: server._socket, closes }, receiver: server._receiver };
  };
  const closedWs = (server: WebSocket): Promise<void> => new Promise((resolve) => (server.readyState === WebSocket.CLOSED ? resolve() : server.once('close', () => resolve())));

  test('an end with a callback on a receiver ended (and finished) already is answered, as Writable answers it', async () => {
    const { client, receiver } = await receiverOf();
    client.socket.close();
    await closedWs(client.server);
    expect(receiver.writableFinished).toBe(true);
    expect(receiver.end()).toBe(receiver);
    const answered = await new Promise<Error | null | undefined>((resolve) => receiver.end(resolve));
    expect((answered as NodeJS.ErrnoException | undefined)?.code).toBe('ERR_STREAM_ALREADY_FINISHED');
  });

  test('on a receiver ended but not finished (in the socket\'s end, right after ws ended it): an end is nothing, an end with a callback is answered at the finish', async () => {
    const { client, receiver } = await receiverOf();
    const seen: { ended: boolean; finished: boolean; returned: unknown } = { ended: false, finished: true, returned: undefined };
    const answered = new Promise<unknown>((resolve) => {
      // Listens after ws's own listener, which ends the receiver.
      client.serverTcp.once('end', () => {
        seen.ended = receiver.writableEnded;
        seen.finished = receiver.writableFinished;
        seen.returned = receiver.end();
        receiver.end(resolve);
      });
    });
    client.tcp.end();
    await expect(answered).resolves.toBeFalsy();
    expect(seen).toEqual({ ended: true, finished: false, returned: receiver });
    expect(receiver.writableFinished).toBe(true);
    await closedWs(client.server);
    expect(client.closes).toEqual(['transport close']);
  });

  test('an end with a chunk and a callback on a closed receiver: the callback hears the refusal', async () => {
    const { client, receiver } = await receiverOf();
    client.tcp.end();
    await closedWs(client.server);
    await until('the receiver destroyed', () => receiver.destroyed);
    const answered = await new Promise<Error | null | undefined>((resolve) => receiver.end(Buffer.from([0x81, 0x80, 0, 0, 0, 0]), (error?: Error | null) => resolve(error)));
    expect((answered as NodeJS.ErrnoException | undefined)?.code).toMatch(/^ERR_STREAM_(DESTROYED|WRITE_AFTER_END)$/);
  });
});

describe('a refused handshake (its error made without a stack)', () => {
  /** The raw CONNECT_ERROR packet a protocol-4 client receives for `kind`. */
  const refusedFrame = async (kind: string): Promise<string> => {
    const { socket, frames } = rawClient();
    await until('the open packet', () => frames.length > 0);
    socket.send(`40${JSON.stringify({ kind })}`);
    return until('the refusal', () => frames[1]);
  };

  test('reaches the client byte for byte as an error with a stack did: unauthorized with data.message, rate_limited with data.retryAfter', async () => {
    harness.refusals.unauthorized = () => handshakeError('unauthorized', 'Token has expired');
    harness.refusals.withStack = () => Object.assign(new Error('unauthorized'), { data: { message: 'Token has expired' } });
    harness.refusals.limited = () => new RateLimitedHandshake(7.2);
    const unauthorized = await refusedFrame('unauthorized');
    expect(unauthorized).toBe('44{"message":"unauthorized","data":{"message":"Token has expired"}}');
    expect(unauthorized).toBe(await refusedFrame('withStack'));
    expect(await refusedFrame('limited')).toBe('44{"message":"rate_limited","data":{"retryAfter":8}}');
    expect(harness.engine.clientsCount).toBe(3);
  });

  test('a Socket.IO client hears connect_error with the message and data', async () => {
    harness.refusals.unauthorized = () => handshakeError('unauthorized', 'Token has been revoked');
    harness.refusals.limited = () => new RateLimitedHandshake(3);
    const heard = async (kind: string): Promise<{ message: string; data: unknown }> => {
      const client = connectClient(harness.url, { transports: ['websocket'], reconnection: false, forceNew: true, auth: { kind } });
      clients.push(client);
      const error = await new Promise<Error & { data?: unknown }>((resolve) => client.once('connect_error', resolve));
      return { message: error.message, data: error.data };
    };
    expect(await heard('unauthorized')).toEqual({ message: 'unauthorized', data: { message: 'Token has been revoked' } });
    expect(await heard('limited')).toEqual({ message: 'rate_limited', data: { retryAfter: 3 } });
  });

  test('the stack trace limit is put back whatever it was, and when making the error throws', () => {
    const before = Error.stackTraceLimit;
    try {
      for (const limit of [3, Infinity, 0]) {
        Error.stackTraceLimit = limit;
        handshakeError('unauthorized', 'x');
        expect(Error.stackTraceLimit).toBe(limit);
      }
      Error.stackTraceLimit = 7;
      // A message that cannot be made a string: the Error constructor throws.
      expect(() => handshakeError(Symbol('no text') as unknown as string, 'x')).toThrow(TypeError);
      expect(Error.stackTraceLimit).toBe(7);
      expect(new Error('other').stack).toMatch(/\n\s+at /);
      expect(new RateLimitedHandshake(1).stack).toMatch(/\n\s+at /);
    } finally {
      Error.stackTraceLimit = before;
    }
  });
});
