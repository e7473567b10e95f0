import { WebSocket } from 'ws';
import { createTurns } from '../../src/runtime/turns';
import { createUser, serviceForDescribe, startTestService, type TestService } from '../support/harness';
import { holdEventLoop, nextTurn, until } from '../support/event-loop';
import { scrape } from '../support/metrics';
import { connect, deviceToken, registerHub, request, type Probe } from '../support/tunnel';

/**
 * Review of device handshakes in turns of the event loop (src/runtime/turns.ts; in
 * src/tunnel/engine.ts a client's first frame waits its turn), attacked from outside: raw
 * engine.io/Socket.IO frames over WebSocket, so that a test decides exactly which frames the
 * service finds readable together.
 *
 * The service runs in this process: holding this process's event loop (`hold`) after sending
 * frames makes the service read all of them in one turn, as a storm would have it.
 */

/** A Socket.IO answer on /tunnel: connected, or refused with the connect_error's message and data. */
interface Answer {
  readonly connected: boolean;
  readonly message?: string;
  readonly data?: { readonly message?: string; readonly retryAfter?: number };
}

/** One raw WebSocket transport of engine.io v4: `answers` are the /tunnel CONNECT answers, in order. */
interface Transport {
  readonly ws: WebSocket;
  readonly answers: Answer[];
  /** When each answer came, as a sequence number shared by every transport of the test. */
  readonly answeredAt: number[];
  closed: boolean;
  connectFrame(token: unknown): string;
  sendConnect(token: unknown): void;
}

let sequence = 0;

async function openTransport(service: TestService, headers: Record<string, string> = {}): Promise<Transport> {
  const url = `${service.baseUrl.replace('http', 'ws')}/socket.io/?EIO=4&transport=websocket`;
  // No compression: a frame sent is written at once, not after zlib's turn.
  const ws = new WebSocket(url, { headers, perMessageDeflate: false });
  const transport: Transport = {
    ws,
    answers: [],
    answeredAt: [],
    closed: false,
    connectFrame: (token) => `40/tunnel,${JSON.stringify({ token })}`,
    sendConnect(token) {
      ws.send(this.connectFrame(token));
    },
  };
  ws.on('error', () => undefined);
  ws.on('close', () => (transport.closed = true));
  const opened = new Promise<void>((resolve, reject) => {
    ws.once('error', reject);
    ws.on('message', (raw: Buffer) => {
      const text = raw.toString();
      if (text.startsWith('0')) {
        resolve();
        return;
      }
      if (text === '2') {
        ws.send('3');
        return;
      }
      if (text.startsWith('40/tunnel,')) {
        transport.answers.push({ connected: true });
        transport.answeredAt.push(sequence++);
      } else if (text.startsWith('44/tunnel,')) {
        const error = JSON.parse(text.slice('44/tunnel,'.length)) as { message: string; data?: Answer['data'] };
        transport.answers.push({ connected: false, message: error.message, ...(error.data !== undefined ? { data: error.data } : {}) });
        transport.answeredAt.push(sequence++);
      }
    });
  });
  await opened;
  return transport;
}

async function openTransports(service: TestService, n: number, headers: Record<string, string> = {}): Promise<Transport[]> {
  const out: Transport[] = [];
  // A few at a time: the service's accept backlog is not what is tested.
  for (let i = 0; i < n; i += 50) out.push(...(await Promise.all(Array.from({ length: Math.min(50, n - i) }, () => openTransport(service, headers)))));
  return out;
}

const closeAll = (transports: readonly Transport[]): void => {
  for (const t of transports) t.ws.terminate();
};

/** An unsigned JWT-shaped token whose claims say `claims` (the signature is junk). */
const forged = (claims: Record<string, unknown>): string =>
  `${Buffer.from('{"alg":"HS256","typ":"JWT"}').toString('base64url')}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.c2lnbmF0dXJl`;

const waiting = async (service: TestService): Promise<number> => (await scrape(service)).value('tunnel_device_handshake_admission', { measure: 'waiting' });
const inFlight = async (service: TestService): Promise<number> => (await scrape(service)).value('tunnel_device_handshake_admission', { measure: 'in_flight' });

