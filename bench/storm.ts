/**
 * `npm run bench:storm`: a reconnect storm, measured from outside. The service runs as in
 * production (`node dist/main.js`, embedded mode, its own DATA_DIR); BENCH_HUBS hubs (20,000)
 * run the hub client (`@home-hub-cloud/hub-client`, its default backoff and 60 s heartbeats)
 * in BENCH_WORKERS child processes (2). Then:
 *
 *   1. memory per idle hub socket: the service's RSS and V8 heap used before the hubs and
 *      after they are all connected and idle, divided by the hubs; BENCH_GC=1 also reads them
 *      after full GCs (the service runs with `--expose-gc` and bench/gc-probe.mjs, SIGWINCH);
 *      BENCH_HEAP_SNAPSHOT=1 also takes a heap snapshot of the service (SIGUSR2) and lists what
 *      the heap is made of (BENCH_KEEP_SNAPSHOTS=<dir> keeps the two snapshots there);
 *   2. kill -9, restart at once: time from the kill until `/health` answers and until an
 *      app's `GET /devices` answers, and until every hub is connected again and has had a
 *      heartbeat accepted; hubs that gave up; the app's `GET /devices` (one request at a time,
 *      every BENCH_APP_EVERY_MS, 20 ms) latency p50/p99/max and failures from the first
 *      answer until every hub is back.
 *
 * BENCH_MODE=distributed: two API processes (a private Redis, the EventStoreDB stand-in,
 * jongodb, as the tests use) behind a TCP balancer on one port; the process holding the hubs
 * is killed and not restarted: time until its hubs are all served by the other.
 *
 * Everything is on 127.0.0.1 and bounded (BENCH_TIMEOUT_SECONDS, 180, for each wait).
 * Figures: bench/README.md.
 */
import { fork, spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync } from 'node:fs';
import { Agent, get as httpGet } from 'node:http';
import { createServer, connect as netConnect, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { availableParallelism, tmpdir, loadavg } from 'node:os';
import { join, resolve } from 'node:path';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { createTokens } from '../src/auth/tokens';
import { createStateCache, handleCommand, newCommandContext, toNewEvents } from '../src/commands/handler';
import { createDeviceSnapshots } from '../src/commands/snapshots';
import { deviceDecider, type DeviceState } from '../src/domain/device';
import { deviceStream } from '../src/domain/events';
import { openEmbeddedEventStore } from '../src/infra/eventstore/embedded';
import type { EventStore } from '../src/infra/eventstore/port';
import { TIERS } from '../src/ratelimit/limiter';
import { heapOwners, ownerGrowth } from './heap-owners';
import { admissionTimeline, paceSetBy, type BusySecond, type PaceSetters } from './storm-timeline';

const ROOT = resolve(__dirname, '..');
const HUBS = Number(process.env.BENCH_HUBS ?? 20_000);
const WORKERS = Number(process.env.BENCH_WORKERS ?? 2);
const MODE = process.env.BENCH_MODE === 'distributed' ? 'distributed' : 'embedded';
const TIMEOUT_MS = Number(process.env.BENCH_TIMEOUT_SECONDS ?? 180) * 1000;
const APP_EVERY_MS = Number(process.env.BENCH_APP_EVERY_MS ?? 20);
const HEAP_SNAPSHOT = process.env.BENCH_HEAP_SNAPSHOT === '1';
const IDLE_MS = Number(process.env.BENCH_IDLE_SECONDS ?? 10) * 1000;
const DEVICES_PER_OWNER = 50;
/**
 * Presence changes in each device's history before the service starts (BENCH_HISTORY, 0):
 * that many offline/online pairs per device, written round after round over the whole fleet
 * as they happen in time, so one device's events lie far apart in the log. A fleet that has
 * run for months has dropped off and come back many times; its device streams are that long.
 */
const HISTORY = Number(process.env.BENCH_HISTORY ?? 0);
/** Extra Node options of the service (e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof`). */
const SERVICE_ARGS = (process.env.BENCH_SERVICE_ARGS ?? '').split(' ').filter((a) => a.length > 0);
/** Extra Node options of the embedded service started again after the kill only (e.g. `--cpu-prof`: a profile of the crash start and the storm alone). */
const RESTART_ARGS = (process.env.BENCH_RESTART_ARGS ?? '').split(' ').filter((a) => a.length > 0);
/** More of the service's environment, `NAME=value` separated by spaces (BENCH_SERVICE_ENV, none): e.g. `TUNNEL_HANDSHAKES_PER_SECOND=2000`. */
const SERVICE_ENV = Object.fromEntries(
  (process.env.BENCH_SERVICE_ENV ?? '')
    .split(' ')
    .filter((a) => a.includes('='))
    .map((a) => [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)]),
);
/** Extra Node options of the fleet's workers (e.g. `--cpu-prof --cpu-prof-dir=/tmp/fleet-prof`). */
const FLEET_ARGS = (process.env.BENCH_FLEET_ARGS ?? '').split(' ').filter((a) => a.length > 0);
/** `memory`: stop after the idle hubs are measured (the service gets SIGTERM: a CPU profile is written). */
const ONLY_MEMORY = process.env.BENCH_PHASES === 'memory';
/** `1`: the service runs with `--expose-gc` and bench/gc-probe.mjs; memory is read after full GCs (SIGWINCH). */
const GC_PROBE = process.env.BENCH_GC === '1';
/**
 * `1`: the service on the first CPU and the fleet's workers on the others (`taskset`), so that
 * the service's figures are not its own clients' starving it (on this 2-core machine: one core each).
 */
