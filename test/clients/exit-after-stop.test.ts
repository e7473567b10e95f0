import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { resolve } from 'node:path';
import { createAccount, type Account } from '../support/accounts';
import { GENEROUS_RATE_LIMITS, startTestService, type TestService } from '../support/harness';
import { startTestSmtpServer, type TestSmtpServer } from '../support/smtp';

/**
 * A Node process that used the clients and stopped them ends by itself: `stop()` and
 * `close()` leave no timer, socket or retry running, also when called mid-reconnect.
 */

const ROOT = resolve(__dirname, '../..');
let smtp: TestSmtpServer;
let service: TestService;
let account: Account;

beforeAll(async () => {
  smtp = await startTestSmtpServer();
  service = await startTestService('embedded', { SMTP_URL: smtp.url, RATE_LIMITS: GENEROUS_RATE_LIMITS });
  account = await createAccount(service, smtp);
}, 60_000);
afterAll(async () => {
  await service?.stop();
  await smtp?.stop();
});

async function deadPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  const { port } = server.address() as AddressInfo;
  await new Promise((done) => server.close(done));
  return port;
}

test('hub.stop() and tunnel.close(): the process exits on its own', async () => {
  const login = await fetch(`${service.baseUrl}/api/v1/auth/login`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ email: account.email, password: account.password }) });
  const { accessToken } = (await login.json()) as { accessToken: string };
  const uuid = crypto.randomUUID();
  const headers = { Authorization: `Bearer ${accessToken}`, 'Content-Type': 'application/json' };
  expect((await fetch(`${service.baseUrl}/api/v1/devices/register`, { method: 'POST', headers, body: JSON.stringify({ uuid, deviceId: 'HUB-X', name: 'Exit' }) })).status).toBe(201);
  const { token } = (await (await fetch(`${service.baseUrl}/api/v1/devices/auth/${uuid}`, { method: 'POST', headers })).json()) as { token: string };
  const child = spawn(process.execPath, ['--import', 'tsx', 'test/clients/fixtures/exit-after-stop.ts'], {
    cwd: ROOT,
    env: { ...process.env, URL: service.baseUrl, DEAD_URL: `http://127.0.0.1:${await deadPort()}`, UUID: uuid, TOKEN: token, EMAIL: account.email, PASSWORD: account.password },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  // The longest timer the clients arm is hours (the renewal); a process that is still alive
  // long after its last line was written is kept alive by something they left behind.
  const outcome = await new Promise<string>((done) => {
    const guard = setTimeout(() => {
      child.kill('SIGKILL');
      done('still running 30 s after start');
    }, 30_000);
    child.on('exit', (code) => {
      clearTimeout(guard);
      done(`exited ${String(code)}`);
    });
  });
  expect({ outcome, stderr }).toEqual({ outcome: 'exited 0', stderr: '' });
  expect(stdout).toContain('stopped hubConnected=false relayed=true');
}, 60_000);
