/**
 * `npm run bench:longevity`: what years of running do to embedded mode.
 *
 * 1. Writes a realistic history straight into an embedded log (bench/longevity-history.ts):
 *    BENCH_HUBS (100) hubs for BENCH_DAYS (90) days, a heartbeat every 45 s with outages,
 *    renames, IP changes and logins: about 17 million events at the defaults. The days end
 *    now, so the retention (7 days) finds most heartbeats expired.
 * 2. Bytes on disk in DATA_DIR, before and after reclaiming expired heartbeats (the store's
 *    `reclaimExpired()`).
 * 3. Ready time of the service on that DATA_DIR: from spawning the process to the first 200
 *    of GET /api/v1/health/ready, without a start snapshot (full replay) and with one (the
 *    one the previous run wrote at shutdown); the same on an empty log. BENCH_RUNS (3) runs
 *    each, the median reported, with the events the start applied (from its log).
 *
 * The service runs as `npm start` runs it: `node dist/main.js`, built first (`npm run build`).
 * Ready times include loading the modules; the empty log shows that fixed part. Next to them,
 * from the service's own log: how long the projector took to catch up and how many events
 * it applied, and how long loading the snapshot took (the parts that grow with history).
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openEmbeddedEventStore } from '../src/infra/eventstore/embedded';
import { SNAPSHOT_FILE_NAME } from '../src/runtime/snapshot';
import { HEARTBEAT_SECONDS, writeHistory, type HistoryCounts } from './longevity-history';
import { median } from './stats';

const DAYS = Number(process.env.BENCH_DAYS ?? 90);
const HUBS = Number(process.env.BENCH_HUBS ?? 100);
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const ROOT = join(__dirname, '..');
const READY_TIMEOUT_MS = 30 * 60_000;

/** Every byte under the directory (the log may be one file or a folder of segments). */
function bytesOnDisk(dir: string): number {
  let total = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    total += entry.isDirectory() ? bytesOnDisk(path) : statSync(path).size;
  }
  return total;
}

const mb = (bytes: number): string => `${(bytes / 1_048_576).toFixed(1)} MB`;
const seconds = (ms: number): string => `${(ms / 1000).toFixed(2)} s`;

async function buildHistory(dir: string): Promise<HistoryCounts> {
  let clock = Date.now() - DAYS * 86_400_000;
  const store = await openEmbeddedEventStore(dir, { now: () => clock });
  const started = Date.now();
  let reported = 0;
  try {
    const counts = await writeHistory(store, {
      hubs: HUBS,
      days: DAYS,
      start: clock,
      setClock: (ms) => (clock = Math.max(clock, ms)),
      onProgress: (events, hours) => {
        if (events - reported < 1_000_000) return;
        reported = events;
        console.log(`  ${events} events, ${(hours / 24).toFixed(1)} days, ${((Date.now() - started) / 1000).toFixed(0)} s`);
      },
    });
    console.log(`history: ${counts.events} events written in ${((Date.now() - started) / 1000).toFixed(1)} s (${JSON.stringify(counts)})`);
    return counts;
  } finally {
    await store.close();
  }
}

/** How long opening the log takes (it is part of every start, snapshot or not). */
async function timedOpen(dir: string): Promise<number> {
  const started = performance.now();
  const store = await openEmbeddedEventStore(dir);
  const ms = performance.now() - started;
  await store.close();
  return ms;
}

async function reclaim(dir: string): Promise<string> {
  const store = await openEmbeddedEventStore(dir);
  try {
    const started = Date.now();
    const result = await store.reclaimExpired();
    return `${result.eventsReclaimed} events reclaimed, ${result.segmentsCompacted} segments compacted in ${seconds(Date.now() - started)} (store: ${mb(result.bytesBefore)} → ${mb(result.bytesAfter)})`;
  } finally {
    await store.close();
  }
}

interface Start {
  readonly readyMs: number;
  /** Events the projector applied at start, and in how long (from its "caught up" log line). */
  readonly applied: number | null;
  readonly catchUpMs: number | null;
  /** How long reading and checking the snapshot took (from its "loaded" log line). */
  readonly snapshotMs: number | null;
  readonly snapshot: 'loaded' | 'none' | 'unusable';
}

/** A number field of the first log line with this message. */
function logged(output: string, msg: string, field: string): number | null {
  const line = output.split('\n').find((l) => l.includes(`"msg":"${msg}`));
  const value = line === undefined ? undefined : new RegExp(`"${field}":(\\d+)`).exec(line)?.[1];
  return value === undefined ? null : Number(value);
}

