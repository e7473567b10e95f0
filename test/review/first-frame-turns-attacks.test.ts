import type { Socket as NetSocket } from 'node:net';
import type { Socket } from 'socket.io';
import { WebSocket } from 'ws';
import { appHandshakeFrame } from '../../src/tunnel/admission';
import { WebSocketConnection } from '../../src/tunnel/engine';
import type { OwnWebSocket } from '../../src/tunnel/own-websocket';
import { TunnelWebSocketServer } from '../../src/tunnel/websocket';
import { io as ioClient, type Socket as ClientSocket } from 'socket.io-client';
import { startEngineServer, stopEngineServer, type EngineServer } from '../support/engine-harness';
import { holdEventLoop, nextTurn, until } from '../support/event-loop';
import { createUser, serviceForDescribe } from '../support/harness';
import { scrape } from '../support/metrics';
import { connect, deviceToken, registerHub, request, type Probe } from '../support/tunnel';
import { manualTurns, type ManualTurns } from '../support/manual-turns';

/**
 * Review of a connection's first frame waiting its turn (src/tunnel/engine.ts
 * `WebSocketConnection.receive`/`waitTurn`, `TunnelEngine.handshakeTurns`), attacked from
 * outside with raw engine.io/Socket.IO frames.
 *
 * The engine's tests give it turns that run a job only when the test says so (`release`):
 * what happens while a first frame waits is then decided by the test, not by how busy the
 * machine is. The service's tests (below) run the real turns behind a flood of junk.
 */

async function turnsPass(n: number): Promise<void> {
  for (let i = 0; i < n; i++) await nextTurn();
}

interface Harness extends EngineServer {
  readonly turns: ManualTurns;
  /** Namespace connections, as `nsp:socket id`, in the order the server made them. */
  readonly connections: string[];
  readonly reasons: string[];
}

const NAMESPACES = ['/tunnel', ...Array.from({ length: 20 }, (_, i) => `/n${i}`)];

async function startHarness(options: { pingInterval?: number; pingTimeout?: number; connectTimeout?: number } = {}): Promise<Harness> {
  const server = await startEngineServer({
    path: '/socket.io',
    perMessageDeflate: false,
    wsEngine: TunnelWebSocketServer,
    maxHttpBufferSize: 1_000_000,
    pingInterval: options.pingInterval ?? 25_000,
    pingTimeout: options.pingTimeout ?? 20_000,
    connectTimeout: options.connectTimeout ?? 45_000,
  });
  const turns = manualTurns();
  server.engine.handshakeTurns = { turns, atOnce: (frame) => appHandshakeFrame(frame, '/tunnel') };
  const connections: string[] = [];
  const reasons: string[] = [];
  for (const name of NAMESPACES) {
    server.io.of(name).on('connection', (socket: Socket) => {
      connections.push(name);
      socket.on('disconnect', (reason) => reasons.push(reason));
      socket.on('echo', (payload: unknown, ack?: (answer: unknown) => void) => ack?.(payload));
    });
  }
  return { ...server, turns, connections, reasons };
}

interface Raw {
  readonly ws: WebSocket;
  /** Every text frame received, in order (the open packet first). */
  readonly frames: string[];
  closed: boolean;
  /** The server's side of this connection. */
  readonly connection: WebSocketConnection;
  readonly serverWs: OwnWebSocket & { socket: NetSocket };
}

