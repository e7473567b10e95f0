/**
 * A crash start of the embedded service, measured: fills a DATA_DIR through the API (DEVICES
 * hubs over USERS accounts, each with a token and HEARTBEATS heartbeats), kills the service
 * with SIGKILL and starts it again, then prints the time to `service started` and to
 * `/health/ready` and when each start log line arrived (ms after the spawn).
 *
 *   npm run build && DIST=1 npx tsx bench/crash-start.ts
 *
 * DIST=1 runs the compiled service (as in production; else through tsx). PROF=<dir> writes a
 * CPU profile of the restarted process there (node --cpu-prof). KEEP=<dir> keeps a copy of the
 * crashed DATA_DIR; DATA_FROM=<dir> restarts on a copy of one instead of filling a new one.
 * SNAPSHOT_INTERVAL_SECONDS, SNAPSHOT_EVERY_EVENTS and WAIT_MS (a pause before the kill)
 * choose whether a start snapshot covers the events at the crash. RUNS=<n> restarts n times, each on a fresh copy of
 * the crashed DATA_DIR, and prints the medians; MAIN=<file> runs another compiled entry point
 * (another build of the service) instead of dist/main.js; BENCH_SERVICE_ARGS, Node options for
 * the restarted process (space-separated). INTERLEAVE=1 registers every hub
 * first, then sends the heartbeats in rounds over all hubs, as a fleet's heartbeats arrive
 * (each device's events are then spread over the whole log, not next to each other).
 *
 * Each restart also polls `GET /devices` as the first account (kept in the DATA_DIR as
 * `bench-user.json` by the fill) and prints when it first answered 200 (`devicesMs`).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createTokens } from '../src/auth/tokens';

const ROOT = join(__dirname, '..');
const DEVICES = Number(process.env.DEVICES ?? 3000);
const HEARTBEATS = Number(process.env.HEARTBEATS ?? 3);
const USERS = Number(process.env.USERS ?? 30);
const DIST = process.env.DIST === '1';
const INTERLEAVE = process.env.INTERLEAVE === '1';
/** The account a restart reads its devices as (written by the fill). */
const BENCH_USER = 'bench-user.json';
const LIMITS = ['login', 'refresh', 'auth', 'sync', 'register', 'heartbeat', 'general'].map((tier) => `${tier}=10000000/60`).join(',');

interface Running {
  readonly child: ChildProcess;
  readonly port: number;
  readonly lines: { readonly at: number; readonly entry: Record<string, unknown> }[];
  readonly spawnedAt: number;
  readonly startedAt: number;
  /** CPU time (user + system, every thread) the process had used when it logged `service started`; null off Linux. */
  readonly cpuMs: number | null;
}

/** From /proc (Linux): less at the mercy of a busy machine than wall time. */
function cpuMsOf(pid: number | undefined): number | null {
  try {
    const fields = readFileSync(`/proc/${String(pid)}/stat`, 'utf8').replace(/^.*\) /, '').split(' ');
    // utime and stime, fields 14 and 15 of stat (11 and 12 after the command), in ticks of 10 ms.
    return (Number(fields[11]) + Number(fields[12])) * 10;
  } catch {
    return null;
  }
}

function start(dataDir: string, nodeArgs: string[], env: Record<string, string>): Promise<Running> {
  const entry = DIST ? [process.env.MAIN ?? join(ROOT, 'dist', 'main.js')] : ['--import', 'tsx', join(ROOT, 'src', 'main.ts')];
  const spawnedAt = Date.now();
  const child = spawn(process.execPath, [...nodeArgs, ...entry], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', DATA_DIR: dataDir, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', RATE_LIMITS: LIMITS, ...env },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines: Running['lines'] = [];
  let buffered = '';
  return new Promise((resolve, reject) => {
    child.stdout?.on('data', (chunk: Buffer) => {
      buffered += chunk.toString();
      const complete = buffered.split('\n');
      buffered = complete.pop() ?? '';
      for (const line of complete) {
        let parsed: Record<string, unknown>;
        try {
          parsed = JSON.parse(line) as Record<string, unknown>;
        } catch {
          continue;
        }
        lines.push({ at: Date.now(), entry: parsed });
        if (parsed.msg === 'service started') resolve({ child, port: parsed.port as number, lines, spawnedAt, startedAt: Date.now(), cpuMs: cpuMsOf(child.pid) });
      }
    });
    child.once('exit', (code) => reject(new Error(`the service exited with ${String(code)}`)));
  });
}