describe('one transport, many CONNECT frames', () => {
  const serviceOf = serviceForDescribe('embedded');

  /**
   * Socket.IO creates a socket and runs the middleware for every CONNECT of a namespace the
   * transport is not connected to yet, however many arrive before the first is answered. Were
   * each of them to wait in the queue (reading one costs next to nothing, its work put off), one
   * WebSocket could put thousands of handshakes ahead of every hub (a first version did: 19,850
   * waiting from 800 KB of frames). Only a transport's first frame waits its turn, with nothing
   * more read from it meanwhile: the frames behind it never queue.
   */
  test('a single WebSocket cannot queue thousands of device handshakes', async () => {
    const service = serviceOf();
    const N = 3000;
    const attacker = await openTransport(service);
    try {
      const frame = attacker.connectFrame('junk-token');
      for (let i = 0; i < N; i++) attacker.ws.send(frame);
      // Every frame is in the service's socket before it reads any: it reads them together.
      holdEventLoop(200);
      const sampled: number[] = [];
      // Sampled while the answers come in: a scrape is read between turns.
      while (attacker.answers.length < N && !attacker.closed) sampled.push(await waiting(service));
      await until(() => attacker.answers.length === N || attacker.closed, 'every CONNECT answered, or the transport closed');
      expect(attacker.answers.every((a) => !a.connected && (a.message === 'unauthorized' || a.message === 'rate_limited'))).toBe(true);
      // Never more than one of this transport's waiting.
      expect(Math.max(0, ...sampled)).toBeLessThanOrEqual(1);
      expect(await waiting(service)).toBe(0);
      expect(await inFlight(service)).toBe(0);
    } finally {
      attacker.ws.terminate();
    }
  }, 60_000);

  /**
   * While a transport's first frame waits its turn (others are ahead of it), the frames it sends
   * behind it are held, in order, a few at most: a client waits for its handshake's answer, and
   * one that sends on is closed rather than held without end.
   */
  test('a transport that sends on while its handshake waits its turn is closed, the others still answered', async () => {
    const service = serviceOf();
    const queued = await openTransports(service, 200);
    const attacker = await openTransport(service);
    try {
      for (const t of queued) t.sendConnect('junk-token');
      for (let i = 0; i < 100; i++) attacker.sendConnect('junk-token');
      holdEventLoop(200);
      await until(() => attacker.closed, 'the attacker closed');
      await until(() => queued.every((t) => t.answers.length === 1), 'every queued CONNECT answered');
      // Closed before its first CONNECT came to its turn: none of its hundred was worked out.
      expect(attacker.answers).toEqual([]);
      expect(await waiting(service)).toBe(0);
    } finally {
      attacker.ws.terminate();
      closeAll(queued);
    }
  }, 60_000);
});

describe('a junk flood on many transports', () => {
  const serviceOf = serviceForDescribe('embedded');

  /**
   * 400 transports send a junk device handshake each, and behind them (read after them, in the
   * same turn) an app with its access token, a hub with its device token, and tokens that pose
   * as access tokens without being ones. The app's handshake does not wait behind the junk; the
   * hub's waits its turn and gets in; the impostors are refused.
   */
  test("an app's handshake passes a queue of junk; a hub behind it still gets in; impostors are refused", async () => {
    const service = serviceOf();
    const owner = await createUser(service);
    const hub = await registerHub(service, owner);
    const hubToken = await deviceToken(service, hub, owner);
    const refresh = service.tokens.signRefresh({ sub: owner.id, fam: 'fam-1' }).token;
    const junk = await openTransports(service, 400);
    const [app, device, cased, refreshed, forgedAccess] = await openTransports(service, 5);
    const all = [...junk, app, device, cased, refreshed, forgedAccess] as Transport[];
    try {
      for (const t of junk) t.sendConnect('junk-token');
      app?.sendConnect(owner.accessToken);
      device?.sendConnect(hubToken);
      // `Access` is not `access`: a device handshake (queued), refused as any bad token.
      cased?.sendConnect(forged({ type: 'Access', sub: owner.id }));
      refreshed?.sendConnect(refresh);
      // Claims that say `access`, signed by nobody: not queued (by design), still refused.
      forgedAccess?.sendConnect(forged({ type: 'access', sub: owner.id, email: owner.email, role: 'admin' }));
      holdEventLoop(200);
      await until(() => all.every((t) => t.answers.length === 1 || t.closed), 'every handshake answered');
      expect(app?.answers).toEqual([{ connected: true }]);
      expect(device?.answers).toEqual([{ connected: true }]);
      for (const impostor of [cased, refreshed, forgedAccess]) expect(impostor?.answers).toEqual([expect.objectContaining({ connected: false, message: 'unauthorized' })]);
      const appAt = app?.answeredAt[0] ?? Infinity;
      const junkBeforeApp = junk.filter((t) => (t.answeredAt[0] ?? Infinity) < appAt).length;
      // Read last, answered after a turn's worth of junk at most, not after the 400.
      expect(junkBeforeApp).toBeLessThan(200);
      // The hub waited its turn (first in, first out): behind the app.
      expect(device?.answeredAt[0]).toBeGreaterThan(appAt);
      expect(await waiting(service)).toBe(0);
    } finally {
      closeAll(all);
    }
  }, 60_000);
});