async function openRaw(harness: EngineServer, answerPings = true): Promise<Raw> {
  const ws = new WebSocket(`${harness.url.replace('http', 'ws')}/socket.io/?EIO=4&transport=websocket`, { perMessageDeflate: false });
  const frames: string[] = [];
  const raw = { ws, frames, closed: false } as Raw & { connection: WebSocketConnection; serverWs: Raw['serverWs'] };
  ws.on('error', () => undefined);
  ws.on('close', () => (raw.closed = true));
  ws.on('message', (data: Buffer, binary: boolean) => {
    const text = binary ? `<binary ${data.length}>` : data.toString();
    frames.push(text);
    if (answerPings && text === '2') ws.send('3');
  });
  await until(() => frames.length > 0, 'the open packet');
  const id = (JSON.parse(frames[0]?.slice(1) ?? '{}') as { sid: string }).sid;
  const connection = (harness.engine as unknown as { clients: Record<string, WebSocketConnection> }).clients[id] as WebSocketConnection;
  expect(connection).toBeInstanceOf(WebSocketConnection);
  raw.connection = connection;
  raw.serverWs = (connection as unknown as { websocket: Raw['serverWs'] }).websocket;
  return raw;
}

/** What the connection holds while its first frame waits (null: nothing held). */
const heldOf = (raw: Raw): unknown[] | null => (raw.connection as unknown as { held: unknown[] | null }).held;

const DEVICE_CONNECT = '40/tunnel,{"token":"a-device-token"}';

