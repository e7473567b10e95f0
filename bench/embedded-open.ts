/**
 * `npm run bench:embedded-open`: how long the embedded event store takes to open a long
 * log, which must not grow with the history (the store reads index checkpoints of sealed
 * segments and scans only the active one).
 *
 * Writes BENCH_EVENTS events (5,000,000) with appendHistory into a temporary DATA_DIR:
 * BENCH_HUBS hubs (1,000) sending heartbeats every 30 s, none of them expired (the worst
 * case: every event stays in the index), with a device event every 100 heartbeats. Then
 * opens the store BENCH_RUNS times (5), each in a fresh process as a service start does,
 * and reports the median and the slowest open,
 * bytes on disk and bytes per event; and the same for an empty log. With BENCH_DIR the
 * history is written there (or reused, if that directory holds a log already) and kept.
 *
 * BENCH_CRASH=1: a crash open instead. The history (BENCH_EVENTS, 40,000 by default: one
 * active segment of about 7 MB) is appended by a process that then exits without closing
 * the store (as kill -9 leaves it: no record of a clean close), and each timed open also
 * exits without closing, so every run opens the same crashed log. BENCH_COMPARE=<dir>: each
 * run also opens that crashed log (alternating, so both see the same machine load), e.g.
 * one written by an earlier version, without the active segment's checkpoint.
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openEmbeddedEventStore, type HistoricalAppend } from '../src/infra/eventstore/embedded';
import type { NewEvent } from '../src/infra/eventstore/port';

const CRASH = process.env.BENCH_CRASH === '1';
const EVENTS = Number(process.env.BENCH_EVENTS ?? (CRASH ? 40_000 : 5_000_000));
const HUBS = Number(process.env.BENCH_HUBS ?? 1_000);
const RUNS = Number(process.env.BENCH_RUNS ?? 5);
/** Appends per appendHistory call; a crash history is written in smaller group commits, as a running service writes. */
const BATCH = CRASH ? 500 : 5_000;
const HEARTBEAT_EVERY_MS = 30_000;

function event(type: string, at: number, data: unknown, actorId: string): NewEvent {
  const requestId = randomUUID();
  const metadata = { occurredAt: new Date(at).toISOString(), actor: { type: 'device' as const, id: actorId }, requestId, causationId: randomUUID(), correlationId: requestId };
  return { id: randomUUID(), type, data, metadata };
}

function batchOf(hubs: readonly string[], from: number, count: number, start: number): HistoricalAppend[] {
  const appends: HistoricalAppend[] = [];
  for (let i = from; i < from + count; i++) {
    const hub = hubs[i % hubs.length] as string;
    const at = start + Math.floor(i / hubs.length) * HEARTBEAT_EVERY_MS;
    const receivedAt = new Date(at).toISOString();
    const isDeviceEvent = i % 100 === 99;
    appends.push({
      streamName: isDeviceEvent ? `device-${hub}` : `heartbeat-${hub}`,
      events: [isDeviceEvent ? event('DeviceUpdated', at, { uuid: hub, name: `hub ${i}`, now: receivedAt }, hub) : event('HeartbeatReceived', at, { uuid: hub, receivedAt }, hub)],
      writtenAt: at,
    });
  }
  return appends;
}

async function writeHistory(dir: string): Promise<void> {
  const hubs = Array.from({ length: HUBS }, () => randomUUID());
  const span = Math.ceil(EVENTS / HUBS) * HEARTBEAT_EVERY_MS;
  const start = Date.now() - span;
  const store = await openEmbeddedEventStore(dir, { reclaimIntervalMs: 0 });
  for (const hub of hubs) await store.setStreamMaxAge(`heartbeat-${hub}`, 7 * 86_400 + span / 1000);
  const began = performance.now();
  for (let written = 0; written < EVENTS; written += BATCH) {
    await store.appendHistory(batchOf(hubs, written, Math.min(BATCH, EVENTS - written), start));
    if (written % 500_000 === 0 && written > 0) process.stdout.write(`  ${written} events written\n`);
  }
  process.stdout.write(`wrote ${EVENTS} events in ${((performance.now() - began) / 1000).toFixed(1)} s\n`);
  // A crash: the process ends with the store open (the kernel releases its lock).
  if (CRASH) process.exit(0);
  await store.close();
}