describe('the per-IP limit of failed handshakes, through the queue', () => {
  const serviceOf = serviceForDescribe('embedded', { RATE_LIMITS: 'general=5/60', TRUST_PROXY: 'true' });

  test('60 junk handshakes from one address at once: 5 checked, the rest rate_limited; that address is refused a good token; another gets in', async () => {
    const service = serviceOf();
    const owner = await createUser(service);
    const hubs = await Promise.all([registerHub(service, owner), registerHub(service, owner)]);
    const tokens = await Promise.all(hubs.map((hub) => deviceToken(service, hub, owner)));
    const junk = await openTransports(service, 60, { 'X-Forwarded-For': '203.0.113.7' });
    const [sameAddress] = await openTransports(service, 1, { 'X-Forwarded-For': '203.0.113.7' });
    const [otherAddress] = await openTransports(service, 1, { 'X-Forwarded-For': '198.51.100.9' });
    const all = [...junk, sameAddress, otherAddress] as Transport[];
    try {
      for (const t of junk) t.sendConnect('junk-token');
      sameAddress?.sendConnect(tokens[0]);
      otherAddress?.sendConnect(tokens[1]);
      holdEventLoop(200);
      await until(() => all.every((t) => t.answers.length === 1 || t.closed), 'every handshake answered');
      const answers = junk.map((t) => t.answers[0]);
      expect(answers.filter((a) => a?.message === 'unauthorized')).toHaveLength(5);
      const limited = answers.filter((a) => a?.message === 'rate_limited');
      expect(limited).toHaveLength(55);
      for (const a of limited) expect(a?.data?.retryAfter).toBeGreaterThanOrEqual(1);
      expect(sameAddress?.answers).toEqual([expect.objectContaining({ connected: false, message: 'rate_limited' })]);
      expect(otherAddress?.answers).toEqual([{ connected: true }]);
      expect(await inFlight(service)).toBe(0);
    } finally {
      closeAll(all);
    }
  }, 60_000);
});

describe('a hub that leaves while its handshake waits', () => {
  const serviceOf = serviceForDescribe('embedded');

  test('nothing is kept: no claim, nothing waiting or in flight, the hub connects later', async () => {
    const service = serviceOf();
    const owner = await createUser(service);
    const hub = await registerHub(service, owner);
    const hubToken = await deviceToken(service, hub, owner);
    const app: Probe = await connect(service, owner.accessToken);
    expect(await request(app, 'tunnel:subscribe', { deviceUuid: hub.uuid })).toMatchObject({ success: true, tunnelConnected: false });
    const junk = await openTransports(service, 300);
    const [leaving] = await openTransports(service, 1);
    let device: Probe | undefined;
    try {
      for (const t of junk) t.sendConnect('junk-token');
      leaving?.sendConnect(hubToken);
      // Gone before the service reads anything: its CONNECT is read behind 300, then its close.
      leaving?.ws.terminate();
      holdEventLoop(200);
      await until(() => junk.every((t) => t.answers.length === 1 || t.closed), 'every junk handshake answered');
      await until(() => leaving?.closed === true, 'the leaving hub closed');
      expect(leaving?.answers).toEqual([]);
      expect(await waiting(service)).toBe(0);
      expect(await inFlight(service)).toBe(0);
      // No claim: the app hears of no tunnel, and asking again says so.
      expect(app.all<{ tunnelConnected: boolean }>('device:status').filter((s) => s.tunnelConnected)).toEqual([]);
      expect(await request(app, 'tunnel:subscribe', { deviceUuid: hub.uuid })).toMatchObject({ success: true, tunnelConnected: false });
      device = await connect(service, hubToken);
      await app.next<{ tunnelConnected: boolean }>('device:status', (s) => s.tunnelConnected);
      expect(device.all('tunnel:error')).toEqual([]);
    } finally {
      closeAll(junk);
      leaving?.ws.terminate();
      device?.close();
      app.close();
    }
  }, 60_000);
});

