import { mkdtemp, rm } from 'node:fs/promises';
import type { Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openFileLimit } from '../../src/runtime/descriptor-headroom';
import { HEALTH_REQUEST, openSocket, UPGRADE_REQUEST, upgradeOnceThereIsRoom } from '../support/raw-http';
import { PROCESS_TEST_TIMEOUT_MS, startServerProcess, type ServerProcess } from '../support/server';

/**
 * Head-room below the limit of open files (src/runtime/descriptor-headroom.ts), on the real
 * service in a child process whose limit is lowered to 400 (`prlimit`): past its reserve the
 * process closes idle kept-alive connections, answers with `Connection: close` and refuses new
 * WebSocket upgrades with 503, so that a person's request is still answered. Without it, a
 * connection past the limit is accepted and closed at once by libuv, unanswered.
 */

const LIMIT = 400;

test('the soft limit is read from /proc/self/limits; unlimited or unreadable is no limit', () => {
  const limits = (soft: string): string =>
    `Limit                     Soft Limit           Hard Limit           Units     \nMax processes             95316                95316                processes \nMax open files            ${soft}                20000                files     \n`;
  expect(openFileLimit(() => limits('1024'))).toBe(1024);
  expect(openFileLimit(() => limits('unlimited'))).toBeNull();
  expect(
    openFileLimit(() => {
      throw new Error('no /proc here');
    }),
  ).toBeNull();
  expect(openFileLimit(() => 'Max processes 10 10 processes\n')).toBeNull();
});

describe('a service at its limit of open files', () => {
  let dataDir: string;
  let service: ServerProcess;
  const sockets: Socket[] = [];

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'hhc-headroom-'));
    service = await startServerProcess({ DATA_DIR: dataDir }, undefined, ['prlimit', `--nofile=${LIMIT}:${LIMIT}`, '--']);
  }, PROCESS_TEST_TIMEOUT_MS);

  afterEach(() => {
    for (const socket of sockets.splice(0)) socket.destroy();
  });

  afterAll(async () => {
    await service?.stop();
    await rm(dataDir, { recursive: true, force: true });
  });

  const open = (): Promise<Socket> => openSocket(service.port, sockets);

  /** Sends `request` on `socket` and reads until the answer's end: its text, or null when the connection closed first. */
  const ask = (socket: Socket, request: string): Promise<string | null> =>
    new Promise((resolve) => {
      let text = '';
      const done = (answer: string | null): void => {
        socket.removeAllListeners('data');
        socket.removeListener('close', closed);
        resolve(answer);
      };
      const closed = (): void => done(text.length > 0 ? text : null);
      socket.on('data', (chunk: Buffer) => {
        text += chunk.toString('latin1');
        const head = text.indexOf('\r\n\r\n');
        const length = /content-length: (\d+)/i.exec(text)?.[1];
        if (head >= 0 && length !== undefined && text.length >= head + 4 + Number(length)) done(text);
      });
      socket.once('close', closed);
      socket.write(request);
    });

  const health = HEALTH_REQUEST;
  const upgrade = UPGRADE_REQUEST;

  test(
    'more kept-alive connections than the limit allows: every request is answered, the idle ones are closed to make room',
    async () => {
      const answers: Array<string | null> = [];
      let closedByService = 0;
      for (let i = 0; i < LIMIT + 50; i++) {
        const socket = await open().catch(() => null);
        if (socket === null) {
          answers.push(null);
          continue;
        }
        socket.once('close', () => closedByService++);
        answers.push(await ask(socket, health));
      }
      // None was dropped unanswered: at the limit libuv would have closed them at accept.
      expect(answers.filter((answer) => answer === null || !answer.startsWith('HTTP/1.1 200'))).toEqual([]);
      // Past the reserve, the idle ones were closed by the service (this test's own connections, all idle after their answer).
      expect(closedByService).toBeGreaterThan(LIMIT / 2);
    },
    60_000,
  );

  test(
    'within the reserve, a WebSocket upgrade is refused with 503 and Retry-After, a request is still answered; with room again, the upgrade is taken',
    async () => {
      // Connections that never send a request hold their descriptors (they are not idle kept-alive ones).
      for (let i = 0; i < LIMIT - 80; i++) await open();
      const refused = await ask(await open(), upgrade);
      expect(refused).toMatch(/^HTTP\/1\.1 503 /);
      expect(refused).toMatch(/\r\nretry-after: 5\r\n/i);
      expect(JSON.parse(refused?.slice(refused.indexOf('\r\n\r\n') + 4) ?? '')).toEqual({ statusCode: 503, message: 'Too many connections at once, retry later', error: 'Service Unavailable' });
      const answered = await ask(await open(), health);
      expect(answered).toMatch(/^HTTP\/1\.1 200 /);
      expect(answered).toMatch(/\r\nconnection: close\r\n/i);

      for (const socket of sockets.splice(0)) socket.destroy();
      expect(await upgradeOnceThereIsRoom(open)).toBe('101');
    },
    60_000,
  );
});
