import { connect as tcpConnect, type Socket as NetSocket } from 'node:net';
import { once } from 'node:events';
import type { ServerOptions, Socket } from 'socket.io';
import { io as ioClient, type Socket as ClientSocket } from 'socket.io-client';
import { WebSocket } from 'ws';
import type { WebSocketConnection } from '../../src/tunnel/engine';
import { CLOSED, OwnWebSocket } from '../../src/tunnel/own-websocket';
import { SmallMap } from '../../src/tunnel/small-collections';
import { TunnelWebSocketServer } from '../../src/tunnel/websocket';
import { startEngineServer, stopEngineServer, type EngineServer } from '../support/engine-harness';
import { collectGarbage } from '../support/gc';
import { mulberry32 } from '../support/prng';
import type { MessageAck, MessageFromDevice, MessageToDevice } from '../../src/tunnel/events';
import { createUser, serviceForDescribe } from '../support/harness';
import { connect as connectProbe, deviceToken, registerHub, request } from '../support/tunnel';
import { twoProcesses } from '../support/two-processes';
import { acceptingListener, binaryFrame as binary, clientFrame as frame, closeFrame, continuationFrame as continuation, textFrame as text } from '../support/websocket-frames';

/**
 * Attacks from outside on the tunnel's own WebSocket (src/tunnel/own-websocket.ts): RFC 6455
 * parsed by the service from the TCP socket. Two kinds of server: the tunnel's engine on port 0
 * (raw TCP clients that write the upgrade request and frames by hand), and the WebSocket alone
 * on an accepted TCP connection, side by side with `ws`'s own server-side WebSocket.
 */

const MAX_PAYLOAD = 4096;

// ---------------------------------------------------------------------------------------
// Helpers