describe('the service stopped with handshakes waiting', () => {
  test('stop() finishes, every waiting client is answered or closed, nothing thrown', async () => {
    const service = await startTestService('embedded');
    const thrown: unknown[] = [];
    const onError = (error: unknown): void => void thrown.push(error);
    process.on('unhandledRejection', onError);
    process.on('uncaughtException', onError);
    let transports: Transport[] = [];
    try {
      const owner = await createUser(service);
      const hub = await registerHub(service, owner);
      const hubToken = await deviceToken(service, hub, owner);
      transports = await openTransports(service, 1500);
      for (const [i, t] of transports.entries()) t.sendConnect(i % 100 === 99 ? hubToken : forged({ type: 'device', deviceUuid: hub.uuid, gen: 1 }));
      holdEventLoop(300);
      const queued = await waiting(service);
      // The stop comes while hundreds still wait.
      expect(queued).toBeGreaterThan(100);
      await service.stop();
      await until(() => transports.every((t) => t.answers.length > 0 || t.closed), 'every client answered or closed');
      for (let i = 0; i < 20; i++) await nextTurn();
      expect(thrown).toEqual([]);
    } finally {
      process.off('unhandledRejection', onError);
      process.off('uncaughtException', onError);
      closeAll(transports);
    }
  }, 90_000);
});

describe('createTurns, attacked directly', () => {
  test('a job that throws in a later turn: the others still run, each once, in order', async () => {
    const real = setImmediate;
    const errors: unknown[] = [];
    // A turn's exception caught where Node would have made it an uncaught one.
    const spy = jest.spyOn(global, 'setImmediate').mockImplementation(((callback: (...args: unknown[]) => void, ...args: unknown[]) =>
      real(() => {
        try {
          callback(...args);
        } catch (error) {
          errors.push(error);
        }
      })) as unknown as typeof setImmediate);
    try {
      const turns = createTurns({ initialPerTurn: 4, minPerTurn: 4, maxPerTurn: 4, targetTurnMs: 60_000 });
      const ran: number[] = [];
      for (let i = 0; i < 20; i++)
        turns.run(() => {
          if (i === 5 || i === 19) throw new Error(`job ${i}`);
          ran.push(i);
        });
      for (let i = 0; i < 50 && turns.stats().waiting > 0; i++) await new Promise((resolve) => real(resolve));
      expect(errors.map((e) => (e as Error).message)).toEqual(['job 5', 'job 19']);
      expect(ran).toEqual([...Array(20).keys()].filter((i) => i !== 5 && i !== 19));
      expect(turns.stats().waiting).toBe(0);
      // Nothing waits, so the next runs at once.
      let now = false;
      await new Promise((resolve) => real(resolve));
      turns.run(() => (now = true));
      expect(now).toBe(true);
    } finally {
      spy.mockRestore();
    }
  });

  test('a clock that jumps a day ahead: one turn measured long, overdue jobs at most as many again; a clock that jumps back counts nothing overdue', async () => {
    let clock = 0;
    const turns = createTurns({ initialPerTurn: 4, minPerTurn: 2, maxPerTurn: 4, targetTurnMs: 50, maxWaitMs: 1000, now: () => clock });
    const ran: number[] = [];
    const perTurn: number[] = [];
    for (let i = 0; i < 200; i++) turns.run(() => ran.push(i));
    await nextTurn();
    clock += 86_400_000;
    let before = ran.length;
    while (turns.stats().waiting > 0 && ran.length < 100) {
      await nextTurn();
      perTurn.push(ran.length - before);
      before = ran.length;
    }
    // The long turn takes the count down by a quarter (4 → 3), then back up; never more than twice the count.
    expect(perTurn[0]).toBe(3 + 3);
    expect(Math.max(...perTurn)).toBeLessThanOrEqual(8);
    // Back a day and more: nothing is overdue, the count is not taken down.
    clock -= 2 * 86_400_000;
    const overdue = turns.stats().overdue;
    const count = turns.stats().perTurn;
    while (turns.stats().waiting > 0) {
      await nextTurn();
      expect(ran.length - before).toBeLessThanOrEqual(4);
      before = ran.length;
    }
    expect(turns.stats().overdue).toBe(overdue);
    expect(turns.stats().perTurn).toBeGreaterThanOrEqual(count);
    expect(ran).toEqual([...Array(200).keys()]);
  });

  test('a count that cannot collapse to none: every job runs, whatever the bounds', async () => {
    for (const options of [{ maxPerTurn: 0 }, { minPerTurn: 0, maxPerTurn: 0, initialPerTurn: 0 }, { minPerTurn: 0, targetTurnMs: -1 }]) {
      const turns = createTurns(options);
      let ran = 0;
      for (let i = 0; i < 50; i++) turns.run(() => ran++);
      for (let i = 0; i < 200 && ran < 50; i++) await nextTurn();
      expect({ options, ran }).toEqual({ options, ran: 50 });
      expect(turns.stats().perTurn).toBeGreaterThanOrEqual(1);
    }
  });
});
