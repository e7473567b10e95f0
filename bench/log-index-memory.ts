/**
 * The embedded log's in-memory index per stream (src/infra/eventstore/embedded/stream-index.ts)
 * against the entries it replaced (a PositionList of its own per stream, kept below as it was,
 * for this comparison only): heap per stream, the time to build the index from segment
 * tables (what an open does) and to push positions (what appends do). Rounds alternate the
 * two; each time is taken in a fresh process (what ran before in a process changes how V8
 * compiles the loops).
 *
 *   npm run bench:log-index-memory     (BENCH_STREAMS=20000 BENCH_ROUNDS=5 BENCH_LONG=5000)
 *
 * - heap per stream: BENCH_STREAMS streams of 1, 2 and 4 positions, the index built from one
 *   table as an open does, or by pushes as appends do (the streams' names made beforehand);
 * - after an open of two segments: each stream's older half in a sealed segment's table, the
 *   rest in the active one's, each table with its own copies of the names (as decoded from
 *   two checkpoints); what stays is the index and the active table, names included;
 * - time: one build from tables in a fresh process, as an open does it (ns per record), for
 *   those streams and for 1,000 streams of BENCH_LONG positions (a log of 5,000,000
 *   heartbeats); pushes round by round over the streams (ns per push, median of 5 passes).
 *
 * Heap figures need `--expose-gc` (the script sets it for itself through NODE_OPTIONS).
 */
import { execFileSync } from 'node:child_process';
import { LogIndex } from '../src/infra/eventstore/embedded/log-index';
import { SegmentTable } from '../src/infra/eventstore/embedded/segment-table';

