import { mkdtemp, rm } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PROCESS_TEST_TIMEOUT_MS, startServerProcess, type ServerProcess } from '../support/server';

/**
 * Attacks on the head-room guard (src/runtime/descriptor-headroom.ts) from outside, on the real
 * service under `prlimit --nofile=400`: its count of connections must follow them however they
 * end (reset, refused, upgraded and closed by the service), so that it neither stays pressed nor
 * lets the process run into its limit.
 */

const LIMIT = 400;

let dataDir: string;
let service: ServerProcess;
const sockets: Socket[] = [];

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'hhc-headroom-attacks-'));
  service = await startServerProcess({ DATA_DIR: dataDir }, undefined, ['prlimit', `--nofile=${LIMIT}:${LIMIT}`, '--']);
}, PROCESS_TEST_TIMEOUT_MS);

afterEach(async () => {
  for (const socket of sockets.splice(0)) socket.destroy();
  await sleep(300);
});

afterAll(async () => {
  await service?.stop();
  await rm(dataDir, { recursive: true, force: true });
});

const open = async (): Promise<Socket> => {
  const socket = connect(service.port, '127.0.0.1');
  sockets.push(socket);
  socket.on('error', () => undefined);
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', () => resolve());
    socket.once('error', reject);
  });
  return socket;
};

/** What the service first answers on `socket` to `request` (its head), or null when the connection closed first. */
const head = (socket: Socket, request: string): Promise<string | null> =>
  new Promise((resolve) => {
    let text = '';
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('latin1');
      if (text.includes('\r\n\r\n')) resolve(text);
    });
    socket.once('close', () => resolve(text.includes('\r\n\r\n') ? text : null));
    socket.write(request);
  });

const health = 'GET /api/v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n';
const upgrade =
  'GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n' +
  'Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n';
const status = (answer: string | null): string => answer?.slice(9, 12) ?? 'closed';
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Held connections that never send a request, enough to press the service. */
const pressWith = async (count: number): Promise<Socket[]> => {
  const held: Socket[] = [];
  for (let i = 0; i < count; i++) held.push(await open());
  return held;
};

test('connections reset all at once are all uncounted: an upgrade is taken again', async () => {
  const held = await pressWith(LIMIT - 80);
  expect(status(await head(await open(), upgrade))).toBe('503');
  for (const socket of held) socket.resetAndDestroy();
  await sleep(300);
  expect(status(await head(await open(), upgrade))).toBe('101');
}, 60_000);

test('connections ended by a malformed request (answered 400 and closed by the service) are uncounted', async () => {
  const held = await pressWith(LIMIT - 80);
  expect(status(await head(await open(), upgrade))).toBe('503');
  const answers = await Promise.all(held.map((socket) => head(socket, 'NOT HTTP AT ALL\r\n\r\n')));
  expect(new Set(answers.map(status))).toEqual(new Set(['400']));
  await sleep(300);
  expect(status(await head(await open(), upgrade))).toBe('101');
}, 60_000);

test('upgraded connections closed by either side are uncounted', async () => {
  const upgradeAll = async (count: number): Promise<Socket[]> => {
    const upgraded: Socket[] = [];
    for (let i = 0; i < count; i++) {
      const socket = await open();
      expect(status(await head(socket, upgrade))).toBe('101');
      upgraded.push(socket);
    }
    return upgraded;
  };
  const upgraded = await upgradeAll(LIMIT - 100);
  // A few more held connections press it.
  const held = await pressWith(40);
  expect(status(await head(await open(), upgrade))).toBe('503');
  // Half of them reset by the client: room again.
  for (const socket of upgraded.slice(0, upgraded.length / 2)) socket.resetAndDestroy();
  await sleep(300);
  const taken = await open();
  expect(status(await head(taken, upgrade))).toBe('101');
  for (const socket of [...held, taken]) socket.destroy();
  // The other half closed by the service: Socket.IO's connectTimeout (10 s), no namespace joined.
  const rest = upgraded.slice(upgraded.length / 2);
  await Promise.all(rest.map((socket) => new Promise((resolve) => (socket.destroyed ? resolve(null) : socket.once('close', resolve)))));
  await sleep(300);
  // As many upgrades again as at first: every one taken.
  await upgradeAll(LIMIT - 100);
}, 60_000);

test('a flood of upgrades within the reserve: each is answered 503 or taken, a request after it is answered, then room again', async () => {
  const held = await pressWith(LIMIT - 90);
  const flood = await Promise.all(
    Array.from({ length: 40 }, async () => {
      const socket = await open().catch(() => null);
      return socket === null ? 'unconnected' : status(await head(socket, upgrade));
    }),
  );
  expect(flood.filter((answer) => answer !== '503')).toEqual([]);
  expect(status(await head(await open(), health))).toBe('200');
  for (const socket of held) socket.destroy();
  await sleep(300);
  expect(status(await head(await open(), upgrade))).toBe('101');
}, 60_000);

test('a flood of upgrades past the limit itself: those beyond it are dropped (by libuv), then the service recovers', async () => {
  const held = await pressWith(LIMIT - 90);
  const flood = await Promise.all(
    Array.from({ length: 200 }, async () => {
      const socket = await open().catch(() => null);
      return socket === null ? 'unconnected' : status(await head(socket, upgrade));
    }),
  );
  // About the reserve's worth refused 503; past the limit itself nothing can answer (left as is, see the review's report).
  expect(flood.filter((answer) => answer !== '503' && answer !== 'closed')).toEqual([]);
  expect(flood.filter((answer) => answer === '503').length).toBeGreaterThan(20);
  for (const socket of held) socket.destroy();
  await sleep(500);
  expect(status(await head(await open(), health))).toBe('200');
  expect(status(await head(await open(), upgrade))).toBe('101');
}, 60_000);

test('long polling under pressure: a new session is opened (it is not an upgrade), its answer closes its connection', async () => {
  await pressWith(LIMIT - 80);
  const answer = await head(await open(), 'GET /socket.io/?EIO=4&transport=polling HTTP/1.1\r\nHost: localhost\r\n\r\n');
  expect(status(answer)).toBe('200');
  expect(answer).toMatch(/\r\nconnection: close\r\n/i);
}, 60_000);

test('SIGTERM while pressed: the service drains and exits 0', async () => {
  await pressWith(LIMIT - 80);
  const kept = await open();
  expect(status(await head(kept, health))).toBe('200');
  const started = Date.now();
  expect(await service.stop()).toBe(0);
  expect(Date.now() - started).toBeLessThan(15_000);
  expect(service.output()).not.toMatch(/"level":(50|60)/);
}, 60_000);
