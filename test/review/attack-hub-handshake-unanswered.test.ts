import { createServer, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { Server } from 'socket.io';
import { HubClient, type HubEvent } from '@home-hub-cloud/hub-client';
import { eventually } from '../support/client-timers';

/**
 * Outside attack on `connectTimeoutMs` (clients/hub/src/index.ts: "How long one tunnel
 * connection attempt may take, from the TCP connect to the handshake's answer"). A service
 * whose transport opens (the WebSocket is up, engine.io pings flow) but whose tunnel handshake
 * is never answered (a process stuck in the handshake's authentication, a queue that never
 * moves): the attempt should be given up after `connectTimeoutMs` and retried with backoff.
 * A socket.io server stands in for the service: its /tunnel middleware never calls next().
 */
let http: HttpServer;
let io: Server;
let baseUrl: string;
let handshakes = 0;

beforeAll(async () => {
  http = createServer((_req, res) => {
    // Heartbeats and renewals: accepted, nothing more.
    res.writeHead(200, { 'Content-Type': 'application/json' }).end('{}');
  });
  io = new Server(http, { transports: ['websocket'] });
  io.of('/tunnel').use(() => {
    handshakes++; // never answered
  });
  await new Promise<void>((done) => http.listen(0, '127.0.0.1', done));
  baseUrl = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise<void>((done) => io.close(() => done()));
});

test('a handshake never answered: the attempt is given up after connectTimeoutMs and tried again', async () => {
  const events: HubEvent[] = [];
  const hub = new HubClient({
    baseUrl,
    uuid: randomUUID(),
    tokens: { load: () => 'x.y.z', save: () => undefined },
    connectTimeoutMs: 1_500,
    reconnect: { baseMs: 100, capMs: 200 },
    heartbeatIntervalMs: 600_000,
  });
  hub.on((e) => events.push(e));
  try {
    await hub.start();
    await eventually(() => handshakes >= 1, 5_000, 'the handshake reached the service');
    // Well past connectTimeoutMs: the attempt has been given up and a new handshake made.
    await new Promise((r) => setTimeout(r, 6_000));
    expect({ retries: events.filter((e) => e.type === 'reconnecting').length > 0, handshakes: handshakes >= 2 }).toEqual({ retries: true, handshakes: true });
  } finally {
    hub.stop();
  }
}, 30_000);
