import { randomUUID } from 'node:crypto';
import { Server as HttpServer } from 'node:http';
import { connect as tcpConnect, type Socket as NetSocket } from 'node:net';
import { io } from 'socket.io-client';
import { createUser, startTestService, type TestService } from '../support/harness';
import { scrape } from '../support/metrics';
import { eventually } from '../support/service-probes';
import { connect, deviceToken, refusal, registerHub, request, type Probe } from '../support/tunnel';

/**
 * engine.io's stand-in upgrade response is let go, and its `close` listener on the TCP
 * connection taken off by its source text (src/tunnel/websocket.ts `releaseUpgradeResponse`).
 * Against the real service: nothing else is taken off the connection, and every way a socket
 * can come and go (WebSocket, polling, polling upgraded to WebSocket, refused, dropped without
 * a close frame, dropped in the middle of its handshake) still ends with no tunnel socket held.
 */

jest.setTimeout(60_000);

let service: TestService;
/** Per upgrade request the service saw: its TCP connection and the `close` listeners it had once engine.io had its own on it. */
type Listener = (...args: unknown[]) => void;
const upgrades: Array<{ connection: NetSocket; atUpgrade: Listener[] }> = [];
const originalEmit = HttpServer.prototype.emit as (this: HttpServer, event: string | symbol, ...args: unknown[]) => boolean;

beforeAll(async () => {
  // engine.io's `upgrade` handler builds the stand-in synchronously: right after it, the
  // connection's close listeners are the ones it had plus the stand-in's.
  HttpServer.prototype.emit = function (this: HttpServer, event: string | symbol, ...args: unknown[]): boolean {
    const handled = originalEmit.call(this, event, ...args);
    if (event === 'upgrade') {
      const connection = args[1] as NetSocket;
      upgrades.push({ connection, atUpgrade: connection.listeners('close') as Listener[] });
    }
    return handled;
  } as typeof HttpServer.prototype.emit;
  service = await startTestService('embedded');
});

afterAll(async () => {
  HttpServer.prototype.emit = originalEmit as typeof HttpServer.prototype.emit;
  await service.stop();
});

const standIn = (listener: Listener): boolean => String(listener).replace(/\s+/g, '') === '()=>this.emit("close")';

async function socketsOpen(): Promise<number> {
  return (await scrape(service)).value('tunnel_sockets');
}

async function noSocketsLeft(): Promise<void> {
  // Well inside engine.io's ping timeout (25 s + 20 s): only a heard close gets there this fast.
  await eventually(socketsOpen, (n) => n === 0, 'every tunnel socket released', 3000);
}

/** Ends the client's TCP connection with no close frame, as a hub that loses power would. */
function dropWebSocket(p: Probe): void {
  const transport = (p.socket.io.engine as unknown as { transport: { name: string; ws?: { _socket?: NetSocket } } }).transport;
  expect(transport.name).toBe('websocket');
  const raw = transport.ws?._socket;
  expect(raw).toBeDefined();
  raw?.destroy();
}

test('only the stand-in listener is taken off an upgraded connection; every other close listener it had stays', async () => {
  const owner = await createUser(service);
  const hub = await registerHub(service, owner);
  const token = await deviceToken(service, hub, owner);
  const seen = upgrades.length;
  const device = await connect(service, token);
  const app = await connect(service, owner.accessToken);
  expect(upgrades.length - seen).toBe(2);
  for (const { connection, atUpgrade } of upgrades.slice(seen)) {
    expect(atUpgrade.filter(standIn)).toHaveLength(1);
    const now = connection.listeners('close') as Listener[];
    expect(now.filter(standIn)).toHaveLength(0);
    for (const listener of atUpgrade) if (!standIn(listener)) expect(now).toContain(listener);
  }
  expect(await request(app, 'tunnel:subscribe', { deviceUuid: hub.uuid })).toMatchObject({ success: true, tunnelConnected: true });
  dropWebSocket(device);
  dropWebSocket(app);
  await noSocketsLeft();
});