/** Spawns the service on the directory, waits for ready, stops it with SIGTERM (which writes the shutdown snapshot). */
async function timedStart(dir: string): Promise<Start> {
  const started = performance.now();
  const child = spawn(process.execPath, [join(ROOT, 'dist', 'main.js')], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', DATA_DIR: dir, PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  try {
    const readyMs = await pollReady(() => output, started);
    const snapshot = output.includes('start snapshot: loaded') ? 'loaded' : output.includes('start snapshot: none') ? 'none' : 'unusable';
    return {
      readyMs,
      applied: logged(output, 'projector caught up', 'eventsApplied'),
      catchUpMs: logged(output, 'projector caught up', 'ms'),
      snapshotMs: logged(output, 'start snapshot: loaded', 'ms'),
      snapshot,
    };
  } finally {
    child.kill('SIGTERM');
    await exited;
  }
}

async function pollReady(output: () => string, started: number): Promise<number> {
  let port: number | null = null;
  for (;;) {
    if (performance.now() - started > READY_TIMEOUT_MS) throw new Error(`not ready in time:\n${output()}`);
    port ??= Number(/"port":(\d+)[^\n]*"msg":"service started"/.exec(output())?.[1] ?? Number.NaN) || null;
    if (port !== null) {
      const res = await fetch(`http://127.0.0.1:${port}/api/v1/health/ready`).catch(() => null);
      if (res !== null) {
        await res.body?.cancel();
        if (res.status === 200) return performance.now() - started;
      }
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** RUNS starts without a snapshot and RUNS with the one the previous start wrote, alternating. */
async function readyTimes(dir: string): Promise<{ cold: Start[]; warm: Start[] }> {
  const cold: Start[] = [];
  const warm: Start[] = [];
  for (let run = 0; run < RUNS; run++) {
    rmSync(join(dir, SNAPSHOT_FILE_NAME), { force: true });
    cold.push(await timedStart(dir));
    warm.push(await timedStart(dir));
  }
  return { cold, warm };
}

function row(label: string, starts: readonly Start[]): string {
  const times = starts.map((s) => s.readyMs);
  const list = (values: ReadonlyArray<number | null>): string => values.map((v) => v ?? 'n/a').join(', ');
  const snapshots = [...new Set(starts.map((s) => s.snapshot))].join('/');
  return (
    `| ${label} | ${seconds(median(times))} | ${times.map((t) => seconds(t)).join(', ')} | ${list(starts.map((s) => s.applied))} | ` +
    `${list(starts.map((s) => s.catchUpMs))} | ${snapshots} | ${list(starts.map((s) => s.snapshotMs))} |`
  );
}

async function main(): Promise<void> {
  console.log('building the service (npm run build)');
  const build = spawnSync('npm', ['run', 'build', '--silent'], { cwd: ROOT, stdio: 'inherit' });
  if (build.status !== 0) throw new Error('npm run build failed');
  const work = mkdtempSync(join(tmpdir(), 'hhc-bench-longevity-'));
  try {
    const dir = join(work, 'history');
    console.log(`writing ${HUBS} hubs x ${DAYS} days (heartbeat every ${HEARTBEAT_SECONDS} s) into ${dir}`);
    const counts = await buildHistory(dir);
    const before = bytesOnDisk(dir);
    const reclaimed = await reclaim(dir);
    const after = bytesOnDisk(dir);
    const openMs = await timedOpen(dir);
    const history = await readyTimes(dir);
    const empty = join(work, 'empty');
    const emptyTimes = await readyTimes(empty);

    console.log('\n| | |\n| --- | --- |');
    console.log(`| history | ${HUBS} hubs × ${DAYS} days: ${counts.events} events (${counts.heartbeats} heartbeats, ${counts.transitions} online/offline transitions, ${counts.renames} renames, ${counts.logins} logins) |`);
    console.log(`| bytes on disk before reclamation | ${mb(before)} (${(before / counts.events).toFixed(0)} bytes per event) |`);
    console.log(`| reclamation | ${reclaimed} |`);
    console.log(`| bytes on disk after reclamation | ${mb(after)} |`);
    console.log(`| opening the log (in the benchmark process) | ${seconds(openMs)} |`);
    console.log(
      `\n| start | ready (median of ${RUNS}) | runs | events applied at start | projector catch-up ms | snapshot | snapshot load ms |\n| --- | ---: | --- | --- | --- | --- | --- |`,
    );
    console.log(row(`history (${counts.events} events), no snapshot`, history.cold));
    console.log(row('history, with snapshot', history.warm));
    console.log(row('empty log, no snapshot', emptyTimes.cold));
    console.log(row('empty log, with snapshot', emptyTimes.warm));
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
