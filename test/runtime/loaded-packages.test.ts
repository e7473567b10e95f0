import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EXTERNAL } from '../../scripts/bundle';
import { TEST_SECRETS } from '../support/server';
import { startStack, type Stack } from '../support/stack';

/**
 * What a start loads (bench/README.md, "Crash start"): embedded mode never loads the
 * distributed mode's drivers (they are a large part of loading the code, and a crash start
 * waits for it), nor the SMTP client before the first mail; distributed mode loads them when
 * it connects. Each start is a real process (test/support/loaded-packages.ts).
 */

const ROOT = join(__dirname, '..', '..');
const DISTRIBUTED_DRIVERS = ['bullmq', 'mongodb', '@eventstore/db-client', 'ioredis', '@socket.io/redis-adapter'];

function loadedPackages(env: Record<string, string>): Promise<string[]> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'test', 'support', 'loaded-packages.ts')], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', PORT: '0', HOST: '127.0.0.1', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  return new Promise((resolve, reject) => {
    child.once('exit', (code) => {
      const line = stdout.split('\n').find((text) => text.startsWith('{"packages"'));
      if (code !== 0 || line === undefined) reject(new Error(`exited with ${String(code)}:\n${stdout}\n${stderr}`));
      else resolve((JSON.parse(line) as { packages: string[] }).packages);
    });
  });
}

describe('packages loaded by a start', () => {
  const dirs: string[] = [];
  let stack: Stack | null = null;

  afterAll(async () => {
    await stack?.stop();
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  test('embedded: no distributed driver and no SMTP client, even with SMTP_URL set', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'hhc-loaded-'));
    dirs.push(dataDir);
    const packages = await loadedPackages({ DATA_DIR: dataDir, SMTP_URL: 'smtp://127.0.0.1:1' });
    // What it serves with is seen (the check sees what is loaded)…
    expect(packages).toEqual(expect.arrayContaining(['express', 'socket.io', 'zod']));
    // …and what it never uses is not.
    expect(packages.filter((name) => [...DISTRIBUTED_DRIVERS, 'nodemailer'].includes(name))).toEqual([]);
  }, 60_000);

  // The production bundle (scripts/bundle.ts) would otherwise carry them: Node reads and compiles the whole file at every start.
  test('the bundle leaves every distributed driver and the SMTP client out, to be loaded from node_modules when used', () => {
    expect(EXTERNAL).toEqual(expect.arrayContaining([...DISTRIBUTED_DRIVERS, 'nodemailer']));
  });

  test('distributed: the drivers are loaded when it connects', async () => {
    stack = await startStack();
    const packages = await loadedPackages({ ...stack.env, ...TEST_SECRETS });
    expect(packages).toEqual(expect.arrayContaining(DISTRIBUTED_DRIVERS));
    expect(packages).not.toContain('nodemailer');
  }, 120_000);
});
