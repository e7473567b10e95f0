/**
 * kill -9 in the middle of an erasure (embedded mode), restart, and look at what is left.
 * Usage: npx tsc -p tsconfig.build.json && DIST=dist/main.js npx tsx test/review/kill9-erasure.ts [trials] [fromMs] [toMs]
 * Prints, per trial, the delay of the kill and what the restarted service shows: the person
 * present or erased, how many of their devices survived, whether their data keys and their
 * e-mail are still on disk, and whether a retried erase-customer finishes the job.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createTokens } from '../../src/auth/tokens';
import { TEST_SECRETS } from '../support/server';

const DIST = process.env.DIST ?? '/tmp/r28-dist/main.js';
const PORT = 39_000 + Math.floor(Math.random() * 1000);
const BASE = `http://127.0.0.1:${PORT}/api/v1`;
const KEY = 'test-crm-key-1';
const { DATA_KEY_ENCRYPTION_KEY: _kek, ...SECRETS } = TEST_SECRETS;
const tokens = createTokens({ jwtAccessSecret: SECRETS.JWT_ACCESS_SECRET, jwtRefreshSecret: SECRETS.JWT_REFRESH_SECRET, jwtDeviceSecret: SECRETS.JWT_DEVICE_SECRET });

function start(dir: string): ChildProcess {
  return spawn(process.execPath, [DIST], {
    env: { ...process.env, ...SECRETS, DATA_DIR: dir, PORT: String(PORT), HOST: '127.0.0.1', LOG_LEVEL: 'warn', RATE_LIMITS: 'sync=100000/60,register=100000/60,general=100000/60,auth=100000/60' },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
}

async function ready(): Promise<void> {
  for (let i = 0; i < 300; i++) {
    try {
      if ((await fetch(`${BASE}/health/ready`)).status === 200) return;
    } catch {
      // not yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('not ready');
}

async function call(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: unknown }> {
  const res = await fetch(`${BASE}${path}`, { method, headers: { ...(body !== undefined ? { 'Content-Type': 'application/json' } : {}), ...headers }, ...(body !== undefined ? { body: JSON.stringify(body) } : {}) });
  const text = await res.text();
  return { status: res.status, body: text.length > 0 ? JSON.parse(text) : null };
}

async function stopHard(child: ChildProcess): Promise<void> {
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGKILL');
  await exited;
}

async function trial(delayMs: number): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'hhc-kill9-'));
  let child = start(dir);
  try {
    await ready();
    const syncId = 100 + Math.floor(Math.random() * 1e6);
    const email = `kill9.${randomUUID().slice(0, 8)}@example.net`;
    const synced = await call('POST', '/auth/sync-customer', { id: syncId, first_name: 'Killnine', last_name: 'Person', email, active: true }, { 'X-Internal-Api-Key': KEY });
    const userId = (synced.body as { user: { id: string } }).user.id;
    const token = tokens.signAccess({ sub: userId, email, role: 'user' });
    const auth = { Authorization: `Bearer ${token}` };
    const devices: string[] = [];
    for (let i = 0; i < 8; i++) {
      const uuid = randomUUID();
      await call('POST', '/devices/register', { uuid, deviceId: `K-${i}`, name: `Killnine hub ${i}` }, auth);
      devices.push(uuid);
    }
    const erasing = call('POST', '/auth/erase-customer', { id: syncId }, { 'X-Internal-Api-Key': KEY }).catch(() => ({ status: 0, body: null }));
    await new Promise((r) => setTimeout(r, delayMs));
    await stopHard(child);
    const answered = (await erasing).status;

    child = start(dir);
    await ready();
    const me = await call('GET', '/users/me', undefined, auth);
    const list = me.status === 200 ? ((await call('GET', '/devices?limit=100', undefined, auth)).body as { meta: { total: number } }).meta.total : null;
    const keysLeft = (): number => {
      const credentials = readFileSync(join(dir, 'credentials.jsonl'), 'utf8');
      return [`user:${userId}`, ...devices.map((d) => `device:${d}`)].filter((s) => credentials.includes(`"${s}"`)).length;
    };
    const emailOnDisk = (): string[] =>
      readdirSync(dir).filter((f) => {
        try {
          return readFileSync(join(dir, f)).includes(Buffer.from(email));
        } catch {
          return false; // renamed or removed meanwhile
        }
      });
    const state = me.status === 200 ? `present, devices ${list}/8` : `erased (GET /users/me ${me.status})`;
    const before = `keys left ${keysLeft()}/9, e-mail in ${JSON.stringify(emailOnDisk())}`;
    const retry = await call('POST', '/auth/erase-customer', { id: syncId }, { 'X-Internal-Api-Key': KEY });
    const after = `retry ${retry.status} -> keys left ${keysLeft()}/9, e-mail in ${JSON.stringify(emailOnDisk())}`;
    return `kill after ${delayMs} ms (erase answered ${answered}): ${state}; ${before}; ${after}`;
  } finally {
    await stopHard(child).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const trials = Number(process.argv[2] ?? 12);
  const from = Number(process.argv[3] ?? 0);
  const to = Number(process.argv[4] ?? 60);
  for (let i = 0; i < trials; i++) console.log(await trial(Math.floor(from + (i / trials) * (to - from))));
}
main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