async function call(base: string, method: string, path: string, options: { token?: string; body?: unknown; headers?: Record<string, string> } = {}): Promise<{ status: number; body: unknown }> {
  const res = await fetch(`${base}/api/v1${path}`, {
    method,
    headers: { 'Content-Type': 'application/json', ...(options.token !== undefined ? { Authorization: `Bearer ${options.token}` } : {}), ...options.headers },
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
  });
  return { status: res.status, body: await res.json().catch(() => null) };
}

async function inParallel<T>(items: readonly T[], width: number, work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < items.length) await work(items[next++] as T);
    }),
  );
}

async function fill(dataDir: string): Promise<void> {
  const service = await start(dataDir, [], {
    SNAPSHOT_INTERVAL_SECONDS: process.env.SNAPSHOT_INTERVAL_SECONDS ?? '300',
    ...(process.env.SNAPSHOT_EVERY_EVENTS !== undefined ? { SNAPSHOT_EVERY_EVENTS: process.env.SNAPSHOT_EVERY_EVENTS } : {}),
  });
  const base = `http://127.0.0.1:${service.port}`;
  const secrets = JSON.parse(readFileSync(join(dataDir, 'secrets.json'), 'utf8')) as Parameters<typeof createTokens>[0] & { internalApiKeys: string[] };
  const tokens = createTokens(secrets);
  const users: { token: string }[] = [];
  let first: { id: string; email: string } | undefined;
  for (let u = 0; u < USERS; u++) {
    const synced = await call(base, 'POST', '/auth/sync-customer', {
      headers: { 'X-Internal-Api-Key': secrets.internalApiKeys[0] ?? '' },
      body: { id: 1000 + u, first_name: 'Bench', last_name: `${u}`, email: `bench.${u}@example.com`, active: true },
    });
    const user = (synced.body as { user: { id: string; email: string } }).user;
    users.push({ token: tokens.signAccess({ sub: user.id, email: user.email, role: 'user' }) });
    first ??= user;
  }
  writeFileSync(join(dataDir, BENCH_USER), JSON.stringify({ id: first?.id, email: first?.email }));
  const started = Date.now();
  const devices = Array.from({ length: DEVICES }, (_, i) => ({ uuid: randomUUID(), owner: users[i % USERS] as { token: string } }));
  const hubTokens = new Map<string, string>();
  const beat = async (uuid: string): Promise<void> => {
    const answer = await call(base, 'POST', `/devices/heartbeat/${uuid}`, { token: hubTokens.get(uuid), body: {} });
    if (answer.status >= 300) throw new Error(`heartbeat answered ${answer.status}`);
  };
  await inParallel(devices, 16, async ({ uuid, owner }) => {
    const registered = await call(base, 'POST', '/devices/register', { token: owner.token, body: { uuid, deviceId: `HUB-${uuid.slice(0, 8)}`, name: 'Hub' } });
    if (registered.status !== 201) throw new Error(`register answered ${registered.status}`);
    hubTokens.set(uuid, ((await call(base, 'POST', `/devices/auth/${uuid}`, { token: owner.token })).body as { token: string }).token);
    if (!INTERLEAVE) for (let h = 0; h < HEARTBEATS; h++) await beat(uuid);
  });
  if (INTERLEAVE) for (let h = 0; h < HEARTBEATS; h++) await inParallel(devices, 16, ({ uuid }) => beat(uuid));
  console.error(`filled: ${DEVICES} devices × ${HEARTBEATS} heartbeats in ${Date.now() - started} ms`);
  await new Promise((done) => setTimeout(done, Number(process.env.WAIT_MS ?? 0)));
  console.error(`start snapshots written before the crash: ${service.lines.filter((line) => line.entry.msg === 'start snapshot written').length}`);
  const killedAt = Date.now();
  service.child.kill('SIGKILL');
  await new Promise((done) => service.child.once('exit', done));
  // What a supervisor waits for before it can start the service again (the restart's times count from its spawn).
  console.error(`kill → exit: ${Date.now() - killedAt} ms`);
  if (process.env.KEEP !== undefined) cpSync(dataDir, process.env.KEEP, { recursive: true });
}

interface Restarted {
  readonly startedMs: number;
  readonly readyMs: number;
  /** The first `GET /devices` answered 200; null without a saved account. */
  readonly devicesMs: number | null;
  readonly cpuMs: number | null;
}