function bytesOnDisk(dir: string): { log: number; checkpoints: number; active: number } {
  let log = 0;
  let checkpoints = 0;
  const logs: string[] = [];
  for (const name of readdirSync(dir)) {
    const size = statSync(join(dir, name)).size;
    if (name.endsWith('.log')) {
      log += size;
      logs.push(name);
    } else if (name.endsWith('.idx')) checkpoints += size;
  }
  // Segment names sort by base (events.log, the first, before events-<base>.log).
  const last = logs.sort((a, b) => (a === 'events.log' ? -1 : b === 'events.log' ? 1 : a.localeCompare(b))).at(-1);
  return { log, checkpoints, active: last === undefined ? 0 : statSync(join(dir, last)).size };
}

interface OpenTime {
  readonly wallMs: number;
  /** CPU time of the opening process meanwhile (user + system): steadier than wall time on a loaded machine. */
  readonly cpuMs: number;
}

/** One open in a fresh process, as a service start does it (cold code, nothing cached in memory). */
function openInFreshProcess(dir: string): OpenTime {
  const output = execFileSync(process.execPath, ['--import', 'tsx', __filename, '--open-once', dir], { encoding: 'utf8', env: process.env });
  const [wallMs, cpuMs] = (output.trim().split('\n').at(-1) ?? '').split(' ').map(Number);
  return { wallMs: wallMs ?? Number.NaN, cpuMs: cpuMs ?? Number.NaN };
}

async function openTimes(dir: string, compare?: { dir: string; times: OpenTime[] }): Promise<OpenTime[]> {
  const times: OpenTime[] = [];
  for (let run = 0; run < RUNS; run++) {
    times.push(openInFreshProcess(dir));
    if (compare !== undefined) compare.times.push(openInFreshProcess(compare.dir));
  }
  return times;
}

async function openOnce(dir: string): Promise<void> {
  const began = performance.now();
  const cpu = process.cpuUsage();
  const store = await openEmbeddedEventStore(dir, { reclaimIntervalMs: 0 });
  const elapsed = performance.now() - began;
  const used = process.cpuUsage(cpu);
  process.stdout.write(`${elapsed} ${(used.user + used.system) / 1000}\n`);
  // Left as a crash leaves it, for the next run.
  if (CRASH) process.exit(0);
  await store.close();
}

function report(label: string, times: readonly OpenTime[]): void {
  const wall = times.map((t) => t.wallMs).sort((a, b) => a - b);
  const cpu = times.map((t) => t.cpuMs).sort((a, b) => a - b);
  const median = (sorted: number[]): number => sorted[Math.floor(sorted.length / 2)] ?? 0;
  process.stdout.write(
    `${label}: open median ${median(wall).toFixed(0)} ms, slowest ${(wall.at(-1) ?? 0).toFixed(0)} ms; CPU median ${median(cpu).toFixed(0)} ms (${times.length} runs)\n`,
  );
}

async function main(): Promise<void> {
  const empty = mkdtempSync(join(tmpdir(), 'hhc-bench-open-empty-'));
  const kept = process.env.BENCH_DIR;
  const dir = kept ?? mkdtempSync(join(tmpdir(), 'hhc-bench-open-'));
  try {
    report('empty log', await openTimes(empty));
    if (kept === undefined || !existsSync(join(kept, 'events.log'))) {
      mkdirSync(dir, { recursive: true });
      if (CRASH) execFileSync(process.execPath, ['--import', 'tsx', __filename, '--write-crashed', dir], { stdio: 'inherit', env: process.env });
      else await writeHistory(dir);
    }
    const { log, checkpoints, active } = bytesOnDisk(dir);
    process.stdout.write(
      `log ${(log / 1e6).toFixed(1)} MB (${(log / EVENTS).toFixed(0)} bytes per event), active segment ${(active / 1e6).toFixed(1)} MB, index checkpoints ${(checkpoints / 1e6).toFixed(1)} MB\n`,
    );
    const compareDir = process.env.BENCH_COMPARE;
    const compare = compareDir === undefined ? undefined : { dir: compareDir, times: [] };
    report(`${CRASH ? 'crash open, ' : ''}${kept === undefined ? `${EVENTS} events` : `the history in ${dir}`}`, await openTimes(dir, compare));
    if (compare !== undefined) report(`${CRASH ? 'crash open, ' : ''}the history in ${compare.dir}`, compare.times);
  } finally {
    rmSync(empty, { recursive: true, force: true });
    if (kept === undefined) rmSync(dir, { recursive: true, force: true });
  }
}

const onceAt = process.argv.indexOf('--open-once');
const writeAt = process.argv.indexOf('--write-crashed');
const run = onceAt !== -1 ? openOnce(process.argv[onceAt + 1] ?? '') : writeAt !== -1 ? writeHistory(process.argv[writeAt + 1] ?? '') : main();
run.catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
