import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { request as httpsRequest } from 'node:https';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { io, type Socket } from 'socket.io-client';
import { createTokens } from '../../src/auth/tokens';
import type { ClientToServerEvents, MessageFromDevice, MessageToDevice, ServerToClientEvents } from '../../src/tunnel/events';
import { freePort } from '../support/ports';
import { TEST_SECRETS } from '../support/server';
import { startStack, type Stack } from '../support/stack';

/**
 * The production path, proven without a Docker engine: what the image would contain (a
 * clean copy of the repository, `npm ci`, the build, then a production-only install, as
 * the Dockerfile does), run as docker-compose.yml runs it (`node dist/main.js` under tini,
 * two API replicas and a worker, the compose environment) against the stand-in stack,
 * behind the same Caddyfile run by Debian's Caddy with a self-signed certificate.
 */

const ROOT = resolve(__dirname, '../..');
const SPAWN_TIMEOUT_MS = 180_000;

function need(binary: string, debianPackage: string): string {
  const found = spawnSync('sh', ['-c', `command -v ${binary}`], { encoding: 'utf8' }).stdout.trim();
  if (found === '') throw new Error(`${binary} is missing: apt-get install ${debianPackage} (.ci/run installs it)`);
  return found;
}

/** The files of the repository a clone would have (tracked and new, minus what .gitignore leaves out). */
function assembleImage(into: string): void {
  const files = execFileSync('git', ['ls-files', '-co', '--exclude-standard', '-z'], { cwd: ROOT, encoding: 'utf8' }).split('\0').filter(Boolean);
  for (const file of files) {
    if (!existsSync(join(ROOT, file))) continue; // deleted in the working tree
    mkdirSync(dirname(join(into, file)), { recursive: true });
    copyFileSync(join(ROOT, file), join(into, file));
  }
  const npm = (args: string[]): void => {
    execFileSync('npm', [...args, '--no-audit', '--no-fund', '--prefer-offline'], { cwd: into, stdio: 'ignore', timeout: SPAWN_TIMEOUT_MS });
  };
  npm(['ci']);
  execFileSync('npm', ['run', 'build', '--silent'], { cwd: into, stdio: 'ignore' });
  // The runtime stage: production dependencies only, with their native platform packages.
  npm(['ci', '--omit=dev']);
}

function selfSignedCertificate(dir: string): { cert: string; key: string } {
  const cert = join(dir, 'cert.pem');
  const key = join(dir, 'key.pem');
  execFileSync('openssl', [
    'req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=localhost',
    '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1', '-keyout', key, '-out', cert,
  ], { stdio: 'ignore' });
  return { cert, key };
}

