import { createServer, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { Server, type Socket } from 'socket.io';
import { HubClient, type HubEvent } from '@home-hub-cloud/hub-client';
import { eventually } from '../support/client-timers';
import { runUntilExit } from '../support/stopped-child';

/**
 * Outside attack (round 2) on the hub client's attempt timer (clients/hub/src/index.ts
 * `connectAttempt`, docs/hub-protocol.md "Give one connection attempt 30 s, from the TCP
 * connect until `connect` or `connect_error`"): a handshake answered just before the timer; a
 * `connect_error` `rate_limited` with `retryAfter` answered late (before and after the timer);
 * `unauthorized`, a renewal slower than the attempt timer, then the reconnect; `stop()` at the
 * very moment the timer fires (the process must exit by itself).
 *
 * A socket.io server stands in for the service; each handshake on /tunnel is given to the
 * behaviour the test set. HTTP: heartbeats 200, renewals answered by `renewal` below.
 */
type Next = (err?: Error) => void;
let http: HttpServer;
let io: Server;
let baseUrl: string;
let behaviour: (n: number, socket: Socket, next: Next) => void = () => undefined;
let handshakeTimes: number[] = [];
let renewal: () => Promise<{ status: number; body: unknown }> = async () => ({ status: 500, body: {} });
const pending: NodeJS.Timeout[] = [];
const later = (ms: number, fire: () => void): void => void pending.push(setTimeout(fire, ms));

function fakeToken(lifetimeS = 3_600): string {
  const part = (o: object): string => Buffer.from(JSON.stringify(o)).toString('base64url');
  const iat = Math.floor(Date.now() / 1000);
  return `${part({ alg: 'HS256', typ: 'JWT' })}.${part({ iat, exp: iat + lifetimeS, type: 'device' })}.c2ln`;
}

function refusal(message: string, data?: object): Error {
  const error = new Error(message) as Error & { data?: object };
  if (data !== undefined) error.data = data;
  return error;
}

beforeAll(async () => {
  http = createServer((req, res) => {
    if (req.method === 'POST' && /\/renew$/.test(req.url ?? '')) {
      void renewal().then(({ status, body }) => res.writeHead(status, { 'Content-Type': 'application/json' }).end(JSON.stringify(body)));
      return;
    }
    res.writeHead(200, { 'Content-Type': 'application/json' }).end('{}');
  });
  io = new Server(http, { transports: ['websocket'] });
  io.of('/tunnel').use((socket, next) => {
    handshakeTimes.push(Date.now());
    behaviour(handshakeTimes.length, socket, next);
  });
  await new Promise<void>((done) => http.listen(0, '127.0.0.1', done));
  baseUrl = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
});
const hubs: HubClient[] = [];
afterEach(() => {
  for (const hub of hubs.splice(0)) hub.stop();
  for (const t of pending.splice(0)) clearTimeout(t);
  handshakeTimes = [];
  behaviour = () => undefined;
});
afterAll(async () => {
  await new Promise<void>((done) => io.close(() => done()));
});

function hub(options: Partial<ConstructorParameters<typeof HubClient>[0]> = {}): { hub: HubClient; events: Array<HubEvent & { at: number }> } {
  let token: string | null = 'x.y.z';
  const events: Array<HubEvent & { at: number }> = [];
  const client = new HubClient({
    baseUrl,
    uuid: randomUUID(),
    tokens: { load: () => token, save: (t) => void (token = t) },
    connectTimeoutMs: 1_500,
    reconnect: { baseMs: 100, capMs: 200 },
    heartbeatIntervalMs: 600_000,
    requestTimeoutMs: 5_000,
    renewRetry: { baseMs: 100, capMs: 200 },
    ...options,
  });
  client.on((e) => events.push({ ...e, at: Date.now() }));
  hubs.push(client);
  return { hub: client, events };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

test('a handshake answered 100 ms before the attempt timer: connected, and still connected well past the timer', async () => {
  behaviour = (_n, _socket, next) => later(1_400, () => next());
  const { hub: client, events } = hub();
  await client.start();
  await eventually(() => client.connected, 5_000, 'connected');
  await sleep(2_500);
  expect({ connected: client.connected, types: events.map((e) => e.type).filter((t) => t !== 'heartbeat' && t !== 'error') }).toEqual({
    connected: true,
    types: ['connected'],
  });
  expect(handshakeTimes).toHaveLength(1);
}, 20_000);

test('connect_error rate_limited with retryAfter, answered 1.2 s into a 1.5 s attempt: the wait is retryAfter, not a timeout and a backoff', async () => {
  behaviour = (n, _socket, next) => (n === 1 ? later(1_200, () => next(refusal('rate_limited', { retryAfter: 2 }))) : next());
  const { hub: client, events } = hub();
  await client.start();
  await eventually(() => client.connected, 10_000, 'connected');
  expect(events.find((e) => e.type === 'refused')).toMatchObject({ code: 'rate_limited', retryAfter: 2 });
  expect(events.filter((e) => e.type === 'reconnecting').map((e) => (e as { cause: string }).cause)).toEqual(['rate_limited']);
  expect(handshakeTimes).toHaveLength(2);
  expect(handshakeTimes[1]! - handshakeTimes[0]!).toBeGreaterThanOrEqual(1_200 + 2_000 - 50);
}, 20_000);

test('connect_error rate_limited answered after the attempt timer: given up at the timer, retried with the backoff, connected', async () => {
  behaviour = (n, _socket, next) => (n === 1 ? later(2_500, () => next(refusal('rate_limited', { retryAfter: 30 }))) : next());
  const { hub: client, events } = hub();
  await client.start();
  await eventually(() => client.connected, 10_000, 'connected');
  const causes = events.filter((e) => e.type === 'reconnecting').map((e) => (e as { cause: string }).cause);
  expect(causes).toEqual(['timeout']);
  // The late refusal of the abandoned attempt does not reach the client once it connected anew.
  await sleep(2_000);
  expect({ connected: client.connected, refused: events.filter((e) => e.type === 'refused') }).toEqual({ connected: true, refused: [] });
}, 20_000);

test('unauthorized, a renewal slower than the attempt timer, then the reconnect: one connection, no timeout on the way', async () => {
  behaviour = (n, socket, next) => {
    if (n === 1) return next(refusal('unauthorized'));
    const token = (socket.handshake.auth as { token?: string }).token ?? '';
    return later(800, () => (token.startsWith('x.') ? next(refusal('unauthorized')) : next()));
  };
  renewal = () => new Promise((r) => later(2_500, () => r({ status: 201, body: { token: fakeToken() } })));
  const { hub: client, events } = hub();
  await client.start();
  await eventually(() => client.connected, 10_000, 'connected');
  await sleep(2_000);
  const types = events.map((e) => e.type).filter((t) => t !== 'heartbeat' && t !== 'error');
  expect(types).toEqual(['renewed', 'reconnecting', 'connected']);
  expect(events.find((e) => e.type === 'reconnecting')).toMatchObject({ cause: 'unauthorized', delayMs: 0 });
  expect({ handshakes: handshakeTimes.length, connected: client.connected }).toEqual({ handshakes: 2, connected: true });
}, 20_000);

test('unauthorized, renewed, then the handshake with the new token never answered: timeout, backoff, and connected on the next attempt (not stopped)', async () => {
  behaviour = (n, _socket, next) => {
    if (n === 1) return next(refusal('unauthorized'));
    if (n === 2) return; // never answered
    return next();
  };
  renewal = async () => ({ status: 201, body: { token: fakeToken() } });
  const { hub: client, events } = hub();
  await client.start();
  await eventually(() => client.connected, 10_000, 'connected');
  const causes = events.filter((e) => e.type === 'reconnecting').map((e) => (e as { cause: string }).cause);
  expect(causes).toEqual(['unauthorized', 'timeout']);
  expect(events.filter((e) => e.type === 'stopped')).toEqual([]);
}, 20_000);

async function runStopRace(mode: 'same' | 'listener'): Promise<{ stdout: string; stderr: string; exitAfterStopMs: number | 'still running' }> {
  behaviour = () => undefined; // never answered
  return runUntilExit('test/review/fixtures/attack2-hub-stop-race.ts', { BASE_URL: baseUrl, UUID: randomUUID(), CONNECT_TIMEOUT_MS: '1000', MODE: mode }, 20_000);
}

test('stop() at the moment the attempt timer fires: the process exits by itself, never connected', async () => {
  const run = await runStopRace('same');
  expect(run.stderr).toBe('');
  expect(run.stdout).toContain('connected=false');
  expect(run.exitAfterStopMs).toBeLessThan(3_000);
}, 30_000);

test('stop() from the `reconnecting` listener the timeout emits: the process exits by itself, no further attempt', async () => {
  const before = handshakeTimes.length;
  const run = await runStopRace('listener');
  expect(run.stderr).toBe('');
  expect(run.stdout).toMatch(/events=.*reconnecting/);
  expect(run.exitAfterStopMs).toBeLessThan(3_000);
  expect(handshakeTimes.length - before).toBe(1);
}, 30_000);