const PIN = process.env.BENCH_PIN === '1';
/** The compiled service to run (default `dist`): e.g. a copy built from another commit, to compare the two on the same machine. */
const DIST = resolve(ROOT, process.env.BENCH_DIST ?? 'dist');
const CPUS = availableParallelism();
const SERVICE_CPUS = '0';
const FLEET_CPUS = CPUS > 1 ? `1-${CPUS - 1}` : '0';
/** The cores the fleet has (pinned: all but the service's; else it shares all of them with the service). */
const FLEET_CORES = PIN && CPUS > 1 ? CPUS - 1 : CPUS;

/**
 * Says so when the fleet, not the service, set the pace (bench/storm-timeline.ts `paceSetBy`):
 * on a slower or busier machine the fleet's hubs run out of CPU and time out of connections the
 * service would have served, and the run's times are then the bench machine's.
 */
function warnIfFleetBound(phase: string, setters: PaceSetters): void {
  if (!setters.machineBound) return;
  console.log(
    `WARNING: in ${phase}, the service waited for CPU it was not given in ${setters.fleet + setters.crowded} of ${setters.seconds} seconds (the fleet out of CPU in ${setters.fleet}, every core busy with other work in ${setters.crowded}; the service busy in ${setters.service}): its times measure the bench machine, not the service. Fewer hubs, a slower ramp (BENCH_RAMP_PER_SECOND), a quiet or faster machine.`,
  );
}

/**
 * A fixed piece of work (JSON and SHA-256, one core), timed before the run: the same figure on
 * two machines says they are as fast, and a run's times can be read against it.
 */
function machineReferenceMs(): number {
  const started = performance.now();
  const item = { uuid: '4f7d1c1e-2b3a-4c5d-8e9f-0a1b2c3d4e5f', name: 'Living room hub', isOnline: true, lastSeenAt: '2026-11-28T00:00:00.000Z', metadata: { firmware: '1.2.3', rooms: [1, 2, 3] } };
  let digest = '';
  for (let i = 0; i < 100_000; i++) digest = createHash('sha256').update(JSON.stringify({ ...item, i, digest })).digest('hex');
  return Math.round(performance.now() - started);
}

const SECRETS = {
  JWT_ACCESS_SECRET: 'bench-access-secret-0123456789abcdef0123456789',
  JWT_REFRESH_SECRET: 'bench-refresh-secret-0123456789abcdef01234567',
  JWT_DEVICE_SECRET: 'bench-device-secret-0123456789abcdef0123456789',
  INTERNAL_API_KEYS: 'bench-crm-key',
};
const tokens = createTokens({ jwtAccessSecret: SECRETS.JWT_ACCESS_SECRET, jwtRefreshSecret: SECRETS.JWT_REFRESH_SECRET, jwtDeviceSecret: SECRETS.JWT_DEVICE_SECRET });
const GENEROUS = TIERS.map((tier) => `${tier}=100000000/60`).join(',');

import type { HubSpec, WorkerMessage, WorkerReport } from './storm-fleet';

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------------------
// The fleet's devices, written as events before the service starts (what registration writes)

async function prepare(eventStore: EventStore): Promise<{ hubs: HubSpec[]; owner: string }> {
  const hubs: HubSpec[] = [];
  const owners = Array.from({ length: Math.ceil(HUBS / DEVICES_PER_OWNER) }, () => randomUUID());
  const batch: Array<Promise<unknown>> = [];
  for (let i = 0; i < HUBS; i++) {
    const uuid = randomUUID();
    const id = randomUUID();
    const owner = owners[Math.floor(i / DEVICES_PER_OWNER)] ?? '';
    const now = new Date(Date.now() - HISTORY * 600_000 - 60_000).toISOString();
    const decided = deviceDecider.decide(
      { type: 'RegisterDevice', data: { id, uuid, deviceId: `HUB-${i}`, name: `Hub ${i}`, actorUserId: owner, linkId: randomUUID(), ownedDeviceCount: 0, maxDevicesPerUser: 100, now } },
      deviceDecider.initialState() as DeviceState,
    );
    batch.push(eventStore.append(deviceStream(uuid), toNewEvents(decided, newCommandContext({ type: 'user', id: owner }, randomUUID()), now), 'no_stream'));
    if (batch.length >= 500) await Promise.all(batch.splice(0));
    hubs.push({ uuid, token: tokens.signDevice({ sub: id, deviceUuid: uuid, gen: 0 }) });
  }
  await Promise.all(batch);
  // The history through the service's own command path (presence's commands, with snapshots and
  // a fold cache, as the expiry role writes it), an outage every ten minutes ending now.
  const snapshots = createDeviceSnapshots(eventStore);
  const cache = createStateCache<DeviceState>(HUBS);
  const context = newCommandContext({ type: 'system', id: 'presence-expiry' }, randomUUID());
  for (let round = 0; round < HISTORY; round++) {
    const online = Date.now() - (HISTORY - round) * 600_000;
    const heartbeatAt = new Date(online).toISOString();
    const offlineAt = new Date(online + 300_000).toISOString();
    const clock = { now: () => new Date(offlineAt) };
    for (const { uuid } of hubs) {
      batch.push(
        (async () => {
          await handleCommand(eventStore, deviceDecider, deviceStream(uuid), { type: 'ConfirmPresence', data: { uuid, heartbeatAt, now: heartbeatAt } }, context, clock, { cache, snapshots });
          await handleCommand(eventStore, deviceDecider, deviceStream(uuid), { type: 'MarkOffline', data: { uuid, lastHeartbeatAt: heartbeatAt, offlineAfterSeconds: 300, now: offlineAt } }, context, clock, { cache, snapshots });
        })(),
      );
      if (batch.length >= 500) await Promise.all(batch.splice(0));
    }
  }
  await Promise.all(batch);
  return { hubs, owner: owners[0] ?? '' };
}

