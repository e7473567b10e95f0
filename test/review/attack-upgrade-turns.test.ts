import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { createTurns, type Turns } from '../../src/runtime/turns';
import { TunnelWebSocketServer } from '../../src/tunnel/websocket';
import { startEngineServer, stopEngineServer, type EngineServer } from '../support/engine-harness';
import { WebSocket } from 'ws';
import { holdEventLoop, nextTurn, until } from '../support/event-loop';
import { createUser, serviceForDescribe } from '../support/harness';
import { answerHead, openSocket, statusOf, UPGRADE_REQUEST } from '../support/raw-http';
import { manualTurns, type ManualTurns } from '../support/manual-turns';

/**
 * Review of WebSocket upgrades taken in turns (src/tunnel/engine.ts
 * `TunnelEngine.handleUpgrade`, `upgradeTurns`), attacked from outside with raw TCP clients.
 * The engine is given turns that run a job only when the test releases them, so what happens
 * while an upgrade waits is decided by the test, not by how busy the machine is.
 */

interface Harness extends EngineServer {
  readonly port: number;
  /** The server's side of every upgrade, in the order the HTTP server handed them over. */
  readonly upgraded: Socket[];
}

async function startHarness(turns: Turns | undefined): Promise<Harness> {
  const server = await startEngineServer({
    path: '/socket.io',
    perMessageDeflate: false,
    wsEngine: TunnelWebSocketServer,
    maxHttpBufferSize: 1_000_000,
    pingInterval: 25_000,
    pingTimeout: 20_000,
    connectTimeout: 45_000,
  });
  server.engine.upgradeTurns = turns;
  const upgraded: Socket[] = [];
  server.http.on('upgrade', (_req: IncomingMessage, socket: Socket) => void upgraded.push(socket));
  return { ...server, port: Number(new URL(server.url).port), upgraded };
}

const connectionCount = (harness: Harness): Promise<number> =>
  new Promise((resolve, reject) => harness.http.getConnections((error, count) => (error ? reject(error) : resolve(count))));

/** Every byte received on `socket` so far (latin1), and whether it closed. */
function record(socket: Socket): { text: () => string; closed: () => boolean } {
  let text = '';
  let closed = false;
  socket.on('data', (chunk: Buffer) => void (text += chunk.toString('latin1')));
  socket.on('close', () => void (closed = true));
  return { text: () => text, closed: () => closed };
}

/** A client-to-server WebSocket text frame (masked, as a client must). */
function maskedTextFrame(text: string): Buffer {
  const payload = Buffer.from(text);
  const mask = Buffer.from([1, 2, 3, 4]);
  const masked = Buffer.from(payload.map((byte, i) => byte ^ (mask[i % 4] as number)));
  return Buffer.concat([Buffer.from([0x81, 0x80 | payload.length]), mask, masked]);
}

const upgradeRequest = (overrides: { method?: string; path?: string; version?: string | null; key?: string | null } = {}): string =>
  `${overrides.method ?? 'GET'} ${overrides.path ?? '/socket.io/?EIO=4&transport=websocket'} HTTP/1.1\r\nHost: localhost\r\n` +
  'Connection: Upgrade\r\nUpgrade: websocket\r\n' +
  (overrides.version === null ? '' : `Sec-WebSocket-Version: ${overrides.version ?? '13'}\r\n`) +
  (overrides.key === null ? '' : `Sec-WebSocket-Key: ${overrides.key ?? 'dGhlIHNhbXBsZSBub25jZQ=='}\r\n`) +
  '\r\n';

