import { EventEmitter } from 'node:events';
import type { Socket as NetSocket } from 'node:net';
import type { ServerOptions, Socket } from 'socket.io';
import { io as connectClient, type Socket as ClientSocket } from 'socket.io-client';
import WebSocket from 'ws';
import { WebSocketConnection } from '../../src/tunnel/engine';
import type { OwnWebSocket } from '../../src/tunnel/own-websocket';
import { compactListeners, TunnelWebSocketServer } from '../../src/tunnel/websocket';
import { startEngineServer, stopEngineServer, type EngineServer } from '../support/engine-harness';

/**
 * The tunnel's engine (src/tunnel/engine.ts): a connection that comes straight over WebSocket
 * gets a `WebSocketConnection`, which speaks engine.io's protocol 4 as engine.io's own socket
 * does (the open packet, pings and their timeout, messages text and binary, the reasons a
 * connection closes for); long polling and its upgrade stay engine.io's. Pings are fast here
 * (200 ms, pong within 300 ms) so that the sweep's ticks are 50 ms.
 */

const PING_INTERVAL = 200;
const PING_TIMEOUT = 300;

interface Harness extends EngineServer {
  /** Server-side sockets as they connect, and why each disconnected. */
  readonly connected: Socket[];
  readonly reasons: string[];
}

let harness: Harness;
const clients: ClientSocket[] = [];
const raws: WebSocket[] = [];

beforeEach(async () => {
  const options: Partial<ServerOptions> = { path: '/socket.io', pingInterval: PING_INTERVAL, pingTimeout: PING_TIMEOUT, perMessageDeflate: false, wsEngine: TunnelWebSocketServer, maxHttpBufferSize: 4096 };
  const server = await startEngineServer(options);
  const connected: Socket[] = [];
  const reasons: string[] = [];
  server.io.on('connection', (socket) => {
    connected.push(socket);
    socket.on('disconnect', (reason) => reasons.push(reason));
    socket.on('echo', (payload: unknown, ack: (answer: unknown) => void) => ack(payload));
  });
  harness = { ...server, connected, reasons };
});

afterEach(async () => {
  for (const client of clients.splice(0)) client.close();
  for (const raw of raws.splice(0)) raw.terminate();
  await stopEngineServer(harness);
});