// ---------------------------------------------------------------------------------------
// The service

interface Service {
  readonly child: ChildProcess;
  readonly port: number;
  readonly exited: Promise<void>;
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const { port } = server.address() as AddressInfo;
  await new Promise((r) => server.close(r));
  return port;
}

function startService(env: Record<string, string>, port: number, cwd: string, extraArgs: readonly string[] = []): Service {
  const probe = GC_PROBE ? ['--expose-gc', '--import', pathToFileURL(join(__dirname, 'gc-probe.mjs')).href] : [];
  const node = [process.execPath, '--heapsnapshot-signal=SIGUSR2', ...probe, ...SERVICE_ARGS, ...extraArgs, join(DIST, 'main.js')];
  // taskset execs node: the child's pid is the service's.
  const [command = process.execPath, ...args] = PIN ? ['taskset', '-c', SERVICE_CPUS, ...node] : node;
  const child = spawn(command, args, {
    cwd,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: 'warn', RATE_LIMITS: GENEROUS, MAX_DEVICES_PER_USER: '1000', ...SECRETS, ...SERVICE_ENV, ...env },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  return { child, port, exited };
}

let progress: (() => string) | null = null;

async function until<T>(what: string, check: () => Promise<T | undefined> | T | undefined, everyMs = 50): Promise<T> {
  const started = Date.now();
  const deadline = started + TIMEOUT_MS;
  let said = started;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${TIMEOUT_MS / 1000} s`);
    if (progress !== null && Date.now() - said >= 2000) {
      said = Date.now();
      console.log(`  ${what}: ${((said - started) / 1000).toFixed(0)} s, ${progress()}`);
    }
    await sleep(everyMs);
  }
}

async function answers(url: string, token?: string): Promise<boolean> {
  try {
    const res = await fetch(url, { headers: token === undefined ? {} : { Authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(2000) });
    await res.arrayBuffer();
    return res.status === 200;
  } catch {
    return false;
  }
}

function rssBytes(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1] ?? 0) * 1024;
}

/** CPU time (user + system) the process has used, seconds: what a busy machine's wall clock cannot say. */
/** Clock ticks a second, the unit of /proc's CPU times (proc(5): `sysconf(_SC_CLK_TCK)`, 100 on Linux). */
const CLOCK_TICKS = 100;

function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
  // utime and stime, fields 14 and 15 of proc(5).
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
}

async function heapUsedBytes(baseUrl: string): Promise<number> {
  const text = await (await fetch(`${baseUrl}/metrics`)).text();
  return Number(/^nodejs_heap_size_used_bytes(?:\{[^}]*\})? (\S+)/m.exec(text)?.[1] ?? NaN);
}

/** RSS and V8 heap used after full GCs in the service (bench/gc-probe.mjs); null without BENCH_GC=1. */
async function afterFullGc(service: Service, cwd: string): Promise<{ rss: number; heap: number; external: number } | null> {
  if (!GC_PROBE) return null;
  const file = join(cwd, 'memory-after-gc.json');
  rmSync(file, { force: true });
  service.child.kill('SIGWINCH');
  const read = await until('memory after a full GC', () => {
    try {
      return JSON.parse(readFileSync(file, 'utf8')) as { heapUsed: number; external: number };
    } catch {
      return undefined;
    }
  }, 100);
  // The RSS of the process itself (the probe's own figure is the same, read a moment earlier).
  return { rss: rssBytes(service.child.pid ?? 0), heap: read.heapUsed, external: read.external };
}

async function takeSnapshot(service: Service, cwd: string): Promise<string> {
  const known = new Set(readdirSync(cwd));
  service.child.kill('SIGUSR2');
  let last = -1;
  return until('heap snapshot', () => {
    const found = readdirSync(cwd).find((f) => f.endsWith('.heapsnapshot') && !known.has(f));
    if (found === undefined) return undefined;
    const size = statSync(join(cwd, found)).size;
    // Written when its size stops changing.
    if (size > 0 && size === last) return join(cwd, found);
    last = size;
    return undefined;
  }, 2000);
}

/** The heap of a snapshot (after the GC it forces), by constructor (or kind), largest first. */
function heapComposition(file: string): { total: number; byName: Map<string, { count: number; bytes: number }> } {
  const snapshot = JSON.parse(readFileSync(file, 'utf8')) as { snapshot: { meta: { node_fields: string[]; node_types: [string[]] } }; nodes: number[]; strings: string[] };
  const fields = snapshot.snapshot.meta.node_fields;
  const types = snapshot.snapshot.meta.node_types[0];
  const width = fields.length;
  const typeAt = fields.indexOf('type');
  const nameAt = fields.indexOf('name');
  const sizeAt = fields.indexOf('self_size');
  const byName = new Map<string, { count: number; bytes: number }>();
  let total = 0;
  for (let i = 0; i < snapshot.nodes.length; i += width) {
    total += snapshot.nodes[i + sizeAt] ?? 0;
    const type = types[snapshot.nodes[i + typeAt] ?? 0] ?? '?';
    const name = type === 'object' || type === 'closure' ? `${type === 'closure' ? 'closure ' : ''}${snapshot.strings[snapshot.nodes[i + nameAt] ?? 0] ?? '?'}` : `(${type})`;
    const entry = byName.get(name) ?? { count: 0, bytes: 0 };
    entry.count++;
    entry.bytes += snapshot.nodes[i + sizeAt] ?? 0;
    byName.set(name, entry);
  }
  return { total, byName };
}

/** What grew between two snapshots, per hub, largest first. */
function heapGrowth(before: ReturnType<typeof heapComposition>, after: ReturnType<typeof heapComposition>, hubs: number): Array<{ name: string; count: number; perHub: number }> {
  return [...after.byName.entries()]
    .map(([name, e]) => {
      const was = before.byName.get(name) ?? { count: 0, bytes: 0 };
      return { name, count: e.count - was.count, perHub: Math.round((e.bytes - was.bytes) / hubs) };
    })
    .sort((a, b) => b.perHub - a.perHub)
    .slice(0, 20);
}

function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? NaN;
}

// ---------------------------------------------------------------------------------------
// The run

interface Fleet {
  readonly workers: ChildProcess[];
  readonly reports: Map<ChildProcess, WorkerReport>;
  total(field: 'connected' | 'back' | 'beatsOk' | 'beatsFailed'): number;
  stopped(): Record<string, number>;
  refused(): Record<string, number>;
  causes(): Record<string, number>;
  mark(): void;
  stop(): Promise<void>;
}

function startFleet(baseUrl: string, hubs: readonly HubSpec[]): Fleet {
  const reports = new Map<ChildProcess, WorkerReport>();
  let stopping: Promise<void> | undefined;
  const workers = Array.from({ length: WORKERS }, (_, w) => {
    const worker = fork(join(__dirname, 'storm-fleet.ts'), [], { execArgv: ['--import', 'tsx', '--max-old-space-size=8192', ...FLEET_ARGS], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    // Every thread of the worker (V8's and libuv's too), and those it starts later.
    if (PIN && worker.pid !== undefined) spawn('taskset', ['-a', '-p', '-c', FLEET_CPUS, String(worker.pid)], { stdio: 'ignore' });
    worker.on('message', (message: WorkerReport) => reports.set(worker, message));
    worker.send({ kind: 'start', baseUrl, hubs: hubs.filter((_, i) => i % WORKERS === w), worker: w, workers: WORKERS } satisfies WorkerMessage);
    return worker;
  });
  progress = () => `connected ${[...reports.values()].reduce((n, r) => n + r.connected, 0)}, back ${[...reports.values()].reduce((n, r) => n + r.back, 0)}, reconnects ${[...reports.values()].reduce((n, r) => n + r.reconnects, 0)}, refused ${JSON.stringify(merge((r) => r.refused))}, causes ${JSON.stringify(merge((r) => r.causes))}, load ${loadavg()[0]?.toFixed(1) ?? '?'}`;
  const merge = (pick: (r: WorkerReport) => Record<string, number>): Record<string, number> => {
    const out: Record<string, number> = {};
    for (const r of reports.values()) for (const [k, v] of Object.entries(pick(r))) out[k] = (out[k] ?? 0) + v;
    return out;
  };
  return {
    workers,
    reports,
    total: (field) => [...reports.values()].reduce((sum, r) => sum + r[field], 0),
    stopped: () => merge((r) => r.stopped),
    refused: () => merge((r) => r.refused),
    causes: () => merge((r) => r.causes),
    mark: () => {
      reports.clear();
      for (const w of workers) w.send({ kind: 'mark' } satisfies WorkerMessage);
    },
    stop: () =>
      (stopping ??= Promise.all(
        workers.map((w) =>
          w.exitCode !== null || w.signalCode !== null
            ? undefined
            : new Promise<void>((r) => {
                w.once('exit', () => r());
                w.send({ kind: 'stop' } satisfies WorkerMessage);
              }),
        ),
      ).then(() => undefined)),
  };
}

/** The service's own count of `GET /devices` answers by duration (`http_request_duration_seconds`): how many took over 0.1, 0.5 and 1 s. */
async function serverDurations(baseUrl: string): Promise<Record<string, number> | null> {
  try {
    const text = await (await fetch(`${baseUrl}/metrics`, { signal: AbortSignal.timeout(5000) })).text();
    const bucket = (le: string): number => {
      const line = text.split('\n').find((l) => l.startsWith('http_request_duration_seconds_bucket{') && l.includes(`le="${le}"`) && /route="\/api\/v1\/devices\/?"/.test(l) && l.includes('method="GET"') && l.includes('status="200"'));
      return Number(line?.split(' ').at(-1) ?? NaN);
    };
    const all = bucket('+Inf');
    return { answered: all, over100ms: all - bucket('0.1'), over500ms: all - bucket('0.5'), over1s: all - bucket('1') };
  } catch {
    return null;
  }
}

/** CPU seconds the fleet's workers have used. */
/** CPU seconds every process of the machine has used (/proc/stat: all but idle and I/O wait). */
function machineCpuSeconds(): number {
  const fields = (readFileSync('/proc/stat', 'utf8').split('\n', 1)[0] ?? '').trim().split(/\s+/).slice(1).map(Number);
  const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0, steal = 0] = fields;
  return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS;
}

function fleetCpuSeconds(fleet: Fleet): number {
  return fleet.workers.reduce((sum, w) => sum + (w.pid !== undefined && w.exitCode === null ? cpuSeconds(w.pid) : 0), 0);
}

/** The restarted service's admission figures (`/metrics`), or null while it does not answer. */
async function admissionFigures(baseUrl: string): Promise<Record<string, number> | null> {
  try {
    const text = await (await fetch(`${baseUrl}/metrics`, { signal: AbortSignal.timeout(5000) })).text();
    const figures: Record<string, number> = {};
    for (const m of text.matchAll(/^tunnel_device_handshake(?:s_total|_admission)\{(?:outcome|measure)="(\w+)"[^}]*\} (\S+)$/gm)) figures[m[1] ?? ''] = Number(m[2]);
    // The event loop's delay since the last scrape (prom-client resets it at each).
    figures.lagMax = Number(/^nodejs_eventloop_lag_max_seconds(?:\{[^}]*\})? (\S+)$/m.exec(text)?.[1] ?? NaN);
    return figures;
  } catch {
    return null;
  }
}

/**
 * Second by second from `since`: the share of one core the service and the fleet used, the
 * hubs back, this process's longest loop delay (ms), and the service's admission (admitted,
 * refused, of which with the loop late, the window, the pace refused hubs were spread at and the
 * event loop's longest delay, ms), as `second:service%/fleet%/back b<delay>[a admitted r refused
 * l late w window p pace d delay q device handshakes waiting for their turn]`. A row without admission figures is a second whose scrape was
 * not answered within it: its admissions are in the next row that has them
 * (bench/storm-timeline.ts). Says who the storm waits for: a service idle while hubs are
 * missing waits for their backoff or bookings, or for a fleet that is out of CPU.
 */
function cpuTimeline(servicePid: () => number, fleet: Fleet, since: number, baseUrl: string): { stop(): { rows: string; busy: BusySecond[] } } {
  const busy: BusySecond[] = [];
  let machine = machineCpuSeconds();
  let service = 0;
  let clients = fleetCpuSeconds(fleet);
  let scraping = false;
  const timeline = admissionTimeline();
  // This process's own event loop: an app's request measured here is only as prompt as it is.
  const own = monitorEventLoopDelay({ resolution: 10 });
  own.enable();
  const timer = setInterval(() => {
    let now = 0;
    try {
      now = cpuSeconds(servicePid());
    } catch {
      // Not started yet, or gone.
    }
    const fleetNow = fleetCpuSeconds(fleet);
    const machineNow = machineCpuSeconds();
    const second = { service: Math.round((now - service) * 100), fleet: Math.round((fleetNow - clients) * 100), machine: Math.round((machineNow - machine) * 100) };
    machine = machineNow;
    // The first second's service figure counts from 0 (the process was not there yet).
    if (service > 0) busy.push(second);
    timeline.second(`${Math.round((Date.now() - since) / 1000)}:${second.service}/${second.fleet}/${fleet.total('back')}b${Math.round(own.max / 1e6)}`);
    own.reset();
    service = now;
    clients = fleetNow;
    // One scrape at a time: a busy service answers late, and its figures say what happened since the last.
    if (scraping) return;
    scraping = true;
    void admissionFigures(baseUrl).then((figures) => {
      scraping = false;
      if (figures !== null) timeline.scraped(figures);
    });
  }, 1000);
  return {
    stop: () => {
      clearInterval(timer);
      own.disable();
      return { rows: timeline.rows(), busy };
    },
  };
}

interface AppSample {
  readonly at: number;
  readonly ms: number;
  readonly status: number;
  /** Sent on a connection an earlier request used: no wait in the service's queue of connections to accept. */
  readonly reused: boolean;
}

/** `GET /devices?limit=20` once on a kept-alive connection (`node:http`: says whether the connection was new). */
function getDevices(baseUrl: string, accessToken: string, agent: Agent): Promise<{ status: number; reused: boolean }> {
  return new Promise((resolve) => {
    const req = httpGet(`${baseUrl}/api/v1/devices?limit=20`, { agent, headers: { Authorization: `Bearer ${accessToken}` }, timeout: 5000 }, (res) => {
      res.resume();
      res.once('end', () => resolve({ status: res.statusCode ?? 0, reused: req.reusedSocket }));
      res.once('error', () => resolve({ status: 0, reused: req.reusedSocket }));
    });
    req.once('timeout', () => req.destroy());
    req.once('error', () => resolve({ status: 0, reused: req.reusedSocket }));
  });
}

/** One request at a time, as an app polling its device list, on one kept-alive connection. */
function appLoop(baseUrl: string, accessToken: string): { stop(): Promise<AppSample[]> } {
  const samples: AppSample[] = [];
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  let running = true;
  const done = (async () => {
    while (running) {
      const t = performance.now();
      const { status, reused } = await getDevices(baseUrl, accessToken, agent);
      samples.push({ at: Date.now(), ms: performance.now() - t, status, reused });
      await sleep(APP_EVERY_MS);
    }
  })();
  return {
    stop: async () => {
      running = false;
      await done;
      agent.destroy();
      return samples;
    },
  };
}

async function embedded(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), 'hhc-storm-'));
  const cwd = mkdtempSync(join(tmpdir(), 'hhc-storm-cwd-'));
  // On failure too: no service or fleet is left behind.
  const cleanup: Array<() => unknown> = [];
  try {
    let t = performance.now();
    const store = await openEmbeddedEventStore(dataDir);
    const { hubs, owner } = await prepare(store);
    await store.close();
    console.log(`prepared ${HUBS} hubs in ${((performance.now() - t) / 1000).toFixed(1)} s`);
    const machineMs = machineReferenceMs();
    console.log(`machine: the reference work (bench/storm.ts machineReferenceMs) took ${machineMs} ms`);
    const accessToken = tokens.signAccess({ sub: owner, email: 'owner@example.com', role: 'user' });
    const port = await freePort();
    const baseUrl = `http://127.0.0.1:${port}`;
    const env = { DATA_DIR: dataDir };
    let service = startService(env, port, cwd);
    cleanup.push(() => service.child.kill('SIGKILL'));
    await until('first start', async () => ((await answers(`${baseUrl}/api/v1/devices?limit=20`, accessToken)) ? true : undefined));
    await sleep(3000);
    const before = { rss: rssBytes(service.child.pid ?? 0), heap: await heapUsedBytes(baseUrl) };
    const gcBefore = await afterFullGc(service, cwd);
    const snapshotBefore = HEAP_SNAPSHOT ? await takeSnapshot(service, cwd) : null;
    const heapBefore = snapshotBefore !== null ? heapComposition(snapshotBefore) : null;

    t = performance.now();
    const cpuBefore = cpuSeconds(service.child.pid ?? 0);
    const fleet = startFleet(baseUrl, hubs);
    cleanup.push(() => fleet.stop());
    const coldBusy = cpuTimeline(() => service.child.pid ?? 0, fleet, Date.now(), baseUrl);
    await until('every hub connected', () => (fleet.total('connected') >= HUBS ? true : undefined), 250);
    const connectCpuMsPerHub = ((cpuSeconds(service.child.pid ?? 0) - cpuBefore) * 1000) / HUBS;
    const coldPaceSetters = paceSetBy(coldBusy.stop().busy, FLEET_CORES, CPUS);
    warnIfFleetBound('the cold connect', coldPaceSetters);
    console.log(`${HUBS} hubs connected in ${((performance.now() - t) / 1000).toFixed(1)} s, service CPU ${connectCpuMsPerHub.toFixed(2)} ms per hub, load ${loadavg()[0]?.toFixed(1)} (refusals ${JSON.stringify(fleet.refused())}, reconnections ${JSON.stringify(fleet.causes())})`);
    await sleep(IDLE_MS);
    const after = { rss: rssBytes(service.child.pid ?? 0), heap: await heapUsedBytes(baseUrl) };
    const memory = {
      rssPerHubBytes: Math.round((after.rss - before.rss) / HUBS),
      heapPerHubBytes: Math.round((after.heap - before.heap) / HUBS),
      rssBeforeMiB: Math.round(before.rss / 2 ** 20),
      rssAfterMiB: Math.round(after.rss / 2 ** 20),
    };
    console.log(`memory per idle hub: RSS ${memory.rssPerHubBytes} B, heap ${memory.heapPerHubBytes} B (RSS ${memory.rssBeforeMiB} → ${memory.rssAfterMiB} MiB)`);
    const gcAfter = await afterFullGc(service, cwd);
    const afterGc =
      gcBefore !== null && gcAfter !== null
        ? {
            heapPerHubBytes: Math.round((gcAfter.heap - gcBefore.heap) / HUBS),
            rssPerHubBytes: Math.round((gcAfter.rss - gcBefore.rss) / HUBS),
            externalPerHubBytes: Math.round((gcAfter.external - gcBefore.external) / HUBS),
            heapBeforeMiB: Number((gcBefore.heap / 2 ** 20).toFixed(1)),
            heapAfterMiB: Number((gcAfter.heap / 2 ** 20).toFixed(1)),
          }
        : null;
    if (afterGc !== null) console.log(`after full GCs, per idle hub: heap ${afterGc.heapPerHubBytes} B, RSS ${afterGc.rssPerHubBytes} B, external ${afterGc.externalPerHubBytes} B (heap ${afterGc.heapBeforeMiB} → ${afterGc.heapAfterMiB} MiB)`);
    let heapSnapshotPerHub: number | null = null;
    if (heapBefore !== null) {
      const snapshotAfter = await takeSnapshot(service, cwd);
      const heapAfter = heapComposition(snapshotAfter);
      heapSnapshotPerHub = Math.round((heapAfter.total - heapBefore.total) / HUBS);
      console.log(`heap after GC (snapshots): ${heapSnapshotPerHub} B per hub; what grew, per hub:`);
      for (const row of heapGrowth(heapBefore, heapAfter, HUBS)) console.log(`  ${row.name.padEnd(48)} ${String(row.count).padStart(9)} objects  ${row.perHub} B/hub`);
      if (snapshotBefore !== null) {
        console.log('what grew, per hub, by the collection that holds it (bench/heap-owners.ts):');
        for (const row of ownerGrowth(heapOwners(snapshotBefore), heapOwners(snapshotAfter), HUBS).slice(0, 25)) console.log(`  ${row.owner.padEnd(60)} ${row.perHub} B/hub`);
      }
      // BENCH_KEEP_SNAPSHOTS=<dir>: the two snapshots are moved there for a closer look (retainers, in DevTools).
      const keep = process.env.BENCH_KEEP_SNAPSHOTS;
      for (const f of readdirSync(cwd).filter((f) => f.endsWith('.heapsnapshot'))) {
        if (keep !== undefined) renameSync(join(cwd, f), join(keep, f));
        else rmSync(join(cwd, f), { force: true });
      }
    }

    if (ONLY_MEMORY) {
      console.log(JSON.stringify({ mode: 'embedded', hubs: HUBS, machineMs, memory: { ...memory, heapSnapshotPerHubBytes: heapSnapshotPerHub, afterGc }, connectCpuMsPerHub: Number(connectCpuMsPerHub.toFixed(2)), coldPaceSetBy: coldPaceSetters, refusals: fleet.refused(), reconnections: fleet.causes(), loadavg: loadavg().map((l) => Number(l.toFixed(2))) }, null, 2));
      await fleet.stop();
      service.child.kill('SIGTERM');
      await service.exited;
      return;
    }

    // The storm.
    fleet.mark();
    const app = appLoop(baseUrl, accessToken);
    const killedAt = Date.now();
    service.child.kill('SIGKILL');
    await service.exited;
    service = startService(env, port, cwd, RESTART_ARGS);
    const restarted = service;
    const busy = cpuTimeline(() => restarted.child.pid ?? 0, fleet, killedAt, baseUrl);
    const health = await until('health after the kill', async () => ((await answers(`${baseUrl}/api/v1/health`)) ? Date.now() - killedAt : undefined), 20);
    // The restarted service's CPU from its first answer until every hub is back: the reconnections' cost, without the crash start.
    const cpuServing = cpuSeconds(service.child.pid ?? 0);
    const devices = await until('GET /devices after the kill', async () => ((await answers(`${baseUrl}/api/v1/devices?limit=20`, accessToken)) ? Date.now() - killedAt : undefined), 20);
    const fleetServing = fleetCpuSeconds(fleet);
    const allBack = await until('every hub back', () => (fleet.total('back') >= HUBS ? Date.now() - killedAt : undefined), 100);
    const reconnectCpuMsPerHub = ((cpuSeconds(service.child.pid ?? 0) - cpuServing) * 1000) / HUBS;
    const fleetReconnectCpuMsPerHub = ((fleetCpuSeconds(fleet) - fleetServing) * 1000) / HUBS;
    const { rows: timeline, busy: seconds } = busy.stop();
    const paceSetters = paceSetBy(seconds, FLEET_CORES, CPUS);
    warnIfFleetBound('the storm', paceSetters);
    const samples = await app.stop();
    const serverSide = await serverDurations(baseUrl);
    const beats = { acceptedSinceKill: fleet.total('beatsOk'), failedSinceKill: fleet.total('beatsFailed') };
    const firstOk = samples.find((s) => s.status === 200)?.at ?? Infinity;
    const served = samples.filter((s) => s.at >= firstOk);
    const sorted = served.filter((s) => s.status === 200).map((s) => s.ms).sort((a, b) => a - b);
    const result = {
      mode: 'embedded',
      hubs: HUBS,
      machineMs,
      memory: { ...memory, heapSnapshotPerHubBytes: heapSnapshotPerHub },
      connectCpuMsPerHub: Number(connectCpuMsPerHub.toFixed(2)),
      coldPaceSetBy: coldPaceSetters,
      healthAfterKillMs: health,
      devicesAfterKillMs: devices,
      allHubsBackAfterKillMs: allBack,
      reconnectCpuMsPerHub: Number(reconnectCpuMsPerHub.toFixed(2)),
      fleetReconnectCpuMsPerHub: Number(fleetReconnectCpuMsPerHub.toFixed(2)),
      timeline,
      paceSetBy: paceSetters,
      reconnections: fleet.causes(),
      gaveUp: fleet.stopped(),
      refusals: fleet.refused(),
      heartbeats: beats,
      appGetDevices: {
        // The five slowest: when each ended, seconds after the kill, and how long it took.
        slowest: served
          .filter((s) => s.status === 200)
          .sort((a, b) => b.ms - a.ms)
          .slice(0, 5)
          .map((s) => `${((s.at - killedAt) / 1000).toFixed(1)} s: ${Math.round(s.ms)} ms${s.reused ? '' : ', new connection'}`),
        newConnections: served.filter((s) => !s.reused).length,
        // What the service measured itself, from the request read to the answer written (the restarted process, every request).
        serverSide,
        requests: served.length, p50: Number(percentile(sorted, 50).toFixed(1)), p99: Number(percentile(sorted, 99).toFixed(1)), max: Number((sorted.at(-1) ?? NaN).toFixed(1)), failed: served.filter((s) => s.status !== 200).length, fiveHundreds: served.filter((s) => s.status >= 500).length },
      loadavg: loadavg().map((l) => Number(l.toFixed(2))),
    };
    console.log(JSON.stringify(result, null, 2));
    await fleet.stop();
    service.child.kill('SIGTERM');
    await service.exited;
  } finally {
    for (const step of cleanup.reverse()) await Promise.resolve(step()).catch(() => undefined);
    rmSync(dataDir, { recursive: true, force: true });
    rmSync(cwd, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------
// Distributed: two API processes behind a balancer; the one holding the hubs is killed

function balancer(backends: () => number[]): Promise<{ port: number; close(): void }> {
  let next = 0;
  const open = new Set<Socket>();
  const server = createServer((client) => {
    const live = backends();
    const port = live[next++ % Math.max(1, live.length)];
    if (port === undefined) {
      client.destroy();
      return;
    }
    const upstream = netConnect(port, '127.0.0.1');
    open.add(client);
    open.add(upstream);
    const end = (): void => {
      client.destroy();
      upstream.destroy();
      open.delete(client);
      open.delete(upstream);
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  return new Promise((r) =>
    server.listen(0, '127.0.0.1', () =>
      r({
        port: (server.address() as AddressInfo).port,
        close: () => {
          for (const s of open) s.destroy();
          server.close();
        },
      }),
    ),
  );
}

async function distributed(): Promise<void> {
  const { startStack } = await import('../test/support/stack');
  const stack = await startStack();
  const cwd = mkdtempSync(join(tmpdir(), 'hhc-storm-cwd-'));
  // On failure too: no service or fleet is left behind.
  const cleanup: Array<() => unknown> = [];
  try {
    const portA = await freePort();
    const portB = await freePort();
    // Distributed mode has no default secrets.
    const env = { ...stack.env, DATA_KEY_ENCRYPTION_KEY: 'bench-data-key-encryption-key-0123456789abcdef' };
    const a = startService(env, portA, cwd);
    cleanup.push(() => a.child.kill('SIGKILL'));
    await until('A', async () => ((await answers(`http://127.0.0.1:${portA}/api/v1/health/ready`)) ? true : undefined), 100);
    const b = startService({ ...env, ROLES: 'api' }, portB, cwd);
    cleanup.push(() => b.child.kill('SIGKILL'));
    await until('B', async () => ((await answers(`http://127.0.0.1:${portB}/api/v1/health/ready`)) ? true : undefined), 100);
    let live = [portA];
    const lb = await balancer(() => live);
    const baseUrl = `http://127.0.0.1:${lb.port}`;
    // Devices through the API (the stand-in event store is another process).
    const owner = randomUUID();
    const hubs: HubSpec[] = [];
    const t = performance.now();
    for (let i = 0; i < HUBS; i += 200) {
      const slice = Array.from({ length: Math.min(200, HUBS - i) }, (_, k) => i + k);
      hubs.push(
        ...(await Promise.all(
          slice.map(async (n) => {
            const sub = `${owner.slice(0, 24)}${String(Math.floor(n / DEVICES_PER_OWNER)).padStart(12, '0')}`;
            const user = tokens.signAccess({ sub, email: `o${Math.floor(n / DEVICES_PER_OWNER)}@example.com`, role: 'user' });
            const uuid = randomUUID();
            const headers = { Authorization: `Bearer ${user}`, 'Content-Type': 'application/json' };
            // A busy machine can make the read-your-writes wait answer 503: the same device again (409 then means it was registered).
            let reg = await fetch(`http://127.0.0.1:${portA}/api/v1/devices/register`, { method: 'POST', headers, body: JSON.stringify({ uuid, deviceId: `HUB-${n}`, name: `Hub ${n}` }) });
            for (let attempt = 0; reg.status === 503 && attempt < 5; attempt++) {
              await sleep(1000);
              reg = await fetch(`http://127.0.0.1:${portA}/api/v1/devices/register`, { method: 'POST', headers, body: JSON.stringify({ uuid, deviceId: `HUB-${n}`, name: `Hub ${n}` }) });
            }
            if (reg.status !== 201 && reg.status !== 409) throw new Error(`register answered ${reg.status}: ${await reg.text()}`);
            const issued = await fetch(`http://127.0.0.1:${portA}/api/v1/devices/auth/${uuid}`, { method: 'POST', headers });
            return { uuid, token: ((await issued.json()) as { token: string }).token };
          }),
        )),
      );
    }
    console.log(`registered ${HUBS} hubs in ${((performance.now() - t) / 1000).toFixed(1)} s`);
    const fleet = startFleet(baseUrl, hubs);
    cleanup.push(() => fleet.stop());
    await until('every hub connected to A', () => (fleet.total('connected') >= HUBS ? true : undefined), 250);
    live = [portA, portB];
    fleet.mark();
    const killedAt = Date.now();
    // What the handover cost: B's own CPU, and every process's (the stand-ins and the fleet share the machine).
    const survivorBefore = cpuSeconds(b.child.pid ?? 0);
    const machineBefore = machineCpuSeconds();
    a.child.kill('SIGKILL');
    await a.exited;
    live = [portB];
    const allBack = await until('every hub served by B', () => (fleet.total('back') >= HUBS ? Date.now() - killedAt : undefined), 100);
    const survivorCpuMsPerHub = Number((((cpuSeconds(b.child.pid ?? 0) - survivorBefore) * 1000) / HUBS).toFixed(2));
    const machineCpuMsPerHub = Number((((machineCpuSeconds() - machineBefore) * 1000) / HUBS).toFixed(2));
    console.log(
      JSON.stringify(
        { mode: 'distributed', hubs: HUBS, allHubsOnTheOtherAfterKillMs: allBack, survivorCpuMsPerHub, machineCpuMsPerHub, gaveUp: fleet.stopped(), refusals: fleet.refused(), loadavg: loadavg() },
        null,
        2,
      ),
    );
    await fleet.stop();
    lb.close();
    b.child.kill('SIGTERM');
    await b.exited;
  } finally {
    for (const step of cleanup.reverse()) await Promise.resolve(step()).catch(() => undefined);
    await stack.stop();
    rmSync(cwd, { recursive: true, force: true });
  }
}

(MODE === 'embedded' ? embedded() : distributed()).then(
    () => process.exit(0),
    (error: unknown) => {
      console.error(error);
      process.exit(1);
    },
  );
