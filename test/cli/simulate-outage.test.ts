import { spawn } from 'node:child_process';
import { resolve } from 'node:path';
import { createAccount, type Account } from '../support/accounts';
import { GENEROUS_RATE_LIMITS, startTestService, type TestService } from '../support/harness';
import { startTestSmtpServer, type TestSmtpServer } from '../support/smtp';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy';
import { eventually } from '../support/client-timers';

/**
 * `npm run simulate` through an outage the clients ride out (the service unreachable for a
 * few seconds, every connection cut): the hubs and apps come back by themselves, so the run
 * exits 0 and counts the reconnects.
 */

const ROOT = resolve(__dirname, '../..');
let smtp: TestSmtpServer;
let service: TestService;
let account: Account;
let proxy: TcpProxy;

beforeAll(async () => {
  smtp = await startTestSmtpServer();
  service = await startTestService('embedded', { SMTP_URL: smtp.url, RATE_LIMITS: GENEROUS_RATE_LIMITS });
  account = await createAccount(service, smtp);
  proxy = await startTcpProxy(service.baseUrl);
}, 60_000);
afterAll(async () => {
  await proxy?.close();
  await service?.stop();
  await smtp?.stop();
});

test('an outage the clients ride out: exit 0, reconnects counted, no error', async () => {
  let stdout = '';
  let stderr = '';
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', 'scripts/simulate.ts', '--hubs', '3', '--apps', '1', '--url', proxy.baseUrl, '--email', account.email, '--password', account.password, '--duration', '10', '--heartbeat-seconds', '1', '--ping-ms', '600000', '--json'],
    { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<number | null>((done) => child.on('exit', done));
  await eventually(() => /hubs connected 3\/3/.test(stdout), 60_000, 'every hub connected');
  proxy.setDown(true);
  proxy.drop();
  await new Promise((r) => setTimeout(r, 2_500));
  proxy.setDown(false);
  const code = await exited;
  const summary = JSON.parse(stdout.trim().split('\n').at(-1) ?? '{}') as { errors: Record<string, number>; reconnects: number; heartbeats: number };
  expect({ code, stderr, errors: summary.errors }).toEqual({ code: 0, stderr: '', errors: {} });
  expect(summary.reconnects).toBeGreaterThan(0);
}, 120_000);