async function until<T>(what: string, read: () => T | undefined, timeoutMs = 3000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = read();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

function client(transports: Array<'websocket' | 'polling'>): ClientSocket {
  const socket = connectClient(harness.url, { transports, reconnection: false, forceNew: true });
  clients.push(socket);
  return socket;
}

/** A raw WebSocket speaking engine.io by hand: every text frame it receives, in order. */
async function raw(): Promise<{ socket: WebSocket; frames: string[]; closed: Promise<void> }> {
  const socket = new WebSocket(`${harness.url.replace('http', 'ws')}/socket.io/?EIO=4&transport=websocket`);
  raws.push(socket);
  const frames: string[] = [];
  socket.on('message', (data: Buffer) => frames.push(data.toString()));
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  await until('the open packet', () => frames.length > 0);
  return { socket, frames, closed };
}

/** The service's side of a raw connection (its id is in the open packet): the connection and its WebSocket. */
function serverSideOf(frames: string[]): { connection: WebSocketConnection; server: OwnWebSocket; tcp: NetSocket } {
  const id = (JSON.parse(frames[0]?.slice(1) ?? '{}') as { sid: string }).sid;
  const connection = (harness.engine as unknown as { clients: Record<string, WebSocketConnection> }).clients[id] as WebSocketConnection;
  const server = connection.websocket;
  if (server.socket === null) throw new Error('no TCP socket');
  return { connection, server, tcp: server.socket };
}

describe('a connection straight over WebSocket', () => {
  test('the 101 answer and the open packet go out in one write', async () => {
    // Every write the server makes on the upgraded TCP connection, as the chunks it hands the socket at once.
    const writes: string[] = [];
    harness.http.prependListener('upgrade', (_request: unknown, tcp: NetSocket) => {
      const generic = tcp as unknown as { _writeGeneric: (writev: boolean, data: unknown, encoding: string, cb: unknown) => unknown };
      const original = generic._writeGeneric.bind(tcp);
      generic._writeGeneric = (writev, data, encoding, cb) => {
        const chunks = writev ? (data as Array<{ chunk: Buffer | string }>).map((part) => part.chunk) : [data as Buffer | string];
        writes.push(chunks.map((chunk) => (typeof chunk === 'string' ? chunk : chunk.toString('latin1'))).join(''));
        return original(writev, data, encoding, cb);
      };
    });
    const { frames } = await raw();
    expect(frames[0]).toMatch(/^0\{"sid":/);
    expect(writes[0]).toMatch(/^HTTP\/1\.1 101 /);
    // The open packet travels with the answer: one system call for the two.
    expect(writes[0]).toContain('0{"sid":');
  });

  test('is a WebSocketConnection, and carries events, acks and binary both ways', async () => {
    const socket = client(['websocket']);
    await until('connected', () => socket.connected);
    const server = await until('the server side', () => harness.connected[0]);
    expect(server.conn).toBeInstanceOf(WebSocketConnection);
    await expect(socket.emitWithAck('echo', { text: 'é ✓', n: 1 })).resolves.toEqual({ text: 'é ✓', n: 1 });
    const bytes = Buffer.from([0, 1, 2, 250]);
    const echoed = (await socket.emitWithAck('echo', bytes)) as Buffer;
    expect(Buffer.from(echoed)).toEqual(bytes);
    const heard = new Promise<unknown>((resolve) => socket.once('hello', resolve));
    server.emit('hello', 'from the server');
    await expect(heard).resolves.toBe('from the server');
  });

  test('opens with engine.io\'s open packet: its id, no upgrades, the ping figures and the largest payload', async () => {
    const { frames } = await raw();
    const open = frames[0] as string;
    expect(open.charAt(0)).toBe('0');
    const body = JSON.parse(open.slice(1)) as Record<string, unknown>;
    expect(body).toEqual({ sid: expect.any(String) as unknown, upgrades: [], pingInterval: PING_INTERVAL, pingTimeout: PING_TIMEOUT, maxPayload: 4096 });
    expect(harness.engine.clientsCount).toBe(1);
  });

  test('is pinged every interval and stays open while it answers', async () => {
    const { socket, frames } = await raw();
    socket.on('message', (data: Buffer) => {
      if (data.toString() === '2') socket.send('3');
    });
    await new Promise((resolve) => setTimeout(resolve, PING_INTERVAL * 4 + 100));
    const pings = frames.filter((frame) => frame === '2').length;
    expect(pings).toBeGreaterThanOrEqual(3);
    expect(pings).toBeLessThanOrEqual(5);
    expect(socket.readyState).toBe(WebSocket.OPEN);
  });

  test('is closed with ping timeout when a ping has no pong in time, and the engine forgets it', async () => {
    // A client by hand that joins the main namespace and never answers a ping.
    const { socket } = await raw();
    socket.send('40');
    await until('the server side', () => harness.connected[0]);
    const started = Date.now();
    await until('the server-side disconnect', () => harness.reasons[0], 3000);
    expect(harness.reasons).toEqual(['ping timeout']);
    // At the first ping (200 ms) plus its wait (300 ms, at most a tick or two more).
    expect(Date.now() - started).toBeGreaterThanOrEqual(PING_INTERVAL + PING_TIMEOUT - 60);
    expect(harness.engine.clientsCount).toBe(0);
  });

  test('a packet other than the pong while a ping waits gives it more time, once', async () => {
    const { socket, frames, closed } = await raw();
    await until('the first ping', () => frames.includes('2'));
    const pinged = Date.now();
    // Not the pong: an unknown-but-valid noop, as engine.io clients may send.
    setTimeout(() => socket.send('6'), PING_TIMEOUT - 100);
    setTimeout(() => socket.send('6'), PING_TIMEOUT + 100);
    await closed;
    // Closed a ping timeout after the first noop, not after the ping (nor after the second noop).
    expect(Date.now() - pinged).toBeGreaterThanOrEqual(2 * PING_TIMEOUT - 100 - 20);
    expect(Date.now() - pinged).toBeLessThan(2 * PING_TIMEOUT + 100);
  });

  test.each([
    ['a ping from the client', '2', 'transport error'],
    ['an unknown packet type', 'x', 'parse error'],
    ['an empty frame', '', 'parse error'],
  ])('is closed on %s (%s)', async (_what, frame, reason) => {
    const socket = client(['websocket']);
    await until('connected', () => socket.connected);
    const server = await until('the server side', () => harness.connected[0]);
    const connection = server.conn as unknown as WebSocketConnection;
    const reasons: string[] = [];
    connection.on('close', (why: string) => reasons.push(why));
    connection.receive(frame);
    expect(reasons).toEqual([reason]);
    await until('the disconnect', () => harness.reasons[0]);
    expect(harness.engine.clientsCount).toBe(0);
  });

  test('a server disconnect closes the WebSocket: the client hears it, the engine forgets it', async () => {
    const socket = client(['websocket']);
    await until('connected', () => socket.connected);
    const gone = new Promise<string>((resolve) => socket.once('disconnect', resolve));
    (await until('the server side', () => harness.connected[0])).disconnect(true);
    await expect(gone).resolves.toBe('io server disconnect');
    expect(harness.engine.clientsCount).toBe(0);
  });

  test('the client going away is a transport close', async () => {
    const socket = client(['websocket']);
    await until('connected', () => socket.connected);
    socket.io.engine.close();
    await until('the disconnect', () => harness.reasons[0]);
    expect(harness.reasons).toEqual(['transport close']);
    expect(harness.engine.clientsCount).toBe(0);
  });

  test('the service closing a connection its client is closing already ends the TCP socket no second time (each end after the first makes Node build an error with a stack)', async () => {
    const { socket, frames } = await raw();
    const { connection, server, tcp } = serverSideOf(frames);
    let ours = 0;
    const end = tcp.end.bind(tcp);
    tcp.end = ((...args: Parameters<NetSocket['end']>) => {
      // Ends asked by the tunnel's engine while the socket is ended already (the WebSocket's own are its affair).
      if (tcp.writableEnded && /src\/tunnel\/engine\.ts/.test(new Error().stack ?? '')) ours++;
      return end(...args);
    }) as NetSocket['end'];
    // The client sends its close frame and reads nothing more: the service's WebSocket answers it,
    // ends its side and stays closing, waiting for the client's end.
    socket.close();
    (socket as unknown as { _socket: NetSocket })._socket.pause();
    await until('the service closing, its TCP side ended', () => server.readyState === WebSocket.CLOSING && tcp.writableEnded);
    const reasons: string[] = [];
    connection.on('close', (why: string) => reasons.push(why));
    connection.close();
    expect(reasons).toEqual(['forced close']);
    expect(harness.engine.clientsCount).toBe(0);
    expect(ours).toBe(0);
  });

  test('a client closing cleanly: the TCP socket is ended once, and the connection hears a transport close', async () => {
    const { socket, frames } = await raw();
    const { connection, tcp } = serverSideOf(frames);
    let ends = 0;
    const end = tcp.end.bind(tcp);
    tcp.end = ((...args: Parameters<NetSocket['end']>) => {
      ends++;
      return end(...args);
    }) as NetSocket['end'];
    const reasons: string[] = [];
    connection.on('close', (why: string) => reasons.push(why));
    const closedTcp = new Promise<void>((resolve) => tcp.once('close', () => resolve()));
    socket.close(1000, 'bye');
    await closedTcp;
    expect(ends).toBe(1);
    expect(reasons).toEqual(['transport close']);
    expect(harness.engine.clientsCount).toBe(0);
  });

  test('a message over the largest payload closes the connection, as engine.io\'s does', async () => {
    const socket = client(['websocket']);
    await until('connected', () => socket.connected);
    socket.emit('echo', 'x'.repeat(5000));
    await until('the disconnect', () => harness.reasons[0]);
    expect(harness.reasons[0]).toMatch(/transport (close|error)/);
  });

  test('a close that discards closes at once, even while a write never ends (a client that reads nothing)', async () => {
    const socket = client(['websocket']);
    await until('connected', () => socket.connected);
    const server = await until('the server side', () => harness.connected[0]);
    const connection = server.conn as unknown as WebSocketConnection;
    // The client stops reading: the service's writes fill the TCP buffers and never end.
    (socket.io.engine.transport as unknown as { ws: { _socket: { pause(): void } } }).ws._socket.pause();
    const big = 'x'.repeat(64 * 1024);
    for (let i = 0; i < 200 && connection.writeBuffer.length < 5; i++) {
      server.emit('n', big);
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect(connection.writable).toBe(false);
    expect(connection.writeBuffer.length).toBeGreaterThan(0);
    const reasons: string[] = [];
    connection.on('close', (why: string) => reasons.push(why));
    connection.close(true);
    expect(reasons).toEqual(['forced close']);
    expect(connection.readyState).toBe('closed');
    expect(harness.engine.clientsCount).toBe(0);
  });

  test('an upgrade request naming its id is refused', async () => {
    const { frames } = await raw();
    const sid = (JSON.parse((frames[0] as string).slice(1)) as { sid: string }).sid;
    const second = new WebSocket(`${harness.url.replace('http', 'ws')}/socket.io/?EIO=4&transport=websocket&sid=${sid}`);
    raws.push(second);
    await new Promise<void>((resolve) => second.once('close', () => resolve()));
    expect(harness.engine.clientsCount).toBe(1);
  });

  test.each(['GET', 'POST', 'HEAD', 'PUT'])('a plain HTTP %s naming its id with transport=websocket gets 400 and the connection goes on', async (method) => {
    const { socket, frames } = await raw();
    const sid = (JSON.parse((frames[0] as string).slice(1)) as { sid: string }).sid;
    for (const query of [`EIO=4&transport=websocket&sid=${sid}`, `EIO=4&transport=websocket&sid=x&sid=${sid}`]) {
      const res = await fetch(`${harness.url}/socket.io/?${query}`, { method, ...(method === 'POST' || method === 'PUT' ? { body: '4"x"' } : {}) });
      expect(res.status).toBe(400);
      if (method !== 'HEAD') expect(await res.json()).toEqual({ code: 3, message: 'Bad request' });
    }
    expect(socket.readyState).toBe(WebSocket.OPEN);
    expect(harness.engine.clientsCount).toBe(1);
  });

  test('writes wait while a batch is written, and a close after writes lets them out first', async () => {
    const socket = client(['websocket']);
    await until('connected', () => socket.connected);
    const server = await until('the server side', () => harness.connected[0]);
    const heard: number[] = [];
    socket.on('n', (n: number) => heard.push(n));
    for (let n = 0; n < 50; n++) server.emit('n', n);
    server.disconnect();
    await until('every write', () => heard.length === 50);
    expect(heard).toEqual([...Array(50).keys()]);
  });
});

describe('other connections stay engine.io\'s', () => {
  test('long polling, and its upgrade to WebSocket', async () => {
    const socket = client(['polling', 'websocket']);
    await until('connected', () => socket.connected);
    const server = await until('the server side', () => harness.connected[0]);
    expect(server.conn).not.toBeInstanceOf(WebSocketConnection);
    await until('the upgrade', () => socket.io.engine.transport.name === 'websocket');
    await expect(socket.emitWithAck('echo', 'after the upgrade')).resolves.toBe('after the upgrade');
  });

  test('long polling alone', async () => {
    const socket = client(['polling']);
    await until('connected', () => socket.connected);
    await expect(socket.emitWithAck('echo', 'polled')).resolves.toBe('polled');
  });
});

describe('WebSocketConnection listeners', () => {
  test('once is gone before it is called; removeListener takes a once by the listener given', async () => {
    const socket = client(['websocket']);
    await until('connected', () => socket.connected);
    const connection = (await until('the server side', () => harness.connected[0])).conn as unknown as WebSocketConnection;
    const calls: string[] = [];
    const once = (): void => {
      calls.push(`once ${connection.listenerCount('test')}`);
    };
    const removed = (): void => {
      calls.push('removed');
    };
    connection.once('test', once);
    connection.once('test', removed);
    connection.removeListener('test', removed);
    expect(connection.listeners('test')).toEqual([once]);
    expect(connection.emit('test')).toBe(true);
    expect(connection.emit('test')).toBe(false);
    expect(calls).toEqual(['once 0']);
  });
});

describe('compactListeners', () => {
  test('an emitter whose table was compacted emits, adds and removes as before, and inherits no key', () => {
    const emitter = new EventEmitter();
    const heard: string[] = [];
    const a = (): void => void heard.push('a');
    emitter.on('a', a);
    emitter.once('b', () => heard.push('b'));
    compactListeners(emitter);
    expect(Object.getPrototypeOf((emitter as unknown as { _events: object })._events)).not.toBeNull();
    emitter.emit('a');
    emitter.emit('b');
    emitter.emit('b');
    emitter.on('c', () => heard.push('c'));
    emitter.emit('c');
    emitter.removeListener('a', a);
    emitter.emit('a');
    // Keys of Object.prototype are not events.
    expect(emitter.emit('toString')).toBe(false);
    expect(emitter.listenerCount('constructor')).toBe(0);
    expect(heard).toEqual(['a', 'b', 'c']);
    expect(emitter.eventNames()).toEqual(['c']);
    expect(() => emitter.emit('error', new Error('unheard'))).toThrow('unheard');
  });
});