const BAD_UPGRADES: Record<string, string> = {
  'no Sec-WebSocket-Key': upgradeRequest({ key: null }),
  'wrong Sec-WebSocket-Version': upgradeRequest({ version: '7' }),
  'no Sec-WebSocket-Version': upgradeRequest({ version: null }),
  POST: upgradeRequest({ method: 'POST' }),
  'EIO=3': upgradeRequest({ path: '/socket.io/?EIO=3&transport=websocket' }),
  'unknown transport': upgradeRequest({ path: '/socket.io/?EIO=4&transport=carrier-pigeon' }),
  'sid of an unknown connection': upgradeRequest({ path: '/socket.io/?EIO=4&transport=websocket&sid=AAAAAAAAAAAAAAAAAAAA' }),
  'no EIO': upgradeRequest({ path: '/socket.io/?transport=websocket' }),
};

describe('upgrades waiting in turns the test releases', () => {
  let harness: Harness;
  let turns: ManualTurns;
  const sockets: Socket[] = [];
  beforeEach(async () => {
    turns = manualTurns();
    harness = await startHarness(turns);
  });
  afterEach(async () => {
    for (const socket of sockets.splice(0)) socket.destroy();
    turns.release();
    await stopEngineServer(harness);
  });

  test('an upgrade waits for its turn: nothing is answered before it, a 101 and the open packet at it', async () => {
    const socket = await openSocket(harness.port, sockets);
    const seen = record(socket);
    socket.write(UPGRADE_REQUEST);
    await until(() => turns.jobs.length === 1, 'the upgrade queued');
    for (let i = 0; i < 5; i++) await nextTurn();
    expect(seen.text()).toBe('');
    expect(harness.engine.clientsCount).toBe(0);
    turns.release();
    await until(() => seen.text().includes('0{"sid"'), 'the open packet');
    expect(seen.text().startsWith('HTTP/1.1 101')).toBe(true);
    expect(harness.engine.clientsCount).toBe(1);
  });

  test('a client that resets before its turn: its socket destroyed, the turn lets it go, nothing kept, no crash', async () => {
    const socket = await openSocket(harness.port, sockets);
    socket.write(UPGRADE_REQUEST);
    await until(() => turns.jobs.length === 1 && harness.upgraded.length === 1, 'the upgrade queued');
    const serverSide = harness.upgraded[0] as Socket;
    socket.resetAndDestroy();
    await until(() => serverSide.destroyed, 'the reset heard');
    turns.release();
    for (let i = 0; i < 5; i++) await nextTurn();
    expect(harness.engine.clientsCount).toBe(0);
    expect(serverSide.listenerCount('error')).toBe(0);
    await until(() => harness.upgraded.length === 1, 'no more upgrades');
    expect(await connectionCount(harness)).toBe(0);
  });

  test('a client that closes (FIN) before its turn: answered or not, its connection ends and nothing is kept', async () => {
    const socket = await openSocket(harness.port, sockets);
    socket.end(UPGRADE_REQUEST);
    await until(() => turns.jobs.length === 1 && harness.upgraded.length === 1, 'the upgrade queued');
    const serverSide = harness.upgraded[0] as Socket;
    turns.release();
    await until(() => serverSide.destroyed, 'the server side closed');
    await until(() => harness.engine.clientsCount === 0, 'no connection kept');
    expect(await connectionCount(harness)).toBe(0);
  });

  test('hundreds of upgrades reset while queued: none crashes, none becomes a connection', async () => {
    const clients = await Promise.all(Array.from({ length: 300 }, () => openSocket(harness.port, sockets)));
    for (const client of clients) client.write(UPGRADE_REQUEST);
    await until(() => turns.jobs.length === 300 && harness.upgraded.length === 300, 'every upgrade queued');
    for (const client of clients) client.resetAndDestroy();
    await until(() => harness.upgraded.every((s) => s.destroyed), 'every reset heard');
    turns.release();
    for (let i = 0; i < 5; i++) await nextTurn();
    expect(harness.engine.clientsCount).toBe(0);
    expect(await connectionCount(harness)).toBe(0);
  });

  test('bad upgrades queued are answered at their turn as without turns, and closed', async () => {
    const plain = await startHarness(undefined);
    const transcript = async (port: number, request: string, queued: boolean): Promise<string> => {
      const socket = await openSocket(port, sockets);
      const seen = record(socket);
      socket.write(request);
      if (queued) {
        await until(() => turns.jobs.length === 1, 'the upgrade queued');
        turns.release();
      }
      await until(seen.closed, 'the bad upgrade closed');
      // Dates and ids differ from one answer to the next.
      return seen.text().replace(/^Date: .*$/gm, 'Date: -').replace(/"sid":"[^"]+"/g, '"sid":"-"');
    };
    try {
      const statuses: string[] = [];
      for (const [what, request] of Object.entries(BAD_UPGRADES)) {
        const before = await transcript(plain.port, request, false);
        const after = await transcript(harness.port, request, true);
        expect({ what, after }).toEqual({ what, after: before });
        statuses.push(statusOf(before));
      }
      expect(statuses).toContain('400');
      await until(() => harness.engine.clientsCount === 0, 'no connection kept');
    } finally {
      await stopEngineServer(plain);
    }
  });

  test('a frame sent in the same packet as the upgrade (head) is read at the turn and answered', async () => {
    const socket = await openSocket(harness.port, sockets);
    const seen = record(socket);
    socket.write(Buffer.concat([Buffer.from(UPGRADE_REQUEST), maskedTextFrame('40')]));
    await until(() => turns.jobs.length === 1, 'the upgrade queued');
    turns.release();
    await until(() => /40\{"sid":"[^"]+"\}/.test(seen.text()), 'the CONNECT answered');
    expect(seen.text().indexOf('0{"sid"')).toBeLessThan(seen.text().indexOf('40{"sid"'));
  });

  test('a frame sent after the upgrade while it waits is kept and read at the turn', async () => {
    const socket = await openSocket(harness.port, sockets);
    const seen = record(socket);
    socket.write(UPGRADE_REQUEST);
    await until(() => turns.jobs.length === 1, 'the upgrade queued');
    socket.write(maskedTextFrame('40'));
    for (let i = 0; i < 5; i++) await nextTurn();
    turns.release();
    await until(() => /40\{"sid":"[^"]+"\}/.test(seen.text()), 'the CONNECT answered');
  });

  test('long polling and plain HTTP are answered while upgrades wait', async () => {
    const waiting = await Promise.all(Array.from({ length: 50 }, () => openSocket(harness.port, sockets)));
    for (const socket of waiting) socket.write(UPGRADE_REQUEST);
    await until(() => turns.jobs.length === 50, 'the upgrades queued');
    const polling = await answerHead(await openSocket(harness.port, sockets), 'GET /socket.io/?EIO=4&transport=polling HTTP/1.1\r\nHost: localhost\r\n\r\n');
    expect(statusOf(polling)).toBe('200');
    expect(polling).toContain('0{"sid"');
    expect(turns.jobs.length).toBe(50);
  });

  test('the engine closed while upgrades wait: at their turn they are refused, no connection is made, the server closes', async () => {
    const waiting = await Promise.all(Array.from({ length: 5 }, () => openSocket(harness.port, sockets)));
    const seen = waiting.map(record);
    for (const socket of waiting) socket.write(UPGRADE_REQUEST);
    await until(() => turns.jobs.length === 5, 'the upgrades queued');
    harness.engine.close();
    expect(() => turns.release()).not.toThrow();
    await until(() => seen.every((s) => s.closed()), 'every upgrade closed');
    for (const s of seen) expect(s.text()).not.toContain('101');
    expect(harness.engine.clientsCount).toBe(0);
  });
});

describe('upgrades without turns', () => {
  test('are taken at once', async () => {
    const harness = await startHarness(undefined);
    const sockets: Socket[] = [];
    try {
      const answer = await answerHead(await openSocket(harness.port, sockets), UPGRADE_REQUEST);
      expect(statusOf(answer)).toBe('101');
      expect(harness.engine.clientsCount).toBe(1);
    } finally {
      for (const socket of sockets) socket.destroy();
      await stopEngineServer(harness);
    }
  });
});

describe('a flood of upgrades in real turns', () => {
  test('a thousand upgrades with nothing after them: all answered, polling answered among them, nothing kept once they go', async () => {
    const harness = await startHarness(createTurns({ maxWaitMs: 5_000 }));
    const sockets: Socket[] = [];
    try {
      const clients = await Promise.all(Array.from({ length: 1000 }, () => openSocket(harness.port, sockets)));
      const seen = clients.map(record);
      for (const client of clients) client.write(UPGRADE_REQUEST);
      const polling = await answerHead(await openSocket(harness.port, sockets), 'GET /socket.io/?EIO=4&transport=polling HTTP/1.1\r\nHost: localhost\r\n\r\n');
      expect(statusOf(polling)).toBe('200');
      await until(() => seen.every((s) => s.text().includes('0{"sid"')), 'every upgrade answered', 60_000);
      expect(harness.engine.clientsCount).toBe(1001);
      for (const client of clients) client.destroy();
      await until(() => harness.engine.clientsCount === 1, 'the upgrades gone', 60_000);
    } finally {
      for (const socket of sockets) socket.destroy();
      await stopEngineServer(harness);
    }
  }, 120_000);
});

/**
 * An app's WebSocket, opened while hubs' first frames wait their turn: an app's handshake goes
 * at once (`handshakeTurns.atOnce`), so its upgrade must not wait behind the hubs' handshakes
 * either, or the app waits for all of them (as it did not before upgrades took turns).
 */
describe('the service, an app connecting behind a flood of hub handshakes', () => {
  const serviceOf = serviceForDescribe('embedded');

  test("an app's upgrade and handshake are answered before the hubs' handshakes queued ahead of it", async () => {
    const service = serviceOf();
    const owner = await createUser(service);
    const url = `${service.baseUrl.replace('http', 'ws')}/socket.io/?EIO=4&transport=websocket`;
    const hubs: Array<{ ws: WebSocket; answered: boolean }> = [];
    let app: WebSocket | undefined;
    try {
      for (let i = 0; i < 1000; i += 50) {
        hubs.push(
          ...(await Promise.all(
            Array.from({ length: 50 }, () => {
              const hub = { ws: new WebSocket(url, { perMessageDeflate: false }), answered: false };
              hub.ws.on('error', () => undefined);
              hub.ws.on('close', () => void (hub.answered = true));
              return new Promise<typeof hub>((resolve) =>
                hub.ws.on('message', (data: Buffer) => {
                  const text = data.toString();
                  if (text.startsWith('0')) resolve(hub);
                  else if (text === '2') hub.ws.send('3');
                  else if (text.startsWith('4')) hub.answered = true;
                }),
              );
            }),
          )),
        );
      }
      let answeredWhenAppIn = -1;
      const appIn = new Promise<string>((resolve, reject) => {
        app = new WebSocket(url, { perMessageDeflate: false });
        app.on('error', reject);
        app.on('message', (data: Buffer) => {
          const text = data.toString();
          if (text.startsWith('0')) app?.send(`40/tunnel,${JSON.stringify({ token: owner.accessToken })}`);
          else if (text.startsWith('40/tunnel,') || text.startsWith('44/tunnel,')) {
            answeredWhenAppIn = hubs.filter((h) => h.answered).length;
            resolve(text);
          }
        });
      });
      for (const hub of hubs) hub.ws.send('40/tunnel,{"token":"junk"}');
      holdEventLoop(200);
      expect(await appIn).toMatch(/^40\/tunnel,\{"sid":/);
      await until(() => hubs.every((h) => h.answered), 'every hub handshake answered', 60_000);
      // Behind all of them, the app would have been answered after (nearly) every hub.
      expect(answeredWhenAppIn).toBeLessThan(hubs.length / 2);
    } finally {
      for (const hub of hubs) hub.ws.terminate();
      app?.terminate();
    }
  }, 120_000);
});
