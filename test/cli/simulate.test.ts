import { spawn } from 'node:child_process';
import { resolve } from 'node:path';
import { createAccount, type Account } from '../support/accounts';
import { GENEROUS_RATE_LIMITS, startTestService, type TestService } from '../support/harness';
import { startTestSmtpServer, type TestSmtpServer } from '../support/smtp';

/**
 * `npm run simulate`, run as an operator runs it, briefly, against a service on port 0: it
 * registers its hubs, runs them and the app sessions on the two clients, prints progress
 * and a summary, and exits 0; with a wrong password, non-zero.
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

function simulate(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((done) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'scripts/simulate.ts', ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('exit', (code) => done({ code, stdout, stderr }));
  });
}

test('a short run: hubs registered, heartbeats, relayed pings timed, a summary, exit 0', async () => {
  const run = await simulate(['--hubs', '6', '--apps', '2', '--url', service.baseUrl, '--email', account.email, '--password', account.password, '--duration', '3', '--heartbeat-seconds', '1', '--ping-ms', '200', '--json']);
  expect({ code: run.code, stderr: run.stderr }).toEqual({ code: 0, stderr: '' });
  const lines = run.stdout.trim().split('\n');
  expect(lines[0]).toBe(`registered 6 hubs on ${account.email}`);
  expect(lines.filter((l) => /^\[\d+s\] hubs connected \d+\/6 {2}heartbeats\/s [\d.]+ {2}rtt p50 /.test(l)).length).toBeGreaterThanOrEqual(2);
  const summary = JSON.parse(lines.at(-1) ?? '{}') as { hubs: number; apps: number; heartbeats: number; replies: number; rttMs: { p50: number; p99: number }; errors: Record<string, number>; reconnects: number };
  expect(summary).toMatchObject({ hubs: 6, apps: 2, errors: {}, reconnects: 0 });
  // Each hub beats at start and about once a second after.
  expect(summary.heartbeats).toBeGreaterThanOrEqual(12);
  expect(summary.replies).toBeGreaterThan(0);
  expect(summary.rttMs.p99).toBeGreaterThanOrEqual(summary.rttMs.p50);
  const list = await fetch(`${service.baseUrl}/api/v1/devices?limit=100`, { headers: { Authorization: `Bearer ${(await (await fetch(`${service.baseUrl}/api/v1/auth/login`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ email: account.email, password: account.password }) })).json() as { accessToken: string }).accessToken}` } });
  expect(((await list.json()) as { data: Array<{ deviceId: string }> }).data.filter((d) => d.deviceId.startsWith('SIM-'))).toHaveLength(6);
}, 120_000);

test('a failure the clients cannot ride out (a wrong password): non-zero, and says why', async () => {
  const run = await simulate(['--hubs', '1', '--apps', '1', '--url', service.baseUrl, '--email', account.email, '--password', 'wrong password', '--duration', '1']);
  expect(run.code).toBe(1);
  expect(run.stderr).toContain('simulate: login answered 401');
});

test('bad arguments: exit 2 with the usage', async () => {
  const run = await simulate(['--hubs', '1']);
  expect(run.code).toBe(2);
  expect(run.stderr).toContain('usage: npm run simulate --');
});