describe('the engine with turns the test releases', () => {
  let harness: Harness;
  const raws: Raw[] = [];
  beforeEach(async () => {
    harness = await startHarness();
  });
  afterEach(async () => {
    for (const raw of raws.splice(0)) raw.ws.terminate();
    await stopEngineServer(harness);
  });
  const open = async (answerPings = true): Promise<Raw> => {
    const raw = await openRaw(harness, answerPings);
    raws.push(raw);
    return raw;
  };

  /**
   * A CONNECT with frames behind it in the same TCP segment (pongs, noops, CONNECTs to other
   * namespaces): nothing is worked out before the turn; at the turn every one, once, in the
   * order sent.
   */
  test('frames read with the first are replayed at its turn in order, none lost, none twice', async () => {
    const raw = await open();
    const sent = [DEVICE_CONNECT, '3', '6', ...NAMESPACES.slice(1, 13).map((n) => `40${n},`)];
    for (const frame of sent) raw.ws.send(frame);
    holdEventLoop(50);
    await until(() => harness.turns.jobs.length === 1, 'the first frame waiting');
    await turnsPass(5);
    expect(harness.connections).toEqual([]);
    expect(heldOf(raw)).toHaveLength(sent.length);
    harness.turns.release();
    await until(() => harness.connections.length === 13, 'every namespace connected');
    await turnsPass(5);
    expect(harness.connections).toEqual(NAMESPACES.slice(0, 13));
    // Each CONNECT answered once, in order.
    const acks = raw.frames.filter((f) => f.startsWith('40')).map((f) => f.slice(2, f.indexOf(',')));
    expect(acks).toEqual(NAMESPACES.slice(0, 13));
    expect(raw.closed).toBe(false);
    expect(heldOf(raw)).toBeNull();
  });

  test('sixteen frames before the turn are held; a seventeenth closes the connection, nothing of it worked out', async () => {
    const [sixteen, seventeen] = [await open(), await open()];
    for (let i = 0; i < 16; i++) sixteen.ws.send(i === 0 ? DEVICE_CONNECT : '6');
    for (let i = 0; i < 17; i++) seventeen.ws.send(i === 0 ? DEVICE_CONNECT : '6');
    holdEventLoop(50);
    await until(() => seventeen.closed, 'the seventeenth closed');
    expect(sixteen.closed).toBe(false);
    expect(heldOf(sixteen)).toHaveLength(16);
    harness.turns.release();
    await until(() => harness.connections.length === 1, 'the sixteen connected');
    await turnsPass(5);
    expect(harness.connections).toEqual(['/tunnel']);
    expect(sixteen.closed).toBe(false);
  });

  /**
   * `ws` paused its TCP socket itself when a chunk filled its receiver past its high-water mark,
   * and resumed it on the receiver's `drain`: a pause behind its back was undone. The tunnel's
   * own WebSocket has no such stream, but a client whose first frame comes with a large one
   * behind it (a 40 KB noop, read in several chunks) must still not be read on while its
   * handshake waits, nor the frames it sends later pile up in `held`.
   */
  test('a large frame behind the first: nothing resumes reading while the first waits', async () => {
    const raw = await open();
    raw.ws.send(DEVICE_CONNECT);
    raw.ws.send(`6${'x'.repeat(40_000)}`);
    holdEventLoop(50);
    await until(() => harness.turns.jobs.length === 1, 'the first frame waiting');
    // A drain (as `ws` had) would come a tick after the chunk was read.
    await turnsPass(5);
    expect(raw.serverWs.socket.isPaused()).toBe(true);
    // Frames sent later are not read before the turn: they are neither held nor closing it.
    for (let i = 0; i < 40; i++) raw.ws.send('6');
    holdEventLoop(50);
    await turnsPass(10);
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(raw.connection.readyState).toBe('open');
    expect(heldOf(raw)?.length ?? 0).toBeLessThanOrEqual(2);
    harness.turns.release();
    await until(() => harness.connections.length === 1, 'connected at its turn');
    // Read on after the turn: the 40 noops are nothing, an event is answered.
    raw.ws.send('42/tunnel,1["echo","after"]');
    await until(() => raw.frames.includes('43/tunnel,1["after"]'), 'the echo answered');
    expect(raw.closed).toBe(false);
  });

  /**
   * The server pings on its own sweep; while the first frame waits, the client's pong is not
   * read (the socket is paused, or the pong is held). A connection whose handshake waits longer
   * than the ping's interval and wait is not a dead one: its pong is in its socket.
   */
  test('a ping unanswered only because the server is not reading: the connection is not closed for it', async () => {
    await stopEngineServer(harness);
    harness = await startHarness({ pingInterval: 100, pingTimeout: 100 });
    const raw = await open();
    raw.ws.send(DEVICE_CONNECT);
    await until(() => harness.turns.jobs.length === 1, 'the first frame waiting');
    // Past a ping interval and its wait, twice over.
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(raw.connection.readyState).toBe('open');
    harness.turns.release();
    await until(() => harness.connections.length === 1 || raw.closed, 'connected, or closed');
    expect(harness.connections).toEqual(['/tunnel']);
    // A client that then stops answering is still closed for it.
    raw.ws.removeAllListeners('message');
    await until(() => raw.closed, 'closed by the ping timeout');
    expect(harness.reasons).toEqual(['ping timeout']);
  });

  test("an app's CONNECT goes at once while the turns run nothing; impostors wait", async () => {
    const access = (type: string): string => `${Buffer.from('{"alg":"HS256"}').toString('base64url')}.${Buffer.from(JSON.stringify({ type, sub: 'u' })).toString('base64url')}.c2ln`;
    const app = await open();
    app.ws.send(`40/tunnel,${JSON.stringify({ token: access('access') })}`);
    await until(() => harness.connections.length === 1, 'the app connected');
    expect(harness.turns.jobs).toHaveLength(0);
    const waiting = [
      `40/tunnel,${JSON.stringify({ token: access('Access') })}`,
      `40/tunnel,${JSON.stringify({ token: access('device') })}`,
      `40/tunnel,${JSON.stringify({ TOKEN: access('access') })}`,
      `40/tunnel,${JSON.stringify({ token: [access('access')] })}`,
      `40/tunnel,1${JSON.stringify({ token: access('access') })}`,
      `40/other,${JSON.stringify({ token: access('access') })}`,
      `40/tunnel,{"token":"${access('access')}"`,
      `40/tunnel,${JSON.stringify({ token: access('device'), pad: 'x'.repeat(500_000) })}`,
    ];
    const clients: Raw[] = [];
    for (const frame of waiting) {
      const raw = await open();
      clients.push(raw);
      raw.ws.send(frame);
    }
    await until(() => harness.turns.jobs.length === waiting.length, 'every impostor waiting');
    await turnsPass(5);
    expect(harness.connections).toEqual(['/tunnel']);
    expect(clients.every((c) => !c.closed)).toBe(true);
  });

  /**
   * First frames that are no CONNECT wait their turn too, and are then answered as they were
   * before turns: a pong or a noop is nothing (a CONNECT after it is not made to wait again),
   * an unknown type or an empty frame is a parse error, a client's ping and a binary frame
   * close the connection; nothing throws.
   */
  test('first frames that are no CONNECT: answered at their turn as without turns', async () => {
    const cases: Array<{ frame: string | Buffer; closes: boolean }> = [
      { frame: '3', closes: false },
      { frame: '6', closes: false },
      { frame: '41/tunnel,', closes: true },
      { frame: 'x', closes: true },
      { frame: '', closes: true },
      { frame: '2', closes: true },
      { frame: Buffer.from([1, 2, 3]), closes: true },
      { frame: '4garbage', closes: true },
    ];
    const thrown: unknown[] = [];
    const onError = (error: unknown): void => void thrown.push(error);
    process.on('uncaughtException', onError);
    try {
      const clients: Raw[] = [];
      for (const { frame } of cases) {
        const raw = await open();
        clients.push(raw);
        raw.ws.send(frame);
      }
      await until(() => harness.turns.jobs.length === cases.length, 'every first frame waiting');
      await turnsPass(5);
      expect(clients.map((c) => c.closed)).toEqual(cases.map(() => false));
      harness.turns.release();
      await until(() => clients.every((c, i) => c.closed === cases[i]?.closes), 'each answered');
      // Those left open are greeted: a CONNECT now goes at once, without another turn.
      for (const [i, c] of clients.entries()) if (cases[i]?.closes === false) c.ws.send(DEVICE_CONNECT);
      await until(() => harness.connections.length === 2, 'the two CONNECTs after a pong/noop');
      expect(harness.turns.jobs).toHaveLength(0);
      expect(thrown).toEqual([]);
    } finally {
      process.off('uncaughtException', onError);
    }
  });

  /**
   * A client gone while its first frame waits: nothing is read from it before its turn (its
   * close frame included); at its turn the close is read, the connection forgotten, and
   * whatever its CONNECT made is let go again.
   */
  test('a client that closes (with a close frame) while its first frame waits: nothing kept after its turn', async () => {
    const thrown: unknown[] = [];
    const onError = (error: unknown): void => void thrown.push(error);
    process.on('uncaughtException', onError);
    try {
      const [polite, rude] = [await open(), await open()];
      polite.ws.send(DEVICE_CONNECT);
      rude.ws.send(DEVICE_CONNECT);
      await until(() => harness.turns.jobs.length === 2, 'both first frames waiting');
      polite.ws.close();
      rude.ws.terminate();
      await turnsPass(5);
      harness.turns.release();
      await until(() => polite.connection.readyState === 'closed' && rude.connection.readyState === 'closed', 'the server heard both closes');
      await until(() => harness.reasons.length === harness.connections.length, 'every namespace socket made let go');
      await until(() => polite.closed, 'the closing handshake done');
      expect(harness.engine.clientsCount).toBe(0);
      expect(harness.turns.jobs).toHaveLength(0);
      expect(thrown).toEqual([]);
    } finally {
      process.off('uncaughtException', onError);
    }
  });

  /** The engine closed (the service stopping) while first frames wait: each closing handshake ends, not at a turn that may never come. */
  test('the engine closed with first frames waiting: every client hears the close before any turn', async () => {
    const clients: Raw[] = [];
    for (let i = 0; i < 20; i++) clients.push(await open());
    for (const c of clients) c.ws.send(DEVICE_CONNECT);
    await until(() => harness.turns.jobs.length === 20, 'every first frame waiting');
    harness.engine.close();
    await until(() => clients.every((c) => c.closed), 'every client closed');
    expect(harness.connections).toEqual([]);
    expect(harness.engine.clientsCount).toBe(0);
    // Their turns, when they come, do nothing.
    harness.turns.release();
    await turnsPass(5);
    expect(harness.connections).toEqual([]);
  });
});