const STREAMS = Number(process.env.BENCH_STREAMS ?? 20_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const LONG = Number(process.env.BENCH_LONG ?? 5_000);
const LONG_STREAMS = 1_000;
const SIZES = [1, 2, 4] as const;

const gc = (globalThis as { gc?: () => void }).gc;

function heapUsed(): number {
  gc?.();
  gc?.();
  return process.memoryUsage().heapUsed;
}

// ---- The entries before: a PositionList (object, Float64Array, ArrayBuffer) per stream. ----

class OldPositionList {
  private items: Float64Array;
  private start = 0;
  private end = 0;

  constructor(capacity = 4) {
    this.items = new Float64Array(capacity);
  }

  get length(): number {
    return this.end - this.start;
  }

  at(index: number): number | undefined {
    return index >= 0 && index < this.length ? this.items[this.start + index] : undefined;
  }

  push(value: number): void {
    if (this.end === this.items.length) this.grow(1);
    this.items[this.end++] = value;
  }

  reserve(extra: number): void {
    if (this.end + extra > this.items.length) this.grow(extra);
  }

  private grow(extra: number): void {
    const live = this.items.subarray(this.start, this.end);
    const next = new Float64Array(Math.max(8, live.length * 2, live.length + extra));
    next.set(live);
    this.items = next;
    this.end = live.length;
    this.start = 0;
  }
}

interface OldStreamIndex {
  firstRevision: number;
  readonly positions: OldPositionList;
  durableCount: number;
}

/** LogIndex's streams and applyTables as they were (without the checks of a gap: there is none here). */
class OldLogIndex {
  readonly streams = new Map<string, OldStreamIndex>();
  lastWrittenAt = 0;

  stream(streamName: string): OldStreamIndex {
    let stream = this.streams.get(streamName);
    if (stream === undefined) {
      stream = { firstRevision: 0, positions: new OldPositionList(), durableCount: 0 };
      this.streams.set(streamName, stream);
    }
    return stream;
  }

  applyTables(tables: ReadonlyArray<{ readonly table: SegmentTable; readonly file: string }>): void {
    const streamsOf = tables.map(({ table }) => table.names.map((name) => this.stream(name)));
    const counts = new Map<OldStreamIndex, number>();
    for (const [t, { table }] of tables.entries()) {
      const perRef = new Uint32Array(table.names.length);
      for (let i = 0; i < table.count; i++) perRef[table.refs[i] as number]++;
      for (const [ref, stream] of (streamsOf[t] as OldStreamIndex[]).entries()) counts.set(stream, (counts.get(stream) ?? 0) + (perRef[ref] ?? 0));
    }
    for (const [stream, count] of counts) stream.positions.reserve(count);
    for (const [t, { table }] of tables.entries()) this.applyRecords(table, streamsOf[t] as OldStreamIndex[]);
  }

  private applyRecords(table: SegmentTable, streams: readonly OldStreamIndex[]): void {
    const { refs, revisions, offsets, base } = table;
    const lists = streams.map((stream) => stream.positions);
    const next = Float64Array.from(streams, (stream) => stream.firstRevision + stream.positions.length);
    for (let i = 0; i < table.count; i++) {
      const ref = refs[i] as number;
      const revision = revisions[i] as number;
      if (revision !== next[ref]) throw new Error(`revision ${revision} of ref ${ref}: a gap`);
      next[ref] = revision + 1;
      (lists[ref] as OldPositionList).push(base + (offsets[i] as number));
    }
    for (const stream of streams) stream.durableCount = stream.positions.length;
    this.lastWrittenAt = Math.max(this.lastWrittenAt, table.lastWrittenAt);
  }
}

// ---- The two, side by side. ----

interface Index {
  applyTables(tables: ReadonlyArray<{ readonly table: SegmentTable; readonly file: string }>): void;
  push(streamName: string, position: number): void;
}

const subjects = {
  before: (): Index => {
    const index = new OldLogIndex();
    return { applyTables: (tables) => index.applyTables(tables), push: (name, position) => index.stream(name).positions.push(position) };
  },
  after: (): Index => {
    const index = new LogIndex();
    return { applyTables: (tables) => index.applyTables(tables), push: (name, position) => index.stream(name).push(position) };
  },
};
type Subject = keyof typeof subjects;

/** A name as an open decodes it from a checkpoint: a flat string of its own. */
const decoded = (name: string): string => Buffer.from(name, 'utf8').toString('utf8');

function streamNames(count: number): string[] {
  return Array.from({ length: count }, (_, i) => decoded(`heartbeat-00000000-0000-4000-8000-${String(i).padStart(12, '0')}`));
}

/**
 * A segment table as a checkpoint loads it: revisions `from` to `to` (excluded) of every
 * stream, round by round (streams interleave in the log), 200 bytes a record.
 */
function tableOf(names: readonly string[], from: number, to: number, base: number): { table: SegmentTable; file: string } {
  const count = names.length * (to - from);
  const table = new SegmentTable(base, 64);
  const refs = new Uint32Array(count);
  const revisions = new Float64Array(count);
  const offsets = new Float64Array(count);
  let i = 0;
  for (let revision = from; revision < to; revision++) {
    for (let ref = 0; ref < names.length; ref++, i++) {
      refs[i] = ref;
      revisions[i] = revision;
      offsets[i] = 64 + i * 200;
    }
  }
  for (const name of names) table.addName(name);
  table.fill({ refs, revisions, offsets, fileOffsets: new Float64Array(0) }, count);
  table.lastWrittenAt = 1_700_000_000_000;
  return { table, file: `events-${base}.log` };
}

/** Heap bytes per stream of the index built from one table (the table and the names made before). */
function heapFromTable(subject: Subject, positions: number): number {
  const tables = [tableOf(streamNames(STREAMS), 0, positions, 0)];
  const before = heapUsed();
  const index = subjects[subject]();
  index.applyTables(tables);
  const after = heapUsed();
  keep(index, tables);
  return (after - before) / STREAMS;
}

/** Heap bytes per stream of the index built by pushes (the names made before). */
function heapFromPushes(subject: Subject, positions: number): number {
  const names = streamNames(STREAMS);
  const before = heapUsed();
  const index = subjects[subject]();
  for (let revision = 0; revision < positions; revision++) for (const [i, name] of names.entries()) index.push(name, (revision * STREAMS + i) * 200);
  const after = heapUsed();
  keep(index, names);
  return (after - before) / STREAMS;
}

/** Heap bytes per stream of what an open of two segments keeps: the index and the active table, names included. */
function heapAfterTwoSegments(subject: Subject, positions: number): number {
  const before = heapUsed();
  const sealedHalf = Math.floor(positions / 2);
  const active = tableOf(streamNames(STREAMS), sealedHalf, positions, 1e9);
  const index = subjects[subject]();
  index.applyTables([tableOf(streamNames(STREAMS), 0, sealedHalf, 0), active]);
  const after = heapUsed();
  keep(index, active);
  return (after - before) / STREAMS;
}

/** Nanoseconds per record of building an index from the tables. */
function timeBuild(subject: Subject, tables: ReadonlyArray<{ table: SegmentTable; file: string }>): number {
  const records = tables.reduce((sum, { table }) => sum + table.count, 0);
  const started = process.hrtime.bigint();
  subjects[subject]().applyTables(tables);
  return Number(process.hrtime.bigint() - started) / records;
}

/** Nanoseconds per push of `positions` pushes to each stream of a new index, round by round. */
function timePushes(subject: Subject, names: readonly string[], positions: number): number {
  const started = process.hrtime.bigint();
  const index = subjects[subject]();
  for (let revision = 0; revision < positions; revision++) for (const [i, name] of names.entries()) index.push(name, (revision * names.length + i) * 200);
  return Number(process.hrtime.bigint() - started) / (names.length * positions);
}

const kept: unknown[] = [];
/** Holds what was measured until it was measured (cleared after). */
function keep(...values: unknown[]): void {
  kept.push(...values);
  kept.length = 0;
}

const median = (xs: readonly number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;

function medianOf(measure: (subject: Subject) => number): Record<Subject, number> {
  const runs: Record<Subject, number[]> = { before: [], after: [] };
  for (let round = 0; round < ROUNDS; round++) {
    runs.before.push(measure('before'));
    runs.after.push(measure('after'));
  }
  return { before: median(runs.before), after: median(runs.after) };
}

/** The timed cases, each run in a process of its own: `build` or `push`, and positions per stream (`long`: LONG_STREAMS of LONG). */
function timeCase(subject: Subject, kind: string, size: string): number {
  const [streams, positions] = size === 'long' ? [LONG_STREAMS, LONG] : [STREAMS, Number(size)];
  const names = streamNames(streams);
  if (kind === 'build') return timeBuild(subject, [tableOf(names, 0, positions, 0)]);
  const passes = Array.from({ length: 5 }, () => timePushes(subject, names, positions));
  return median(passes);
}

function timeInFreshProcess(subject: Subject, kind: string, size: string): number {
  const output = execFileSync(process.execPath, ['--import', 'tsx', __filename, '--time', subject, kind, size], { encoding: 'utf8', env: process.env });
  return Number(output.trim().split('\n').at(-1));
}

function main(): void {
  if (gc === undefined) console.log('(no --expose-gc: heap figures include garbage)');
  const rows: Array<[string, Record<Subject, number>, string]> = [];
  for (const positions of SIZES) rows.push([`heap per stream, ${positions} position(s), from a table`, medianOf((s) => heapFromTable(s, positions)), 'B']);
  for (const positions of SIZES) rows.push([`heap per stream, ${positions} position(s), by pushes`, medianOf((s) => heapFromPushes(s, positions)), 'B']);
  for (const positions of [2, 4]) {
    rows.push([`kept after an open of two segments, ${positions} positions (names, active table, index)`, medianOf((s) => heapAfterTwoSegments(s, positions)), 'B']);
  }
  for (const size of [...SIZES.map(String), 'long']) {
    const label = size === 'long' ? `${LONG_STREAMS} streams of ${LONG}` : `${STREAMS} streams of ${size}`;
    rows.push([`build from a table (one, fresh process), ${label}`, medianOf((s) => timeInFreshProcess(s, 'build', size)), 'ns/record']);
  }
  for (const size of [...SIZES.map(String), 'long']) {
    const label = size === 'long' ? `${LONG_STREAMS} streams of ${LONG}` : `${STREAMS} streams of ${size}`;
    rows.push([`push, ${label}`, medianOf((s) => timeInFreshProcess(s, 'push', size)), 'ns/push']);
  }

  console.log(`\n${STREAMS} streams, medians of ${ROUNDS} rounds (before and after alternating), Node ${process.versions.node}\n`);
  console.log('| | before | after | after / before |');
  console.log('| --- | ---: | ---: | ---: |');
  for (const [label, { before, after }, unit] of rows) {
    const digits = unit === 'B' ? 0 : 1;
    console.log(`| ${label} | ${before.toFixed(digits)} ${unit} | ${after.toFixed(digits)} ${unit} | ${(after / before).toFixed(2)} |`);
  }
}

const timeAt = process.argv.indexOf('--time');
if (timeAt === -1) main();
else {
  const [subject, kind, size] = process.argv.slice(timeAt + 1);
  process.stdout.write(`${timeCase(subject as Subject, kind ?? 'build', size ?? '1')}\n`);
}