interface Proc {
  readonly child: ChildProcess;
  readonly output: () => string;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

function run(command: string, args: string[], options: { cwd: string; env: Record<string, string> }): Proc {
  const child = spawn(command, args, { cwd: options.cwd, env: { PATH: process.env.PATH ?? '', ...options.env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((done) => child.once('exit', (code, signal) => done({ code, signal })));
  return { child, output: () => output, exited };
}

/** SIGTERM to each process still running, then SIGKILL to any that has not exited within 20 s. */
async function stopProcs(procs: readonly Proc[]): Promise<void> {
  const running = (proc: Proc): boolean => proc.child.exitCode === null && proc.child.signalCode === null;
  for (const proc of procs) if (running(proc)) proc.child.kill('SIGTERM');
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<void>((resolve) => (timer = setTimeout(resolve, 20_000)));
  await Promise.race([Promise.all(procs.map((proc) => proc.exited)), deadline]);
  clearTimeout(timer);
  for (const proc of procs) if (running(proc)) proc.child.kill('SIGKILL');
}

interface Reply {
  readonly status: number;
  readonly body: unknown;
}

/** HTTPS through the proxy, trusting the test's own certificate, from a chosen local address. */
function https(port: number, ca: string, method: string, path: string, options: { body?: unknown; headers?: Record<string, string>; from?: string } = {}): Promise<Reply> {
  return new Promise((done, fail) => {
    const payload = options.body === undefined ? undefined : JSON.stringify(options.body);
    const req = httpsRequest(
      {
        host: '127.0.0.1',
        servername: 'localhost',
        port,
        method,
        path: `/api/v1${path}`,
        ca,
        localAddress: options.from ?? '127.0.0.1',
        headers: { Host: `localhost:${port}`, ...(payload !== undefined ? { 'Content-Type': 'application/json' } : {}), ...options.headers },
      },
      (res) => {
        let text = '';
        res.on('data', (chunk: Buffer) => (text += chunk.toString()));
        res.on('end', () => done({ status: res.statusCode ?? 0, body: text.length > 0 ? (JSON.parse(text) as unknown) : null }));
      },
    );
    req.on('error', fail);
    req.end(payload);
  });
}

async function until(probe: () => Promise<boolean>, what: string, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await probe().catch(() => false)) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${what} not ready within ${timeoutMs} ms`);
}

describe('the production path (image contents, compose environment, TLS proxy)', () => {
  let work: string;
  let stack: Stack;
  let ca: string;
  let proxyPort: number;
  const replicas: Array<{ proc: Proc; port: number }> = [];
  const others: Proc[] = [];

  beforeAll(async () => {
    const tini = need('tini', 'tini');
    const caddy = need('caddy', 'caddy');
    need('openssl', 'openssl');
    work = mkdtempSync(join(tmpdir(), 'hhc-image-'));
    const image = join(work, 'app');
    mkdirSync(image);
    const [, started] = await Promise.all([Promise.resolve(assembleImage(image)), startStack()]);
    stack = started;
    const tls = selfSignedCertificate(work);
    ca = readFileSync(tls.cert, 'utf8');

    const compose = { ...TEST_SECRETS, ...stack.env, NODE_ENV: 'production', APP_VERSION: 'test-build', LOG_LEVEL: 'info', HOST: '127.0.0.1' };
    for (let i = 0; i < 2; i++) {
      const port = await freePort();
      const proc = run(tini, ['--', process.execPath, 'dist/main.js'], { cwd: image, env: { ...compose, ROLES: 'api', TRUST_PROXY: '1', PORT: String(port) } });
      replicas.push({ proc, port });
    }
    others.push(run(tini, ['--', process.execPath, 'dist/main.js'], { cwd: image, env: { ...compose, ROLES: 'projector,expiry', PORT: String(await freePort()) } }));
    for (const { port } of replicas) {
      await until(async () => (await fetch(`http://127.0.0.1:${port}/api/v1/health/ready`)).status === 200, `replica on ${port}`);
    }

    proxyPort = await freePort();
    const home = join(work, 'caddy-home');
    mkdirSync(home);
    others.push(
      run(caddy, ['run', '--config', join(ROOT, 'deploy/Caddyfile'), '--adapter', 'caddyfile'], {
        cwd: work,
        env: {
          HOME: home,
          XDG_DATA_HOME: home,
          XDG_CONFIG_HOME: home,
          SITE_ADDRESS: `https://localhost:${proxyPort}`,
          TLS_CERT: tls.cert,
          TLS_KEY: tls.key,
          UPSTREAMS: replicas.map((r) => `127.0.0.1:${r.port}`).join(' '),
        },
      }),
    );
    await until(async () => (await https(proxyPort, ca, 'GET', '/health')).status === 200, 'the proxy');
  }, 300_000);

  afterAll(async () => {
    // SIGTERM first: tini passes it on to node, which stops; a SIGKILL to tini alone would
    // leave its node child running after the suite.
    await stopProcs([...replicas.map((r) => r.proc), ...others]);
    await stack?.stop();
    if (work !== undefined) rmSync(work, { recursive: true, force: true });
  }, 60_000);

  test('the image holds production dependencies only, with the native argon2 binding, and runs compiled JavaScript', () => {
    const modules = join(work, 'app', 'node_modules');
    expect(existsSync(join(modules, 'tsx'))).toBe(false);
    expect(existsSync(join(modules, 'jest'))).toBe(false);
    expect(existsSync(join(modules, '@node-rs', 'argon2-linux-x64-gnu'))).toBe(true);
    expect(existsSync(join(work, 'app', 'dist', 'main.js'))).toBe(true);
    expect(replicas[0]?.proc.output()).toContain('"version":"test-build"');
  });

  test('HTTPS through the proxy: the API answers, a CRM sync and a device registration go through', async () => {
    expect(await https(proxyPort, ca, 'GET', '/health')).toEqual({ status: 200, body: { status: 'ok', service: 'home-hub-cloud' } });
    const synced = await https(proxyPort, ca, 'POST', '/auth/sync-customer', {
      headers: { 'X-Internal-Api-Key': 'test-crm-key-1' },
      body: { id: 4242, first_name: 'Ada', last_name: 'Lovelace', email: 'ada.prod@example.com', active: true },
    });
    expect(synced.status).toBe(201);
  });