describe('the service, behind a flood of junk first frames', () => {
  const serviceOf = serviceForDescribe('embedded');

  /**
   * Long polling is engine.io's own connection (no `WebSocketConnection`, no turns): an app and
   * a hub connecting that way while 300 WebSocket first frames wait still connect; a hub that
   * comes back over WebSocket in the same flood waits its turn and gets in; nothing waits after.
   */
  test('polling clients and a reconnecting hub get in during a flood; nothing left waiting', async () => {
    const service = serviceOf();
    const owner = await createUser(service);
    const [pollingHub, wsHub] = await Promise.all([registerHub(service, owner), registerHub(service, owner)]);
    const [pollingToken, wsToken] = await Promise.all([deviceToken(service, pollingHub, owner), deviceToken(service, wsHub, owner)]);
    const app = await connect(service, owner.accessToken);
    const first = await connect(service, wsToken);
    const junk: RawAt[] = [];
    const polled: ClientSocket[] = [];
    let again: Probe | undefined;
    try {
      expect(await request(app, 'tunnel:subscribe', { deviceUuid: wsHub.uuid })).toMatchObject({ success: true, tunnelConnected: true });
      first.close();
      await app.next<{ tunnelConnected: boolean }>('device:status', (s) => !s.tunnelConnected);
      const url = `${service.baseUrl.replace('http', 'ws')}/socket.io/?EIO=4&transport=websocket`;
      for (let i = 0; i < 300; i += 50) junk.push(...(await Promise.all(Array.from({ length: 50 }, () => openRawAt(url)))));
      for (const j of junk) j.ws.send('40/tunnel,{"token":"junk"}');
      const pollers = [owner.accessToken, pollingToken].map((token) =>
        ioClient(`${service.baseUrl}/tunnel`, { auth: { token }, transports: ['polling'], reconnection: false, forceNew: true }),
      );
      polled.push(...pollers);
      const again$ = connect(service, wsToken);
      holdEventLoop(200);
      await Promise.all(pollers.map((p) => new Promise<void>((resolve, reject) => (p.connected ? resolve() : (p.once('connect', () => resolve()), p.once('connect_error', reject))))));
      again = await again$;
      expect(pollers.map((p) => p.io.engine.transport.name)).toEqual(['polling', 'polling']);
      await app.next<{ tunnelConnected: boolean }>('device:status', (s) => s.tunnelConnected);
      await until(() => junk.every((j) => j.answers > 0 || j.closed), 'every junk CONNECT answered');
      expect(junk.filter((j) => j.answers > 0)).toHaveLength(300);
      expect((await scrape(service)).value('tunnel_device_handshake_admission', { measure: 'waiting' })).toBe(0);
    } finally {
      for (const j of junk) j.ws.terminate();
      for (const p of polled) p.close();
      again?.close();
      app.close();
    }
  }, 90_000);
});

interface RawAt {
  readonly ws: WebSocket;
  answers: number;
  closed: boolean;
}

async function openRawAt(url: string): Promise<RawAt> {
  const ws = new WebSocket(url, { perMessageDeflate: false });
  const raw: RawAt = { ws, answers: 0, closed: false };
  ws.on('error', () => undefined);
  ws.on('close', () => (raw.closed = true));
  await new Promise<void>((resolve, reject) => {
    ws.once('error', reject);
    ws.on('message', (data: Buffer) => {
      const text = data.toString();
      if (text.startsWith('0')) resolve();
      else if (text === '2') ws.send('3');
      else if (text.startsWith('40/tunnel,') || text.startsWith('44/tunnel,')) raw.answers++;
    });
  });
  return raw;
}