test('many hubs and apps dropped without a close frame: every socket released, the hub reported gone', async () => {
  const owner = await createUser(service);
  const hub = await registerHub(service, owner);
  const token = await deviceToken(service, hub, owner);
  const watcher = await connect(service, owner.accessToken);
  for (let round = 0; round < 20; round++) {
    const device = await connect(service, token);
    const app = await connect(service, owner.accessToken);
    dropWebSocket(device);
    dropWebSocket(app);
  }
  await eventually(socketsOpen, (n) => n === 1, 'only the watcher left', 3000);
  // The hub's last connection is over: a new subscription finds it off the tunnel.
  expect(await request(watcher, 'tunnel:subscribe', { deviceUuid: hub.uuid })).toMatchObject({ success: true, tunnelConnected: false });
  watcher.close();
  await noSocketsLeft();
});

test('polling only, and polling upgraded to WebSocket: connected, counted and released', async () => {
  const owner = await createUser(service);
  const hub = await registerHub(service, owner);
  const hubToken = await deviceToken(service, hub, owner);
  for (const transports of [['polling'], ['polling', 'websocket']]) {
    const sockets = [];
    // One hub (a hub has one connection at a time) and four apps.
    for (let i = 0; i < 5; i++) {
      const token = i === 0 ? hubToken : owner.accessToken;
      const socket = io(`${service.baseUrl}/tunnel`, { auth: { token }, transports, reconnection: false, forceNew: true, timeout: 5000 });
      await new Promise<void>((resolve, reject) => {
        socket.once('connect', () => resolve());
        socket.once('connect_error', reject);
      });
      sockets.push(socket);
    }
    if (transports.length === 2) {
      // Every one of them upgraded: a WebSocket request on a fresh TCP connection, through the middleware.
      for (const socket of sockets) await eventually(async () => socket.io.engine.transport.name, (name) => name === 'websocket', 'upgraded', 5000);
      expect(await socketsOpen()).toBe(5);
      const last = sockets.at(-1);
      const raw = (last?.io.engine as unknown as { transport: { ws?: { _socket?: NetSocket } } }).transport.ws?._socket;
      raw?.destroy();
    }
    else expect(await socketsOpen()).toBe(5);
    // The dropped one is heard at once; the others leave cleanly.
    if (transports.length === 2) await eventually(socketsOpen, (n) => n === 4, 'the dropped app released', 3000);
    for (const socket of sockets) socket.disconnect();
    await noSocketsLeft();
  }
});

test('refused handshakes (bad token, main namespace) and clients gone mid-handshake leave nothing behind', async () => {
  const fdsBefore = (await scrape(service)).value('process_open_fds');
  for (let i = 0; i < 20; i++) {
    expect((await refusal(service, { token: 'not.a.token' })).message).toBe('unauthorized');
    expect((await refusal(service, { token: 'x' }, '/')).message).toBe('unauthorized');
  }
  const port = new URL(service.baseUrl).port;
  const upgrade = [
    `GET /socket.io/?EIO=4&transport=websocket HTTP/1.1`,
    `Host: 127.0.0.1:${port}`,
    'Connection: Upgrade',
    'Upgrade: websocket',
    'Sec-WebSocket-Version: 13',
    `Sec-WebSocket-Key: ${Buffer.from(randomUUID().slice(0, 16)).toString('base64')}`,
    '',
    '',
  ].join('\r\n');
  for (let i = 0; i < 40; i++) {
    // Half of the requests cut off inside their headers, half right after them.
    const text = i % 2 === 0 ? upgrade.slice(0, 60) : upgrade;
    await new Promise<void>((resolve) => {
      const raw = tcpConnect(Number(port), '127.0.0.1', () => {
        raw.write(text, () => {
          raw.destroy();
          resolve();
        });
      });
      raw.on('error', () => resolve());
    });
  }
  await noSocketsLeft();
  // Every connection the server accepted was closed again (a few descriptors of slack for the store's own).
  await eventually(async () => (await scrape(service)).value('process_open_fds'), (fds) => fds <= fdsBefore + 3, 'descriptors back', 5000);
  // And the service still takes a hub.
  const owner = await createUser(service);
  const hub = await registerHub(service, owner);
  const device = await connect(service, await deviceToken(service, hub, owner));
  expect(await socketsOpen()).toBe(1);
  device.close();
  await noSocketsLeft();
});