/** Polls until `ok` answers true (every 20 ms); the time it did, in ms after `since`. */
async function firstOk(since: number, ok: () => Promise<boolean>): Promise<number> {
  for (;;) {
    if (await ok().catch(() => false)) return Date.now() - since;
    await new Promise((done) => setTimeout(done, 20));
  }
}

/** A signed access token of the fill's first account, or null when the DATA_DIR has none saved. */
function benchUserToken(dataDir: string): string | null {
  let saved: { id?: string; email?: string };
  try {
    saved = JSON.parse(readFileSync(join(dataDir, BENCH_USER), 'utf8')) as { id?: string; email?: string };
  } catch {
    return null;
  }
  if (saved.id === undefined || saved.email === undefined) return null;
  const secrets = JSON.parse(readFileSync(join(dataDir, 'secrets.json'), 'utf8')) as Parameters<typeof createTokens>[0];
  return createTokens(secrets).signAccess({ sub: saved.id, email: saved.email, role: 'user' });
}

async function restart(dataDir: string): Promise<Restarted> {
  const profile = process.env.PROF !== undefined ? ['--cpu-prof', '--cpu-prof-dir', process.env.PROF] : [];
  // Node options of the restarted service (as bench/storm.ts takes them), e.g. V8 heap flags.
  const extra = (process.env.BENCH_SERVICE_ARGS ?? '').split(' ').filter((arg) => arg.length > 0);
  const token = benchUserToken(dataDir);
  const service = await start(dataDir, [...extra, ...profile], {});
  const base = `http://127.0.0.1:${service.port}`;
  const [readyMs, devicesMs] = await Promise.all([
    firstOk(service.spawnedAt, async () => (await fetch(`${base}/api/v1/health/ready`)).status === 200),
    token === null ? null : firstOk(service.spawnedAt, async () => (await call(base, 'GET', '/devices?limit=20', { token })).status === 200),
  ]);
  // The snapshot a start writes once it serves, when it applied anything (its time and size).
  for (let waited = 0; waited < 30_000 && !service.lines.some((line) => line.entry.msg === 'start snapshot written'); waited += 100) {
    await new Promise((done) => setTimeout(done, 100));
  }
  console.log(JSON.stringify({ build: DIST ? 'dist' : 'tsx', startedMs: service.startedAt - service.spawnedAt, readyMs, devicesMs, cpuMs: service.cpuMs }));
  for (const { at, entry } of service.lines) {
    const { msg, time, level, pid, hostname, service: name, ...rest } = entry;
    void [time, level, pid, hostname, name];
    console.log(`${String(at - service.spawnedAt).padStart(6)} ms  ${String(msg)}  ${JSON.stringify(rest).slice(0, 160)}`);
  }
  // A clean stop (the CPU profile is written at exit); each run has a copy of the crashed DATA_DIR of its own.
  service.child.kill('SIGTERM');
  await new Promise((done) => service.child.once('exit', done));
  return { startedMs: service.startedAt - service.spawnedAt, readyMs, devicesMs, cpuMs: service.cpuMs };
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? NaN;
}

async function main(): Promise<void> {
  // Node loads its fetch on the first call: not in the time of the first readiness poll.
  await fetch('http://127.0.0.1:1').catch(() => null);
  const crashed = mkdtempSync(join(tmpdir(), 'hhc-crash-start-'));
  if (process.env.DATA_FROM !== undefined) cpSync(process.env.DATA_FROM, crashed, { recursive: true });
  else await fill(crashed);
  const runs: Restarted[] = [];
  for (let run = 0; run < Number(process.env.RUNS ?? 1); run++) {
    const dataDir = mkdtempSync(join(tmpdir(), 'hhc-crash-start-'));
    cpSync(crashed, dataDir, { recursive: true });
    runs.push(await restart(dataDir));
    rmSync(dataDir, { recursive: true, force: true });
  }
  const started = median(runs.map((run) => run.startedMs));
  const ready = median(runs.map((run) => run.readyMs));
  const cpu = median(runs.map((run) => run.cpuMs ?? NaN));
  const devices = median(runs.map((run) => run.devicesMs ?? NaN));
  console.log(
    JSON.stringify({ runs: runs.length, medianStartedMs: started, medianReadyMs: ready, medianDevicesMs: devices, medianCpuMs: cpu, readyOverGoal: Number((ready / 3000).toFixed(2)) }),
  );
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
