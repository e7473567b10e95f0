import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes, randomUUID } from 'node:crypto';
import { createConnection, type Socket } from 'node:net';
import { availableParallelism } from 'node:os';
import { api, CRM_KEY, GENEROUS_RATE_LIMITS, MODES, type Mode } from '../support/harness';
import { requestResetToken } from '../support/accounts';
import { startServerProcess, TEST_SECRETS, type ServerProcess, PROCESS_TEST_TIMEOUT_MS } from '../support/server';
import { startTestSmtpServer, type TestSmtpServer } from '../support/smtp';
import { scrape } from '../support/metrics';
import { startStack, type Stack } from '../support/stack';
import { connect, type Probe } from '../support/tunnel';

/**
 * SIGTERM to the real process (`src/main.ts`), as an orchestrator sends it (decisions §8):
 * it stops accepting, finishes the requests in flight, closes tunnel transports (so the
 * clients reconnect, to another process) and exits 0 within 10 s.
 */

/** '' when a new TCP connection is accepted, else the error code. */
function newConnection(port: number): Promise<string> {
  return new Promise((resolve) => {
    const socket = createConnection({ port, host: '127.0.0.1' });
    socket.once('connect', () => {
      socket.destroy();
      resolve('');
    });
    socket.once('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? error.message));
  });
}

/** A raw WebSocket on the engine's endpoint that reads nothing and answers nothing (a frozen client). */
async function muteWebSocket(port: number): Promise<Socket> {
  const socket = createConnection({ port, host: '127.0.0.1' });
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', () => resolve());
    socket.once('error', reject);
  });
  socket.on('error', () => undefined);
  socket.write(
    'GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n' +
      `Sec-WebSocket-Key: ${randomBytes(16).toString('base64')}\r\nSec-WebSocket-Version: 13\r\n\r\n`,
  );
  await new Promise<void>((resolve) => socket.once('data', () => resolve()));
  socket.pause();
  return socket;
}

/** Logins sent at once: many more than the hashing slots, so they queue. */
const IN_FLIGHT = availableParallelism() * 6 + 12;