  test('a Socket.IO tunnel round trip over wss:// through the proxy', async () => {
    const tokens = createTokens({ jwtAccessSecret: TEST_SECRETS.JWT_ACCESS_SECRET, jwtRefreshSecret: TEST_SECRETS.JWT_REFRESH_SECRET, jwtDeviceSecret: TEST_SECRETS.JWT_DEVICE_SECRET });
    const synced = await https(proxyPort, ca, 'POST', '/auth/sync-customer', {
      headers: { 'X-Internal-Api-Key': 'test-crm-key-1' },
      body: { id: 4343, first_name: 'Bea', last_name: 'Hub', email: 'bea.prod@example.com', active: true },
    });
    const user = (synced.body as { user: { id: string; email: string } }).user;
    const access = tokens.signAccess({ sub: user.id, email: user.email, role: 'user' });
    const uuid = '6f0b5a0e-8a4c-4c41-9f55-2a5b6c7d8e9f';
    expect((await https(proxyPort, ca, 'POST', '/devices/register', { headers: { Authorization: `Bearer ${access}` }, body: { uuid, deviceId: 'HUB', name: 'Hub' } })).status).toBe(201);
    const issued = await https(proxyPort, ca, 'POST', `/devices/auth/${uuid}`, { headers: { Authorization: `Bearer ${access}` } });
    const deviceToken = (issued.body as { token: string }).token;

    const open = (token: string): Socket<ServerToClientEvents, ClientToServerEvents> =>
      io(`wss://localhost:${proxyPort}/tunnel`, { auth: { token }, transports: ['websocket'], reconnection: false, forceNew: true, ca });
    const hub = open(deviceToken);
    const app = open(access);
    try {
      await Promise.all([hub, app].map((s) => new Promise<void>((done, fail) => (s.once('connect', () => done()), s.once('connect_error', fail)))));
      const toHub = new Promise<MessageToDevice>((done) => hub.once('tunnel:message', (m) => done(m as MessageToDevice)));
      const toApp = new Promise<MessageFromDevice>((done) => app.once('tunnel:message', (m) => done(m as MessageFromDevice)));
      expect(await app.timeout(5000).emitWithAck('tunnel:subscribe', { deviceUuid: uuid })).toMatchObject({ success: true });
      expect(await app.timeout(5000).emitWithAck('tunnel:message', { deviceUuid: uuid, type: 'light.set', payload: { on: true } })).toEqual({ success: true, delivered: true });
      expect((await toHub).payload).toEqual({ on: true });
      hub.emit('tunnel:message', { type: 'light.state', payload: { on: true } });
      expect((await toApp).type).toBe('light.state');
    } finally {
      hub.disconnect();
      app.disconnect();
    }
  });

  test("the rate limiter sees the client's address through the proxy (TRUST_PROXY), not the proxy's", async () => {
    const login = (from: string, headers: Record<string, string> = {}) =>
      https(proxyPort, ca, 'POST', '/auth/login', { from, headers, body: { email: 'nobody@example.com', password: 'wrong-password' } });
    // The login tier: 5 per minute per client address.
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) statuses.push((await login('127.0.0.2')).status);
    expect(statuses).toEqual([401, 401, 401, 401, 401, 429]);
    // A forged X-Forwarded-For does not move a client to another budget.
    expect((await login('127.0.0.2', { 'X-Forwarded-For': '198.51.100.7' })).status).toBe(429);
    // Another client behind the same proxy has a budget of its own.
    expect((await login('127.0.0.3')).status).toBe(401);
  });

  test('SIGTERM to the init process reaches node: a clean exit within 10 s', async () => {
    const replica = replicas[1];
    if (replica === undefined) throw new Error('no second replica');
    const started = Date.now();
    replica.proc.child.kill('SIGTERM');
    const exit = await replica.proc.exited;
    expect(exit).toEqual({ code: 0, signal: null });
    expect(Date.now() - started).toBeLessThan(10_000);
    // The proxy keeps serving through the other replica.
    await until(async () => (await https(proxyPort, ca, 'GET', '/health')).status === 200, 'the proxy after one replica left', 15_000);
  }, 30_000);
});