async function until<T>(what: string, read: () => T | undefined | false, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = read();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

const ping = (payload: string | Buffer): Buffer => frame(0x89, payload);

interface ServerFrame {
  readonly opcode: number;
  readonly payload: Buffer;
}

/** Reads the service's frames off a client's socket (after the HTTP answer's head, when `http`). */
function reader(tcp: NetSocket, http: boolean): { frames: ServerFrame[]; status: () => string | undefined; ended: () => boolean } {
  const frames: ServerFrame[] = [];
  let status: string | undefined;
  let ended = false;
  let bytes = Buffer.alloc(0);
  let inBody = !http;
  tcp.on('data', (chunk: Buffer) => {
    bytes = Buffer.concat([bytes, chunk]);
    if (!inBody) {
      const end = bytes.indexOf('\r\n\r\n');
      if (end < 0) return;
      status = bytes.subarray(0, bytes.indexOf('\r\n')).toString();
      bytes = bytes.subarray(end + 4);
      inBody = true;
    }
    for (;;) {
      if (bytes.length < 2) return;
      let length = (bytes[1] as number) & 0x7f;
      let header = 2;
      if (length === 126) {
        if (bytes.length < 4) return;
        length = bytes.readUInt16BE(2);
        header = 4;
      } else if (length === 127) {
        if (bytes.length < 10) return;
        length = Number(bytes.readBigUInt64BE(2));
        header = 10;
      }
      if (bytes.length < header + length) return;
      frames.push({ opcode: (bytes[0] as number) & 0x0f, payload: Buffer.from(bytes.subarray(header, header + length)) });
      bytes = bytes.subarray(header + length);
    }
  });
  tcp.on('end', () => (ended = true));
  return { frames, status: () => status, ended: () => ended };
}

const texts = (frames: readonly ServerFrame[]): string[] => frames.filter((f) => f.opcode === 0x1).map((f) => f.payload.toString());
const closeStatusOf = (frames: readonly ServerFrame[]): number | undefined => {
  const closing = frames.find((f) => f.opcode === 0x8);
  if (closing === undefined) return undefined;
  return closing.payload.length >= 2 ? closing.payload.readUInt16BE(0) : 1005;
};

// ---------------------------------------------------------------------------------------
// The tunnel's engine on port 0, raw TCP clients

/** `ws`'s `closeTimeout` (30 s in the service), short here: an option its types do not list, which the own WebSocket reads too. */
class ShortCloseWebSocketServer extends TunnelWebSocketServer {
  constructor(options?: ConstructorParameters<typeof TunnelWebSocketServer>[0], callback?: () => void) {
    super({ ...options, closeTimeout: 500 } as ConstructorParameters<typeof TunnelWebSocketServer>[0], callback);
  }
}

const connectionWebSocket = (connection: WebSocketConnection): OwnWebSocket => connection.websocket;

interface Harness extends EngineServer {
  readonly connected: Socket[];
  readonly reasons: string[];
}

let harness: Harness | undefined;
const tcps: NetSocket[] = [];
const clients: ClientSocket[] = [];

async function startHarness(options: Partial<ServerOptions> = {}): Promise<Harness> {
  const server = await startEngineServer({ path: '/socket.io', pingInterval: 10_000, pingTimeout: 10_000, perMessageDeflate: false, wsEngine: TunnelWebSocketServer, maxHttpBufferSize: MAX_PAYLOAD, ...options });
  const started: Harness = { ...server, connected: [], reasons: [] };
  server.io.on('connection', (socket) => {
    started.connected.push(socket);
    socket.on('disconnect', (reason) => started.reasons.push(reason));
    socket.on('echo', (value: unknown, ack?: (answer: unknown) => void) => ack?.(value));
  });
  harness = started;
  return started;
}

afterEach(async () => {
  for (const client of clients.splice(0)) client.close();
  for (const tcp of tcps.splice(0)) tcp.destroy();
  if (harness !== undefined) await stopEngineServer(harness);
  harness = undefined;
});

const portOf = (h: Harness): number => Number(new URL(h.url).port);
const upgradeRequest = (h: Harness): Buffer =>
  Buffer.from(
    `GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\nHost: 127.0.0.1:${portOf(h)}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
      'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n',
  );

interface Raw {
  readonly tcp: NetSocket;
  readonly frames: ServerFrame[];
  readonly status: () => string | undefined;
  readonly ended: () => boolean;
}

/** A raw TCP client: the upgrade request, with `after` in the same write. */
async function rawClient(h: Harness, after: Buffer = Buffer.alloc(0)): Promise<Raw> {
  const tcp = tcpConnect(portOf(h), '127.0.0.1');
  tcps.push(tcp);
  tcp.on('error', () => undefined);
  const read = reader(tcp, true);
  await once(tcp, 'connect');
  tcp.write(Buffer.concat([upgradeRequest(h), after]));
  return { tcp, ...read };
}

/** The engine's own connections (src/tunnel/engine.ts). */
const ownConnections = (h: Harness): WebSocketConnection[] => [...(h.engine as unknown as { connections: Set<WebSocketConnection> }).connections];

async function opened(h: Harness, after?: Buffer): Promise<Raw & { connection: WebSocketConnection; serverTcp: NetSocket }> {
  const count = ownConnections(h).length;
  const raw = await rawClient(h, after);
  await until('the open packet', () => texts(raw.frames).length > 0);
  const connection = ownConnections(h)[count] as WebSocketConnection;
  const serverTcp = connection.websocket.socket as NetSocket;
  return { ...raw, connection, serverTcp };
}

describe('findings: what the service did wrong, and does right now', () => {
  test('a CONNECT written in the same packet as the upgrade request (the upgrade\'s head) is answered, not dropped', async () => {
    const h = await startHarness();
    const raw = await rawClient(h, text('40'));
    await until('the Socket.IO connect answer', () => texts(raw.frames).find((t) => t.startsWith('40{')));
    expect(raw.status()).toBe('HTTP/1.1 101 Switching Protocols');
    expect(texts(raw.frames)[0]?.startsWith('0{')).toBe(true);
    expect(h.connected).toHaveLength(1);
  });

  test('pings from a client that reads nothing: the service keeps at most a pong or two unwritten, and answers the last ping once the client reads', async () => {
    const h = await startHarness();
    const client = await opened(h);
    client.tcp.pause();
    const batch = Buffer.concat(Array.from({ length: 1000 }, () => ping('p'.repeat(125))));
    let sent = 0;
    // 26 MB of pings: far more than the kernel's buffers on both sides hold.
    for (let i = 0; i < 200; i++) {
      sent += batch.length;
      if (!client.tcp.write(batch)) await once(client.tcp, 'drain');
    }
    const last = ping('the last ping');
    client.tcp.write(last);
    sent += last.length;
    await until('every ping read by the service', () => client.serverTcp.bytesRead >= sent + upgradeRequest(h).length, 60_000);
    // Unbounded before: one pong queued in the process for every ping (about 21 MB here).
    expect(client.serverTcp.writableLength).toBeLessThan(64 * 1024);
    client.tcp.resume();
    await until('the pong of the last ping', () => client.frames.some((f) => f.opcode === 0xa && f.payload.toString() === 'the last ping'), 60_000);
    expect(client.connection.readyState).toBe('open');
  });
});

// ---------------------------------------------------------------------------------------
// The WebSocket alone, side by side with ws's

type Side = 'own' | 'ws';

const { accepted, port: listenerPort } = acceptingListener();

interface Pair {
  readonly client: NetSocket;
  readonly messages: string[];
  readonly closes: string[];
  readonly answer: ReturnType<typeof reader>;
  readonly server: OwnWebSocket | WebSocket;
  readonly serverTcp: NetSocket;
}

async function pair(side: Side, maxPayload = MAX_PAYLOAD, listening = true): Promise<Pair> {
  const count = accepted.length;
  const client = tcpConnect(listenerPort(), '127.0.0.1');
  tcps.push(client);
  client.on('error', () => undefined);
  await once(client, 'connect');
  const serverTcp = await until('accepted', () => accepted[count]);
  const messages: string[] = [];
  const closes: string[] = [];
  const show = (data: string | Buffer): string => (typeof data === 'string' ? data : `bin:${data.toString('hex')}`);
  let server: OwnWebSocket | WebSocket;
  if (side === 'own') {
    const own = new OwnWebSocket(null, undefined, { closeTimeout: 500 });
    own.setSocket(serverTcp, Buffer.alloc(0), { maxPayload });
    const connection = {
      receive: (data: string | Buffer) => void messages.push(show(data)),
      onClose: (reason: string) => void closes.push(reason),
    } as unknown as WebSocketConnection;
    if (listening) own.connection = connection;
    else (own as unknown as { listen: () => void }).listen = () => void (own.connection = connection);
    server = own;
  } else {
    const ws = new (WebSocket as unknown as new (...args: unknown[]) => WebSocket & { setSocket(...args: unknown[]): void })(null, undefined, { closeTimeout: 500, autoPong: true });
    ws.setSocket(serverTcp, Buffer.alloc(0), { maxPayload, allowSynchronousEvents: true });
    ws.on('message', (data: Buffer, isBinary: boolean) => messages.push(isBinary ? show(data) : data.toString()));
    ws.on('error', () => closes.push('transport error'));
    ws.on('close', () => closes.push('transport close'));
    server = ws;
  }
  return { client, messages, closes, answer: reader(client, false), server, serverTcp };
}

describe('findings on the WebSocket alone', () => {
  test('a frame trickled a byte or two a packet: the chunks waiting for it are merged, not kept as a Buffer object each (about 200 bytes of heap a chunk before)', async () => {
    const p = await pair('own', 128 * 1024);
    let chunks = 0;
    p.serverTcp.on('data', () => chunks++);
    const payload = 60_000;
    p.client.setNoDelay(true);
    p.client.write(frame(0x82, Buffer.alloc(0), { lengthField: '64' }).subarray(0, 2));
    // A 64-bit length of 60,000 and a zero mask, then the payload a byte a write.
    const header = Buffer.alloc(12);
    header.writeBigUInt64BE(BigInt(payload), 0);
    p.client.write(header);
    await until('the header read', () => p.serverTcp.bytesRead === 14);
    await collectGarbage();
    const before = process.memoryUsage().heapUsed;
    const chunksBefore = chunks;
    let sent = 14;
    for (let i = 0; i < payload; i++) {
      p.client.write(Buffer.from([7]));
      sent++;
      if (i % 2 === 1) await new Promise((resolve) => setImmediate(resolve));
      // The last byte is held back: the frame is still waiting when the heap is measured.
      if (i === payload - 2) break;
    }
    await until('all but the last byte read', () => p.serverTcp.bytesRead === sent);
    await collectGarbage();
    const grown = process.memoryUsage().heapUsed - before;
    const read = chunks - chunksBefore;
    expect(read).toBeGreaterThan(1000);
    expect(grown / read).toBeLessThan(60);
    p.client.write(Buffer.from([7]));
    await until('the message', () => p.messages.length === 1);
    expect(p.messages[0]).toBe(`bin:${'07'.repeat(payload)}`);
  });

  test('messages read before the connection is made wait for it, in order; past sixteen nothing more is read until it is there', async () => {
    const p = await pair('own', MAX_PAYLOAD, false);
    const sent = Array.from({ length: 20 }, (_, i) => `m${i}`);
    p.client.write(Buffer.concat([...sent.map((m) => text(m)), binary(Buffer.from([9]))]));
    await until('reading paused at sixteen', () => p.serverTcp.isPaused());
    expect(p.messages).toEqual([]);
    expect((p.server as unknown as { early: unknown[] }).early).toHaveLength(16);
    (p.server as unknown as { listen: () => void }).listen();
    await until('every message', () => p.messages.length === 21);
    expect(p.messages).toEqual([...sent, 'bin:09']);
    expect(p.serverTcp.isPaused()).toBe(false);
  });

  test('a message of one-byte fragments: the heap it takes is about its size, not a Buffer object per fragment (15 times what the client sent before)', async () => {
    const count = 120_000;
    const p = await pair('own', 128 * 1024);
    await collectGarbage();
    const before = process.memoryUsage().heapUsed;
    const batch = Buffer.concat(Array.from({ length: 1000 }, () => continuation('x', false)));
    let sent = p.client.write(text('x', false)) ? 7 : 7;
    for (let i = 0; i < count / 1000; i++) {
      sent += batch.length;
      if (!p.client.write(batch)) await once(p.client, 'drain');
    }
    await until('every fragment read', () => p.serverTcp.bytesRead >= sent);
    await collectGarbage();
    const grown = process.memoryUsage().heapUsed - before;
    // 840 KB sent; 13 MB of heap before (ws keeps as much: a view per fragment).
    expect(grown).toBeLessThan(4 * 1024 * 1024);
    p.client.write(continuation('!', true));
    await until('the message', () => p.messages.length === 1);
    expect(p.messages[0]).toBe(`${'x'.repeat(count + 1)}!`);
    expect(p.closes).toEqual([]);
  });
});

// ---------------------------------------------------------------------------------------
// What held

/** Writes `chunks` one write each, a turn of the event loop between them. */
async function writeApart(client: NetSocket, chunks: readonly Buffer[]): Promise<void> {
  for (const chunk of chunks) {
    client.write(chunk);
    await new Promise((resolve) => setImmediate(resolve));
  }
}

describe('held: frames split anywhere, as ws hears them', () => {
  const stream = Buffer.concat([
    text('42["a"]'),
    text('fr', false),
    ping('mid'),
    continuation('ag', false),
    frame(0x8a, ''),
    continuation('ment', true),
    binary(Buffer.from([1, 2, 3])),
    text('y'.repeat(300)),
    frame(0x81, 'long length field', { lengthField: '64' }),
    frame(0x81, 'zero mask', { mask: [0, 0, 0, 0] }),
  ]);
  const expected = ['42["a"]', 'fragment', 'bin:010203', 'y'.repeat(300), 'long length field', 'zero mask'];

  test('split in two at every byte boundary: the same messages, one pong, no close', async () => {
    for (let at = 1; at < stream.length; at++) {
      const p = await pair('own');
      await writeApart(p.client, [stream.subarray(0, at), stream.subarray(at)]);
      await until(`the messages (split at ${at})`, () => p.messages.length === expected.length);
      expect(p.messages).toEqual(expected);
      await until('the pong', () => p.answer.frames.length > 0);
      expect(p.answer.frames.map((f) => [f.opcode, f.payload.toString()])).toEqual([[0xa, 'mid']]);
      expect(p.closes).toEqual([]);
      p.client.destroy();
    }
  });

  test.each([1, 2, 3])('large frames and fragments in random chunks of 1 to 9 bytes (seed %d): the same messages as ws', async (seed) => {
    const random = mulberry32(seed);
    const big = 'é'.repeat(1500);
    const long = Buffer.concat([
      text(big),
      binary(Buffer.alloc(1200, 5), false),
      ping('in between'),
      continuation(Buffer.alloc(900, 6), false),
      continuation(Buffer.alloc(3, 7), true),
      text('z'.repeat(130)),
      frame(0x81, 'x'.repeat(2000), { lengthField: '64' }),
    ]);
    const chunks: Buffer[] = [];
    for (let at = 0; at < long.length; ) {
      const size = 1 + Math.floor(random() * 9);
      chunks.push(long.subarray(at, at + size));
      at += size;
    }
    const heard: string[][] = [];
    for (const side of ['own', 'ws'] as const) {
      const p = await pair(side);
      await writeApart(p.client, chunks);
      await until('the messages', () => p.messages.length === 4);
      expect(p.closes).toEqual([]);
      heard.push(p.messages);
    }
    expect(heard[0]).toEqual(heard[1]);
    expect(heard[0]?.[0]).toBe(big);
    expect(heard[0]?.[1]).toBe(`bin:${'05'.repeat(1200)}${'06'.repeat(900)}070707`);
  });

  test.each<Side>(['own', 'ws'])('one byte a write (%s)', async (side) => {
    const p = await pair(side);
    await writeApart(p.client, [...stream].map((byte) => Buffer.from([byte])));
    await until('the messages', () => p.messages.length === expected.length);
    expect(p.messages).toEqual(expected);
  });
});

describe('held: what a client can make the service keep', () => {
  test('a header promising the largest payload, of which little comes: only what came is kept, nothing set aside for the rest', async () => {
    const p = await pair('own');
    // 16-bit length: MAX_PAYLOAD bytes promised, ten sent.
    p.client.write(Buffer.concat([Buffer.from([0x81, 0x80 | 126, MAX_PAYLOAD >> 8, MAX_PAYLOAD & 0xff, 0, 0, 0, 0]), Buffer.alloc(10, 0x61)]));
    const own = p.server as unknown as { pendingBytes: number; pending: Buffer[] | null };
    await until('the partial frame read', () => own.pendingBytes === 18);
    expect(own.pending?.reduce((sum, b) => sum + b.buffer.byteLength, 0)).toBeLessThan(64 * 1024);
    // The rest comes at last: the message is whole.
    p.client.write(Buffer.alloc(MAX_PAYLOAD - 10, 0x61));
    await until('the message', () => p.messages.length === 1);
    expect(p.messages[0]).toHaveLength(MAX_PAYLOAD);
  });

  test('a client stuck in the middle of a frame stops answering pings: the engine closes it at its ping timeout, its TCP side destroyed at the close timeout', async () => {
    const h = await startHarness({ pingInterval: 200, pingTimeout: 300, wsEngine: ShortCloseWebSocketServer });
    const client = await opened(h);
    client.tcp.write(Buffer.from([0x81, 0x80 | 126, 0x0f, 0xff, 0, 0, 0, 0, 0x61]));
    await until('closed for its ping timeout', () => client.connection.readyState === 'closed');
    expect(closeStatusOf(await until('the close frame', () => (client.frames.some((f) => f.opcode === 0x8) ? client.frames : undefined)))).toBe(1005);
    // It never answers the close frame (its bytes are still those of a frame it never finishes).
    await until('the service\'s TCP side destroyed', () => client.serverTcp.destroyed);
    await until('its WebSocket closed', () => connectionWebSocket(client.connection).readyState === CLOSED);
    expect(h.engine.clientsCount).toBe(0);
  });

  test('a flood of empty non-final fragments keeps nothing, and the message they make is empty (as ws)', async () => {
    const own = await pair('own');
    const ws = await pair('ws');
    const flood = Buffer.concat([text('', false), ...Array.from({ length: 20_000 }, () => continuation('', false)), continuation('', true)]);
    for (const p of [own, ws]) p.client.write(flood);
    await until('the messages', () => own.messages.length === 1 && ws.messages.length === 1);
    expect(own.messages).toEqual(['']);
    expect(ws.messages).toEqual(['']);
    expect((own.server as unknown as { fragments: unknown }).fragments).toBeNull();
  });

  test('a 64-bit length of 1 MB over the largest payload: refused (1009) from its header, the megabyte that follows never parsed', async () => {
    for (const side of ['own', 'ws'] as const) {
      const p = await pair(side);
      p.client.write(frame(0x82, Buffer.alloc(1024 * 1024, 7), { lengthField: '64' }));
      await until('the close frame', () => closeStatusOf(p.answer.frames) !== undefined);
      expect(closeStatusOf(p.answer.frames)).toBe(1009);
      expect(p.messages).toEqual([]);
      expect(p.closes[0]).toBe('transport error');
    }
  });
});

describe('held: text, control frames and closes against the protocol (the status ws sends)', () => {
  test.each<[string, Buffer, number | undefined, string[]]>([
    ['a BOM at the start of a text message is kept in it', text(Buffer.from([0xef, 0xbb, 0xbf, 0x61])), undefined, ['\ufeffa']],
    ['a lone surrogate encoded in UTF-8 (ED A0 80)', text(Buffer.from([0x61, 0xed, 0xa0, 0x80])), 1007, []],
    ['an overlong encoding of "/" (C0 AF)', text(Buffer.from([0xc0, 0xaf])), 1007, []],
    ['a 4-byte character split across three fragments', Buffer.concat([text(Buffer.from([0xf0, 0x9f]), false), continuation(Buffer.from([0x99]), false), continuation(Buffer.from([0x82]), true)]), undefined, ['🙂']],
    ['a lone surrogate split across fragments', Buffer.concat([text(Buffer.from([0xed]), false), continuation(Buffer.from([0xb0, 0x80]), true)]), 1007, []],
    ['a close frame in the middle of a fragmented message: the message is dropped, the close echoed', Buffer.concat([text('half', false), closeFrame(4000, 'bye'), continuation('rest', true)]), 4000, []],
    ['two close frames: the second is not read, one close frame back', Buffer.concat([closeFrame(1000), closeFrame(4001)]), 1000, []],
    ['a message after the close frame is not heard', Buffer.concat([closeFrame(1001), text('after')]), 1001, []],
    ['a ping between fragments, then a fragment with a bad opcode: 1002', Buffer.concat([text('a', false), ping(''), frame(0x81, 'b')]), 1002, []],
  ])('%s', async (_what, bytes, status, messages) => {
    for (const side of ['own', 'ws'] as const) {
      const p = await pair(side);
      p.client.write(bytes);
      if (status === undefined) await until('the message', () => p.messages.length === messages.length && messages.length > 0);
      else await until('the close frame', () => closeStatusOf(p.answer.frames) !== undefined);
      expect([side, closeStatusOf(p.answer.frames)]).toEqual([side, status]);
      expect(p.answer.frames.filter((f) => f.opcode === 0x8).length).toBe(status === undefined ? 0 : 1);
      expect([side, p.messages]).toEqual([side, messages]);
      p.client.destroy();
    }
  });
});

describe('held: a faulty network against the engine', () => {
  const stages: Array<[string, (h: Harness) => Buffer]> = [
    ['in the upgrade request', (h) => upgradeRequest(h).subarray(0, 40)],
    ['right after the upgrade request', (h) => upgradeRequest(h)],
    ['in a frame\'s header', (h) => Buffer.concat([upgradeRequest(h), Buffer.from([0x81, 0xfe, 0x01])])],
    ['in a frame\'s payload', (h) => Buffer.concat([upgradeRequest(h), text('4'.repeat(500)).subarray(0, 100)])],
    ['in a fragmented message', (h) => Buffer.concat([upgradeRequest(h), text('40', false)])],
    ['after its close frame', (h) => Buffer.concat([upgradeRequest(h), closeFrame(1000)])],
  ];

  test.each(stages)('a reset %s: nothing left in the engine, the service\'s socket gone', async (_what, bytes) => {
    const h = await startHarness();
    const tcp = tcpConnect(portOf(h), '127.0.0.1');
    tcps.push(tcp);
    tcp.on('error', () => undefined);
    await once(tcp, 'connect');
    tcp.write(bytes(h));
    // Let the service read it (and open a connection, when the request is whole).
    await new Promise((resolve) => setTimeout(resolve, 50));
    const opened = ownConnections(h);
    tcp.resetAndDestroy();
    await until('the engine forgets it', () => h.engine.clientsCount === 0 && ownConnections(h).length === 0);
    for (const connection of opened) await until('its WebSocket closed', () => connection.websocket.readyState === CLOSED);
    await until('no TCP connection left', () => new Promise<number>((resolve) => h.http.getConnections((_e, n) => resolve(n))).then((n) => n === 0));
  });

  test('a message written together with the client\'s FIN is heard, then the connection closes (transport close)', async () => {
    const h = await startHarness();
    const client = await opened(h);
    client.tcp.end(text('40'));
    await until('the Socket.IO socket', () => h.connected[0]);
    await until('its disconnect', () => h.reasons[0]);
    expect(h.reasons).toEqual(['transport close']);
    await until('the service ended its side', () => client.ended());
    expect(h.engine.clientsCount).toBe(0);
  });
});

describe('held: Socket.IO over the own WebSocket and over long polling', () => {
  const url = (h: Harness, namespace = ''): string => `${h.url}${namespace}`;

  test('a long-polling client still connects, upgrades to WebSocket (ws\'s, not the own one), and acks work both ways', async () => {
    const h = await startHarness();
    const client = ioClient(url(h), { transports: ['polling', 'websocket'], reconnection: false, forceNew: true });
    clients.push(client);
    client.on('ask', (value: number, ack: (answer: number) => void) => ack(value * 2));
    await until('connected', () => client.connected);
    await until('upgraded', () => client.io.engine.transport.name === 'websocket');
    await expect(client.timeout(5000).emitWithAck('echo', 'over polling, then ws')).resolves.toBe('over polling, then ws');
    const server = h.connected[0] as Socket;
    expect(server.conn.transport.name).toBe('websocket');
    expect((server.conn as unknown as { websocket?: unknown }).websocket).toBeUndefined();
    await expect(server.timeout(5000).emitWithAck('ask', 21)).resolves.toBe(42);
  });

  test('acks both ways over the own WebSocket, several at once in Socket.IO\'s maps made small (they spill into a Map and back)', async () => {
    const h = await startHarness();
    const client = ioClient(url(h), { transports: ['websocket'], reconnection: false, forceNew: true });
    clients.push(client);
    const pendingAnswers: Array<() => void> = [];
    client.on('ask', (value: number, ack: (answer: number) => void) => pendingAnswers.push(() => ack(value * 2)));
    await until('connected', () => client.connected);
    const server = h.connected[0] as Socket;
    expect(server.conn).toBe((server.conn as unknown as { transport: unknown }).transport);
    const maps = server as unknown as { acks: Map<number, unknown> };
    maps.acks = new SmallMap(maps.acks);
    const answers = [1, 2, 3].map((n) => server.timeout(5000).emitWithAck('ask', n));
    await until('three asks at the client', () => pendingAnswers.length === 3);
    expect(maps.acks.size).toBe(3);
    // Answered in reverse order.
    for (const answer of [...pendingAnswers].reverse()) answer();
    await expect(Promise.all(answers)).resolves.toEqual([2, 4, 6]);
    expect(maps.acks.size).toBe(0);
    await expect(client.timeout(5000).emitWithAck('echo', 'back')).resolves.toBe('back');
  });

  test('two namespaces on one connection, the client\'s maps made small: both work, one leaves, the other goes on', async () => {
    const h = await startHarness();
    h.io.of('/second').on('connection', (socket) => socket.on('echo', (value: unknown, ack: (answer: unknown) => void) => ack(`second:${String(value)}`)));
    const main = ioClient(url(h), { transports: ['websocket'], reconnection: false });
    clients.push(main);
    await until('connected', () => main.connected);
    const server = h.connected[0] as Socket;
    const client = server.client as unknown as { sockets: Map<string, unknown>; nsps: Map<string, unknown> };
    client.sockets = new SmallMap(client.sockets);
    client.nsps = new SmallMap(client.nsps);
    const second = ioClient(url(h, '/second'), { transports: ['websocket'], reconnection: false });
    clients.push(second);
    await until('the second namespace connected', () => second.connected);
    // One engine connection for both.
    expect(client.sockets.size).toBe(2);
    expect(client.nsps.size).toBe(2);
    await expect(second.timeout(5000).emitWithAck('echo', 'x')).resolves.toBe('second:x');
    main.disconnect();
    await until('the main namespace left', () => client.nsps.size === 1);
    await expect(second.timeout(5000).emitWithAck('echo', 'y')).resolves.toBe('second:y');
  });
});

describe('held: two API processes with Redis, no socket in a room of its own', () => {
  const { a, b, on } = twoProcesses({ closeSockets: 'afterEach' });

  test('an app on one process reaches a hub on the other by its device room, and the hub answers; a second hub socket on the first process replaces it', async () => {
    const owner = await createUser(a());
    const hub = await registerHub(a(), owner);
    const token = await deviceToken(a(), hub, owner);
    const app = await on(a(), owner.accessToken);
    await request(app, 'tunnel:subscribe', { deviceUuid: hub.uuid });
    const device = await on(b(), token);
    // Straight over WebSocket: the own WebSocket on both sides.
    expect(device.socket.io.engine.transport.name).toBe('websocket');
    expect(await request<MessageAck>(app, 'tunnel:message', { deviceUuid: hub.uuid, id: 'm-1', type: 'light.set', payload: 1 })).toEqual({ success: true, delivered: true });
    expect(await device.next<MessageToDevice>('tunnel:message')).toMatchObject({ id: 'm-1', type: 'light.set', payload: 1 });
    expect(await request<MessageAck>(device, 'tunnel:message', { replyTo: 'm-1', type: 'ok', payload: 2 })).toEqual({ success: true, delivered: true });
    expect(await app.next<MessageFromDevice>('tunnel:message')).toMatchObject({ from: 'device', replyTo: 'm-1', payload: 2 });
    // The newest socket of a device wins across processes: the old one is reached and dropped.
    const again = await on(a(), token);
    await device.next('disconnect');
    expect(await request<MessageAck>(app, 'tunnel:message', { deviceUuid: hub.uuid, id: 'm-2', type: 'x', payload: 3 })).toEqual({ success: true, delivered: true });
    expect(await again.next<MessageToDevice>('tunnel:message')).toMatchObject({ id: 'm-2' });
  }, 60_000);
});

describe('held: the service itself, one connection joining namespaces by hand', () => {
  const serviceOf = serviceForDescribe('embedded');

  test('the main namespace refused, /tunnel joined, an ack answered; a second CONNECT to /tunnel is found in Socket.IO\'s small map and closes the connection (its rule), the service goes on', async () => {
    const service = serviceOf();
    const user = await createUser(service);
    const url = new URL(service.baseUrl);
    const tcp = tcpConnect(Number(url.port), url.hostname);
    tcps.push(tcp);
    tcp.on('error', () => undefined);
    const read = reader(tcp, true);
    await once(tcp, 'connect');
    tcp.write(`GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\nHost: ${url.host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n`);
    await until('the open packet', () => texts(read.frames).length > 0);
    const connect = `40/tunnel,${JSON.stringify({ token: user.accessToken })}`;
    tcp.write(text('40'));
    await until('the main namespace refused', () => texts(read.frames).find((t) => t.startsWith('44{')));
    tcp.write(text(connect));
    await until('the /tunnel socket', () => texts(read.frames).find((t) => t.startsWith('40/tunnel,{"sid"')));
    tcp.write(text('42/tunnel,7["tunnel:subscribe",{"deviceUuid":"00000000-0000-4000-8000-000000000000"}]'));
    const ack = await until('the ack', () => texts(read.frames).find((t) => t.startsWith('43/tunnel,7')));
    expect(JSON.parse(ack.slice('43/tunnel,7'.length))).toEqual([expect.objectContaining({ success: false })]);
    tcp.write(text(connect));
    await until('the connection closed by the service', () => closeStatusOf(read.frames) !== undefined);
    expect(texts(read.frames).filter((t) => t.startsWith('40/tunnel,{"sid"'))).toHaveLength(1);
    tcp.write(closeFrame(1000));
    await until('the service ended the connection', () => read.ended());
    // The service goes on: a client connects as usual.
    const again = await connectProbe(service, user.accessToken);
    again.close();
  });
});