describe.each<Mode>(MODES)('SIGTERM (%s mode)', (mode) => {
  let smtp: TestSmtpServer;
  let stack: Stack | null = null;
  let dir: string | null = null;
  let server: ServerProcess | null = null;

  beforeAll(async () => {
    smtp = await startTestSmtpServer();
    let env: Record<string, string>;
    if (mode === 'embedded') {
      dir = mkdtempSync(join(tmpdir(), 'hhc-sigterm-'));
      env = { DATA_DIR: dir };
    } else {
      stack = await startStack();
      env = { ...stack.env };
    }
    server = await startServerProcess({ ...TEST_SECRETS, ...env, SMTP_URL: smtp.url, RATE_LIMITS: GENEROUS_RATE_LIMITS });
  }, PROCESS_TEST_TIMEOUT_MS);
  afterAll(async () => {
    await server?.kill();
    await stack?.stop();
    await smtp?.stop();
    if (dir !== null) rmSync(dir, { recursive: true, force: true });
  }, 30_000);

  test('requests in flight are answered, new connections refused, tunnel transports closed, exit 0 within 10 s', async () => {
    const target = server as ServerProcess;
    // A user with a password (CRM, then the reset mail), logged in; a hub with its token.
    const email = `shutdown.${randomUUID()}@example.com`;
    const synced = await api(target, 'POST', '/auth/sync-customer', {
      headers: { 'X-Internal-Api-Key': CRM_KEY },
      body: { id: Math.floor(Math.random() * 1e9), first_name: 'Shut', last_name: 'Down', email, active: true },
    });
    expect(synced.status).toBe(201);
    const { token } = await requestResetToken(target, smtp, email);
    const password = `pw-${randomUUID()}`;
    expect((await api(target, 'POST', '/auth/password-reset/confirm', { body: { token, password } })).status).toBe(200);
    const loggedIn = await api(target, 'POST', '/auth/login', { body: { email, password } });
    expect(loggedIn.status).toBe(201);
    const accessToken = (loggedIn.body as { accessToken: string }).accessToken;
    const hub = await api(target, 'POST', '/devices/register', { token: accessToken, body: { uuid: randomUUID(), deviceId: 'HUB-SIGTERM', name: 'Hub' } });
    expect(hub.status).toBe(201);
    const hubUuid = (hub.body as { uuid: string }).uuid;
    const deviceAuth = await api(target, 'POST', `/devices/auth/${hubUuid}`, { token: accessToken });
    expect(deviceAuth.status).toBe(201);
    const sockets: Probe[] = [await connect(target, accessToken), await connect(target, (deviceAuth.body as { token: string }).token)];
    // And a WebSocket client that will never answer the server's close frame.
    const mute = await muteWebSocket(target.port);

    // Logins queue behind the password-hashing slots: most are still running when SIGTERM arrives.
    // Every POST before them was answered: the service's count of answered POSTs starts here.
    const postsBefore = (await scrape(target)).value('http_requests_total', { method: 'POST' });
    const logins = Array.from({ length: IN_FLIGHT }, () =>
      api(target, 'POST', '/auth/login', { body: { email, password } }).then(
        (res) => res.status,
        (error: Error) => `${error.message}: ${String((error.cause as Error | undefined)?.message)}`,
      ),
    );
    // Signal once every login is inside the process: answered, or received and not yet answered.
    // Both counts come from one scrape, so from one instant of the service (a login answered
    // moves from the gauge to the counter in one step). A connection still in the listen
    // backlog when the listener closes is refused, not in flight.
    let unanswered = 0;
    for (let settled = false; !settled; ) {
      const now = await scrape(target);
      const answered = now.value('http_requests_total', { method: 'POST' }) - postsBefore;
      const inFlight = now.value('http_requests_in_flight') - 1; // the scrape itself
      settled = answered + inFlight >= IN_FLIGHT;
      unanswered = IN_FLIGHT - answered;
      if (!settled) await new Promise((resolve) => setImmediate(resolve));
    }
    const signalled = Date.now();
    const exit = target.stop();

    // Stops accepting: a new connection is refused soon after the signal.
    let refusal = '';
    for (let i = 0; i < 50 && refusal === ''; i++) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      refusal = await newConnection(target.port);
    }
    // Refused, or (a connection the kernel had queued just as the listener closed) reset unanswered.
    expect(['ECONNREFUSED', 'ECONNRESET']).toContain(refusal);

    // Every request that was in flight got its answer.
    expect(unanswered).toBeGreaterThan(0);
    expect(await Promise.all(logins)).toEqual(Array.from({ length: IN_FLIGHT }, () => 201));

    // Tunnel sockets saw their transport close (a client then reconnects), not a server-side disconnect (it would not).
    for (const socket of sockets) {
      expect(await socket.next<string>('disconnect', () => true, 10_000)).toBe('transport close');
    }

    expect(await exit).toBe(0);
    mute.destroy();
    expect(Date.now() - signalled).toBeLessThan(10_000);
    const lines = target.output();
    expect(lines).toMatch(/"msg":"shutting down"/);
    expect(lines).toMatch(/"msg":"stopped"/);
    server = null;
  }, 60_000);
});

describe('SIGTERM while Redis is down (distributed mode)', () => {
  let stack: Stack;
  let server: ServerProcess | null = null;

  beforeAll(async () => {
    stack = await startStack();
    server = await startServerProcess({ ...TEST_SECRETS, ...stack.env, RATE_LIMITS: GENEROUS_RATE_LIMITS });
  }, PROCESS_TEST_TIMEOUT_MS);
  afterAll(async () => {
    await server?.kill();
    await stack?.stop();
  }, 30_000);

  test('steps that hang on Redis are left behind in time: exit 0 within 10 s', async () => {
    const target = server as ServerProcess;
    await stack.redis.kill();
    // Still answering without Redis.
    expect((await api(target, 'GET', '/health')).status).toBe(200);
    const signalled = Date.now();
    expect(await target.stop()).toBe(0);
    expect(Date.now() - signalled).toBeLessThan(10_000);
    expect(target.output()).toMatch(/"msg":"stopped"/);
    // Nothing waited for Redis to come back: no step had to be left behind.
    expect(target.output()).not.toMatch(/did not finish in time/);
    server = null;
  }, 30_000);
});
