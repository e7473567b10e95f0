import { mkdtemp, rm } from 'node:fs/promises';
import type { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { answerHead, HEALTH_REQUEST, openSocket, statusOf, UPGRADE_REQUEST, upgradeOnceThereIsRoom } from '../support/raw-http';
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

const open = (): Promise<Socket> => openSocket(service.port, sockets);
const head = answerHead;
const health = HEALTH_REQUEST;
const upgrade = UPGRADE_REQUEST;
const status = statusOf;
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** `count` upgrades on new connections at once: each one's status, or `unconnected`. */
const flood = (count: number): Promise<string[]> =>
  Promise.all(
    Array.from({ length: count }, async () => {
      const socket = await open().catch(() => null);
      return socket === null ? 'unconnected' : status(await head(socket, upgrade));
    }),
  );

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
  expect(await upgradeOnceThereIsRoom(open)).toBe('101');
}, 60_000);

test('connections ended by a malformed request (answered 400 and closed by the service) are uncounted', async () => {
  const held = await pressWith(LIMIT - 80);
  expect(status(await head(await open(), upgrade))).toBe('503');
  const answers = await Promise.all(held.map((socket) => head(socket, 'NOT HTTP AT ALL\r\n\r\n')));
  expect(new Set(answers.map(status))).toEqual(new Set(['400']));
  expect(await upgradeOnceThereIsRoom(open)).toBe('101');
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
  // The connections of the tests before are uncounted first (the service hears their closes in its own time).
  expect(await upgradeOnceThereIsRoom(open)).toBe('101');
  // Well below the threshold (400 less the reserve of 64 less what the process holds besides), whatever it holds.
  const upgraded = await upgradeAll(LIMIT - 140);
  // More held connections press it.
  const held = await pressWith(80);
  expect(status(await head(await open(), upgrade))).toBe('503');
  // Half of them reset by the client: room again.
  for (const socket of upgraded.slice(0, upgraded.length / 2)) socket.resetAndDestroy();
  expect(await upgradeOnceThereIsRoom(open)).toBe('101');
  for (const socket of held) socket.destroy();
  // The other half closed by the service: Socket.IO's connectTimeout (10 s), no namespace joined.
  const rest = upgraded.slice(upgraded.length / 2);
  await Promise.all(rest.map((socket) => new Promise((resolve) => (socket.destroyed ? resolve(null) : socket.once('close', resolve)))));
  await sleep(300);
  // As many upgrades again as at first: every one taken.
  await upgradeAll(LIMIT - 140);
}, 60_000);

test('a flood of upgrades within the reserve: each is answered 503 or taken, a request after it is answered, then room again', async () => {
  const held = await pressWith(LIMIT - 90);
  const answers = await flood(40);
  expect(answers.filter((answer) => answer !== '503')).toEqual([]);
  expect(status(await head(await open(), health))).toBe('200');
  for (const socket of held) socket.destroy();
  expect(await upgradeOnceThereIsRoom(open)).toBe('101');
}, 60_000);

test('a flood of upgrades past the limit itself: those beyond it are dropped (by libuv), then the service recovers', async () => {
  const held = await pressWith(LIMIT - 90);
  const answers = await flood(200);
  // About the reserve's worth refused 503; past the limit itself nothing can answer (left as is, see the review's report).
  expect(answers.filter((answer) => answer !== '503' && answer !== 'closed')).toEqual([]);
  expect(answers.filter((answer) => answer === '503').length).toBeGreaterThan(20);
  for (const socket of held) socket.destroy();
  expect(await upgradeOnceThereIsRoom(open)).toBe('101');
  expect(status(await head(await open(), health))).toBe('200');
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
