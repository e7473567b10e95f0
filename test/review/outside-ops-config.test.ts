import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../support/ports';
import { startServerProcess } from '../support/server';

/**
 * Configuration names, from outside (decisions §8, §10; README "Configuration": "a bad value
 * stops the process with a message naming the variable"). Each case starts the real service
 * with one bad value and expects one of two things: the process stops (non-zero) with a
 * message that names the variable and carries no stack trace; or, for a value it chooses to
 * take, it runs as configured, never with a silent stand-in (such as Node's 1 ms for a timer
 * beyond 2^31-1 ms, or a generated CRM key for a list that was given but held no key).
 */

const ROOT = join(__dirname, '..', '..');
const MAIN = join(ROOT, 'src', 'main.ts');

interface Run {
  readonly code: number | null;
  readonly output: string;
  /** true when the process was still running at the deadline (then stopped by the test). */
  readonly running: boolean;
}

/** Runs the service with `env` until it exits or `ms` pass; returns what it printed. */
async function run(env: Record<string, string>, ms: number, whileRunning?: (port: number) => Promise<void>): Promise<Run> {
  const dataDir = mkdtempSync(join(tmpdir(), 'hhc-outside-config-'));
  const port = await freePort();
  const child = spawn(process.execPath, ['--import', 'tsx', MAIN], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', HOST: '127.0.0.1', PORT: String(port), DATA_DIR: dataDir, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  try {
    const started = new Promise<void>((resolve) => {
      const look = (): void => {
        if (output.includes('"service started"')) resolve();
        else setTimeout(look, 50);
      };
      look();
    });
    const first = await Promise.race([exited.then((code) => ({ code })), started.then(() => 'started' as const), new Promise<'late'>((r) => setTimeout(() => r('late'), 120_000))]);
    if (first !== 'started') return { code: first === 'late' ? null : first.code, output, running: first === 'late' };
    if (whileRunning !== undefined) await whileRunning(port);
    const late = await Promise.race([exited.then((code) => ({ code })), new Promise<'running'>((r) => setTimeout(() => r('running'), ms))]);
    if (late !== 'running') return { code: late.code, output, running: false };
    child.kill('SIGTERM');
    await exited;
    return { code: null, output, running: true };
  } finally {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      await exited;
    }
    rmSync(dataDir, { recursive: true, force: true });
  }
}

const STACK_FRAME = /\n\s+at .+\(.+:\d+:\d+\)/;

function expectNamedRefusal(result: Run, variable: string): void {
  expect(result.running).toBe(false);
  expect(result.code).not.toBe(0);
  expect(result.output).toContain(variable);
  expect(result.output).not.toMatch(STACK_FRAME);
}

describe('bad values stop the process with a message naming the variable', () => {
  test('TRUST_PROXY that is none of Express\'s trust proxy values ("yes")', async () => {
    // Today: "Failed to start: invalid IP address: yes" (proxy-addr's message; the variable is not named).
    expectNamedRefusal(await run({ TRUST_PROXY: 'yes' }, 3000), 'TRUST_PROXY');
  }, 150_000);

  test('TRUST_PROXY with a negative hop count ("-1")', async () => {
    expectNamedRefusal(await run({ TRUST_PROXY: '-1' }, 3000), 'TRUST_PROXY');
  }, 150_000);
});

describe('no silent stand-in for a value given', () => {
  // Node runs a timer above 2^31-1 ms after 1 ms (TimeoutOverflowWarning): the service must
  // refuse such a value, naming it, or honour it; never run every second's work every millisecond.
  const overflowing: ReadonlyArray<readonly [string, string]> = [
    ['SNAPSHOT_INTERVAL_SECONDS', String(3_000_000)], // 3e9 ms: a start snapshot every millisecond while anything is appended
    ['READ_YOUR_WRITES_TIMEOUT_MS', String(3_000_000_000)], // writes stop waiting for their projection after 1 ms
  ];
  test.each(overflowing)('%s=%s is refused naming it, or honoured (no TimeoutOverflowWarning)', async (name, value) => {
    const result = await run({ [name]: value, INTERNAL_API_KEYS: 'outside-crm-key' }, 2000, async (port) => {
      // A write, which appends and waits for its projection.
      const response = await fetch(`http://127.0.0.1:${port}/api/v1/auth/sync-customer`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-internal-api-key': 'outside-crm-key' },
        body: JSON.stringify({ id: 7001, first_name: 'Ada', last_name: 'L', email: 'ada-outside@example.com', active: true }),
      });
      expect(response.status).toBe(201);
      await response.text();
    });
    if (!result.running) expectNamedRefusal(result, name);
    else expect(result.output).not.toContain('TimeoutOverflowWarning');
  }, 150_000);

  test('INTERNAL_API_KEYS set to a list with no key in it (",,") is refused, not replaced by a generated key', async () => {
    // Today the service starts and logs "INTERNAL_API_KEYS not set: a generated key is kept in
    // the secrets file": the operator's CRM key list is silently swapped for one they never gave.
    expectNamedRefusal(await run({ INTERNAL_API_KEYS: ',,' }, 3000), 'INTERNAL_API_KEYS');
  }, 150_000);
});

test('a good value of each still starts (control)', async () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'hhc-outside-config-ok-'));
  const server = await startServerProcess({
    DATA_DIR: dataDir,
    TRUST_PROXY: 'loopback',
    SNAPSHOT_INTERVAL_SECONDS: '3600',
    READ_YOUR_WRITES_TIMEOUT_MS: '5000',
    INTERNAL_API_KEYS: 'k1',
  });
  try {
    const health = await fetch(`${server.baseUrl}/api/v1/health`);
    expect(await health.json()).toEqual({ status: 'ok', service: 'home-hub-cloud' });
  } finally {
    expect(await server.stop()).toBe(0);
    rmSync(dataDir, { recursive: true, force: true });
  }
}, 150_000);
