import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { freePort } from '../support/ports';

/**
 * README's quickstart, run as a newcomer runs it, so it cannot rot: `npm run user` makes the
 * first user with a password, the service starts, and `examples/quickstart.ts` logs in,
 * registers a hub, heartbeats, and has the hub and the app talk through the tunnel. Also:
 * the user command refuses distributed mode unless told, and a running service.
 */

const ROOT = resolve(__dirname, '../..');
const run = promisify(execFile);

function userCommand(args: string[], env: Record<string, string>, stdin?: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/user.ts', ...args], { cwd: ROOT, env: { ...process.env, ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('exit', (code) => done({ code: code ?? -1, stdout, stderr }));
    child.stdin.end(stdin ?? '');
  });
}

describe('quickstart', () => {
  let dataDir: string;
  beforeAll(() => {
    dataDir = mkdtempSync(join(tmpdir(), 'hhc-quickstart-'));
  });
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  test('first user, service, hub, heartbeat, tunnel: the README steps work end to end', async () => {
    const made = await userCommand(['create', 'ada@example.com'], { DATA_DIR: dataDir });
    expect(made.code).toBe(0);
    expect(made.stdout).toMatch(/^Created ada@example\.com \(id [0-9a-f-]{36}\)\.$/m);
    expect(made.stdout).toMatch(/"token": "[0-9a-f-]{36}\.[A-Za-z0-9_-]{43}"/);

    const withPassword = await userCommand(['create', 'ada@example.com', '--password-stdin'], { DATA_DIR: dataDir }, 'correct horse battery\n');
    expect(withPassword.code).toBe(0);
    expect(withPassword.stdout).toContain('Password set');

    const port = await freePort();
    const service = spawn(process.execPath, ['--import', 'tsx', 'src/main.ts'], { cwd: ROOT, env: { ...process.env, DATA_DIR: dataDir, PORT: String(port), HOST: '127.0.0.1' }, stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = new Promise<number | null>((done) => service.once('exit', done));
    try {
      for (let i = 0; i < 200; i++) {
        if (await fetch(`http://127.0.0.1:${port}/api/v1/health/ready`).then((r) => r.ok, () => false)) break;
        await new Promise((r) => setTimeout(r, 50));
      }
      // The log file is held by the running service: the user command says what to do instead.
      const refused = await userCommand(['create', 'bob@example.com'], { DATA_DIR: dataDir });
      expect(refused.code).toBe(1);
      expect(refused.stderr).toContain('The service is running on this DATA_DIR');

      const { stdout } = await run(process.execPath, ['--import', 'tsx', 'examples/quickstart.ts', 'ada@example.com', 'correct horse battery', `http://127.0.0.1:${port}`], { cwd: ROOT });
      expect(stdout.trim().split('\n')).toEqual([
        'logged in',
        expect.stringMatching(/^registered hub [0-9a-f-]{36}$/),
        'heartbeat: online=true',
        expect.stringMatching(/^subscribed: \{"success":true,"deviceUuid":"[0-9a-f-]{36}","isOnline":true,"tunnelConnected":true\}$/),
        'sent light.set: delivered=true',
        'hub replied: light.set.done {"on":true}',
      ]);
    } finally {
      service.kill('SIGTERM');
      await exited;
    }
  }, 120_000);

  test('the user command refuses distributed mode unless told', async () => {
    const refused = await userCommand(['create', 'c@example.com'], {
      EVENTSTORE_URL: 'esdb://127.0.0.1:1?tls=false',
      MONGODB_URI: 'mongodb://127.0.0.1:1/x',
      REDIS_URL: 'redis://127.0.0.1:1',
      JWT_ACCESS_SECRET: 'a'.repeat(40),
      JWT_REFRESH_SECRET: 'b'.repeat(40),
      JWT_DEVICE_SECRET: 'c'.repeat(40),
      INTERNAL_API_KEYS: 'key',
      DATA_KEY_ENCRYPTION_KEY: 'd'.repeat(40),
    });
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain('--allow-distributed');
  });
});
