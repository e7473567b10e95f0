/**
 * Deterministic simulation of the embedded event store (in the spirit of FoundationDB's
 * simulation testing and TigerBeetle's VOPR): the real engine runs on SimFs (sim-fs.ts),
 * an in-memory file system with seeded faults and crashes, under a seeded workload and a
 * fake clock, and is checked after every step against a reference model fed only what the
 * store acknowledged.
 *
 * A run is a list of operations generated from the seed; each operation draws its own
 * choices (and the file system's faults while it runs) from its own sub-seed, so a run
 * can be replayed with operations left out: that is how a violation is shrunk to a short
 * history (shrink()).
 *
 * What is checked (a violation stops the run):
 *   - every acknowledged event is read back at its revision, with its id, type and data,
 *     and its append's last event at the position the append answered;
 *   - an append that failed or was under way at a crash is, after it, either whole or
 *     absent (and once seen, it stays);
 *   - a subscription from a checkpoint delivers each event after it once, in log order,
 *     and misses only what retention allows;
 *   - reclamation removes only heartbeats written before now − $maxAge, never a stream's
 *     newest; reads hide exactly those;
 *   - damage (a flipped bit in a sealed segment, an index checkpoint, the active segment
 *     after a clean stop, also one on a full disk right after a failed write) is refused
 *     with an error naming the file and the byte, or repaired from the log; never served,
 *     never cut as a torn tail; a flipped bit in the close file is ignored;
 *   - after a write failure the store refuses appends with a "store unavailable" error, and
 *     accepts them again once the fault is gone; it opens on a full disk (read-only).
 */
import { openEmbeddedEventStore, type EmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import { type AppendResult, type ExpectedRevision, type NewEvent, type RecordedEvent, WrongExpectedRevisionError } from '../../src/infra/eventstore/port';
import { Rng } from './rng';
import { NO_FAULTS, SimFs, type Faults } from './sim-fs';

const DIRECTORY = '/sim/data';
const DAY = 24 * 60 * 60 * 1000;
/** The close file (close-file.ts), named here so that the workload also runs against engines without one. */
const CLOSE_FILE_NAME = 'close.rec';

export type OpKind = 'append' | 'appendMany' | 'read' | 'subscribe' | 'clock' | 'reclaim' | 'crash' | 'restart' | 'fault' | 'heal' | 'bitflip';

export interface Op {
  readonly kind: OpKind;
  readonly seed: number;
}

const WEIGHTS: ReadonlyArray<readonly [OpKind, number]> = [
  ['append', 30],
  ['appendMany', 14],
  ['read', 14],
  ['subscribe', 5],
  ['clock', 8],
  ['reclaim', 6],
  ['crash', 2],
  ['restart', 1],
  ['fault', 5],
  ['heal', 4],
  ['bitflip', 1],
];

export function generateOps(seed: number, count: number): Op[] {
  const rng = new Rng(seed);
  const total = WEIGHTS.reduce((sum, [, weight]) => sum + weight, 0);
  const ops: Op[] = [];
  for (let i = 0; i < count; i++) {
    let roll = rng.int(total);
    let kind: OpKind = 'append';
    for (const [candidate, weight] of WEIGHTS) {
      if (roll < weight) {
        kind = candidate;
        break;
      }
      roll -= weight;
    }
    ops.push({ kind, seed: rng.seed() });
  }
  return ops;
}

export class Violation extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'Violation';
  }
}

interface ModelEvent {
  readonly id: string;
  readonly stream: string;
  readonly revision: number;
  readonly type: string;
  readonly data: string;
  readonly writtenAt: number;
  /** Position of the last event of the append this event came with. */
  appendLast: bigint;
  /** Order of the append in the log (for subscription order). */
  readonly order: number;
}

interface Uncertain {
  readonly stream: string;
  readonly events: readonly NewEvent[];
  readonly writtenAt: number;
}

export interface SimResult {
  readonly seed: number;
  readonly ops: number;
  readonly crashes: number;
  readonly reopens: number;
  readonly appendsAcknowledged: number;
  readonly appendsFailed: number;
  readonly eventsReclaimed: number;
  /** Clean stops on a full disk after a failed write whose damaged last record the next start refused. */
  readonly fullDiskStopsRefused: number;
  readonly faults: ReadonlyMap<string, number>;
  readonly violation: { readonly step: number; readonly message: string } | null;
  /** One line per operation executed (the last is the one that failed, on a violation). */
  readonly history: readonly string[];
}

function hex(rng: Rng, digits: number): string {
  let out = '';
  for (let i = 0; i < digits; i++) out += '0123456789abcdef'[rng.int(16)];
  return out;
}

function uuid(rng: Rng): string {
  return `${hex(rng, 8)}-${hex(rng, 4)}-4${hex(rng, 3)}-8${hex(rng, 3)}-${hex(rng, 12)}`;
}

function isStoreUnavailable(error: unknown): boolean {
  return error instanceof Error && (error.name === 'EventStoreUnavailableError' || /unavailable|write failed|read-only/i.test(error.message));
}

function message(error: unknown): string {
  return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
}

/** An error that refuses damage must say where: the file and the byte. */
function namesFileAndOffset(error: unknown): boolean {
  return error instanceof Error && /events[-\w]*\.log/.test(error.message) && /byte \d+/.test(error.message);
}

class World {
  readonly fs: SimFs;
  private store: EmbeddedEventStore | null = null;
  private clock = Date.UTC(2030, 0, 1);
  private readonly model = new Map<string, ModelEvent[]>();
  /** Every event of the model in log order. */
  private readonly log: ModelEvent[] = [];
  private readonly maxAge = new Map<string, number>();
  private readonly uncertain: Uncertain[] = [];
  private order = 0;
  private faultOpsLeft = 0;
  /** A write failed while faults were on: appends may be refused until one succeeds after the faults are gone. */
  private failedSinceHeal = false;
  /** Appends refused after the faults were gone (the store must recover within a few). */
  private refusedAfterHeal = 0;
  private readonly deviceStreams: string[] = [];
  private readonly heartbeatStreams: string[] = [];
  private step = 0;
  private rng: Rng;
  readonly stats = { crashes: 0, reopens: 0, appendsAcknowledged: 0, appendsFailed: 0, eventsReclaimed: 0, fullDiskStopsRefused: 0 };
  readonly history: string[] = [];

  constructor(seed: number) {
    this.rng = new Rng(seed);
    this.fs = new SimFs(new Rng(seed ^ 0x5bd1e995));
  }

  private note(line: string): void {
    this.history.push(`#${this.step} ${line}`);
  }

  private async open(): Promise<void> {
    this.store = await openEmbeddedEventStore(DIRECTORY, {
      io: this.fs,
      lock: async () => async () => undefined,
      now: () => this.clock,
      reclaimIntervalMs: 0,
      segmentBytes: 3000,
      // Several checkpoints of the active segment per segment, so crash opens start from them.
      checkpointBytes: 700,
      log: () => undefined,
      onTornTail: () => undefined,
    });
    this.stats.reopens++;
  }

  private get live(): EmbeddedEventStore {
    if (this.store === null) throw new Violation('no store open');
    return this.store;
  }

  async start(): Promise<void> {
    await this.fs.mkdir(DIRECTORY);
    await this.open();
  }

  async run(op: Op, step: number): Promise<void> {
    this.step = step;
    this.rng = new Rng(op.seed);
    this.fs.rng = new Rng(op.seed ^ 0x27d4eb2f);
    if (this.faultOpsLeft > 0 && --this.faultOpsLeft === 0) this.heal();
    switch (op.kind) {
      case 'append':
        return this.appendOps(1);
      case 'appendMany':
        return this.appendOps(2 + this.rng.int(4));
      case 'read':
        return this.readCheck(this.pickStream());
      case 'subscribe':
        return this.subscribeCheck();
      case 'clock':
        return this.advanceClock();
      case 'reclaim':
        return this.reclaim();
      case 'crash':
        return this.crash();
      case 'restart':
        return this.restart();
      case 'fault':
        return this.injectFault();
      case 'heal':
        this.heal();
        this.note('heal: faults off');
        return;
      case 'bitflip':
        return this.bitflip(op.seed);
    }
  }

  async close(): Promise<void> {
    this.heal();
    await this.store?.close().catch(() => undefined);
    this.store = null;
  }

  // --- The workload --------------------------------------------------------------

  private pickStream(): string {
    const all = [...this.deviceStreams, ...this.heartbeatStreams];
    return all.length === 0 ? 'device-0' : this.rng.pick(all);
  }

  private newEvents(count: number): NewEvent[] {
    return Array.from({ length: count }, () => {
      const id = uuid(this.rng);
      const pad = 'x'.repeat(this.rng.int(4) === 0 ? this.rng.int(400) : this.rng.int(40));
      return {
        id,
        type: this.rng.pick(['Heartbeat', 'Renamed', 'Registered']),
        data: { n: this.rng.int(1_000_000), pad },
        metadata: { occurredAt: new Date(this.clock).toISOString(), actor: { type: 'system', id: 'sim' }, requestId: id, causationId: id, correlationId: id },
      };
    });
  }

  /** Chooses a stream for an append: an existing one mostly, sometimes a new device or heartbeat stream. */
  private chooseAppendStream(taken: Set<string>): { stream: string; isNew: boolean } | null {
    const roll = this.rng.int(20);
    if (roll === 0 || this.deviceStreams.length + this.heartbeatStreams.length === 0) {
      const stream = this.rng.chance(0.5) ? `device-${this.deviceStreams.length}` : `heartbeat-${uuid(this.rng)}`;
      return taken.has(stream) ? null : { stream, isNew: true };
    }
    const stream = this.pickStream();
    return taken.has(stream) ? null : { stream, isNew: false };
  }

  private async appendOps(count: number): Promise<void> {
    const taken = new Set<string>();
    const appends: Array<Promise<void>> = [];
    for (let i = 0; i < count; i++) {
      const choice = this.chooseAppendStream(taken);
      if (choice === null) continue;
      taken.add(choice.stream);
      if (choice.isNew && !choice.stream.startsWith('heartbeat-')) this.deviceStreams.push(choice.stream);
      appends.push(this.appendOne(choice.stream, choice.isNew));
    }
    await Promise.all(appends);
    await this.checkRecovered();
  }

  /** In log order: by the position of the append, then revision (concurrent appends are answered in any order here). */
  private addToLog(event: ModelEvent): void {
    let at = this.log.length;
    while (at > 0) {
      const before = this.log[at - 1] as ModelEvent;
      if (before.appendLast < event.appendLast || (before.appendLast === event.appendLast && before.revision < event.revision)) break;
      at--;
    }
    this.log.splice(at, 0, event);
  }

  private modelEvents(stream: string): ModelEvent[] {
    let events = this.model.get(stream);
    if (events === undefined) {
      events = [];
      this.model.set(stream, events);
    }
    return events;
  }

  private async appendOne(stream: string, isNew: boolean): Promise<void> {
    const known = this.modelEvents(stream);
    const count = known.length;
    const uncertainHere = this.uncertain.some((u) => u.stream === stream);
    // A new heartbeat stream gets its $maxAge first (what device registration does).
    if (isNew && stream.startsWith('heartbeat-')) {
      const maxAge = this.rng.pick([3600, DAY / 1000, (7 * DAY) / 1000]);
      const [metadataEvent] = this.newEvents(1);
      const setMaxAge = { ...(metadataEvent as NewEvent), type: '$metadata', data: { $maxAge: maxAge } };
      try {
        await this.live.append(`$$${stream}`, [setMaxAge], 'any');
      } catch (error) {
        this.note(`$maxAge of ${stream} → failed: ${message(error)}`);
        this.expectFailureAllowed(error, `$maxAge of ${stream}`);
        return;
      }
      this.maxAge.set(stream, maxAge);
      this.heartbeatStreams.push(stream);
      this.note(`$maxAge of ${stream} = ${maxAge} s`);
    }
    const events = this.newEvents(1 + (this.rng.int(4) === 0 ? this.rng.int(3) : 0));
    const mode = this.rng.int(10);
    let expected: ExpectedRevision;
    let expectConflict = false;
    if (mode === 0) expected = 'any';
    else if (mode === 1 && count > 0) {
      expected = count >= 2 ? BigInt(count - 2) : 'no_stream';
      expectConflict = true;
    } else expected = count === 0 ? 'no_stream' : BigInt(count - 1);
    const writtenAt = this.clock;
    const order = this.order++;
    let line = `append ${stream} ×${events.length} expect ${String(expected)}`;
    let result: AppendResult;
    try {
      result = await this.live.append(stream, events, expected);
    } catch (error) {
      if (error instanceof WrongExpectedRevisionError) {
        this.note(`${line} → conflict`);
        if (!expectConflict && !uncertainHere) throw new Violation(`append to ${stream} expecting ${String(expected)} conflicted (model has ${count} events): ${message(error)}`);
        return;
      }
      this.note(`${line} → failed: ${message(error)}`);
      this.expectFailureAllowed(error, `append to ${stream}`);
      this.stats.appendsFailed++;
      this.uncertain.push({ stream, events, writtenAt });
      return;
    }
    {
      line += ` → ok rev ${result.nextExpectedRevision} @${result.position.commit}`;
      this.note(line);
      if (expectConflict && !uncertainHere) throw new Violation(`append to ${stream} with stale expectation ${String(expected)} succeeded (model has ${count} events)`);
      const firstRevision = Number(result.nextExpectedRevision) - events.length + 1;
      if (!uncertainHere && firstRevision !== count) throw new Violation(`append to ${stream} got revision ${firstRevision}, model expects ${count}`);
      this.stats.appendsAcknowledged++;
      this.failedSinceHeal = this.failedSinceHeal && this.faultsOn();
      this.refusedAfterHeal = 0;
      if (uncertainHere) await this.resolveUncertain(stream, `append after uncertain ${stream}`, firstRevision);
      const target = this.modelEvents(stream);
      if (target.length !== firstRevision) throw new Violation(`append to ${stream} got revision ${firstRevision}, stream has ${target.length} events`);
      for (const [i, event] of events.entries()) {
        const added = { id: event.id, stream, revision: firstRevision + i, type: event.type, data: JSON.stringify(event.data), writtenAt, appendLast: result.position.commit, order };
        target.push(added);
        this.addToLog(added);
      }
    }
  }

  private faultsOn(): boolean {
    const f = this.fs.faults;
    return f.diskFull || f.writeEio > 0 || f.syncEio > 0 || f.emfile > 0 || f.shortWrite > 0;
  }

  /** A failed append is allowed while faults are on, and shortly after (the store recovers on the next attempts). */
  private expectFailureAllowed(error: unknown, what: string): void {
    if (this.faultsOn()) {
      this.failedSinceHeal = true;
      return;
    }
    if (this.failedSinceHeal && isStoreUnavailable(error)) {
      this.refusedAfterHeal++;
      return;
    }
    throw new Violation(`${what} failed without a fault: ${message(error)}`);
  }

  /** Once the faults are gone, the store must take appends again within a few attempts, without a restart. */
  private async checkRecovered(): Promise<void> {
    if (this.refusedAfterHeal > 3) throw new Violation(`the store still refuses appends ${this.refusedAfterHeal} attempts after the faults are gone`);
  }

  /** What a stream shows beyond the model must be failed appends, whole, in order: they are adopted. */
  private async resolveUncertain(stream: string, why: string, upTo?: number): Promise<void> {
    const pending = this.uncertain.filter((u) => u.stream === stream);
    if (pending.length === 0) return;
    const known = this.modelEvents(stream);
    const beyond: RecordedEvent[] = [];
    // The model's own look: no faults while it reads.
    const faults = this.fs.faults;
    this.fs.faults = { ...NO_FAULTS };
    try {
      // Through a subscription, not a read: reads hide heartbeats older than $maxAge, and a
      // failed heartbeat that is on disk after all must be seen (and adopted) however old.
      if (upTo === undefined || upTo > known.length) {
        const after = known.at(-1)?.appendLast;
        const subscription = this.live.subscribe({ ...(after === undefined ? {} : { fromPosition: { commit: after, prepare: after } }), streamPrefixes: [stream] });
        try {
          for await (const item of subscription) {
            if (item.kind === 'caught-up') break;
            if (item.event.streamName !== stream) continue;
            if (upTo !== undefined && Number(item.event.revision) >= upTo) break;
            beyond.push(item.event);
          }
        } finally {
          await subscription.close();
        }
      }
    } finally {
      this.fs.faults = faults;
    }
    let at = 0;
    for (const candidate of pending) {
      if (at >= beyond.length) break;
      const first = beyond[at];
      if (first?.id !== candidate.events[0]?.id) continue;
      const slice = beyond.slice(at, at + candidate.events.length);
      if (slice.length !== candidate.events.length || slice.some((event, i) => event.id !== candidate.events[i]?.id)) {
        throw new Violation(`${why}: a failed append to ${stream} shows only in part (${slice.length} of ${candidate.events.length} events)`);
      }
      const order = this.order++;
      const last = slice[slice.length - 1] as RecordedEvent;
      for (const [i, event] of slice.entries()) {
        const sent = candidate.events[i] as NewEvent;
        if (Number(event.revision) !== known.length) throw new Violation(`${why}: adopted event of ${stream} at revision ${event.revision}, expected ${known.length}`);
        const added = { id: sent.id, stream, revision: known.length, type: sent.type, data: JSON.stringify(sent.data), writtenAt: candidate.writtenAt, appendLast: last.position.commit, order };
        known.push(added);
        this.addToLog(added);
      }
      at += slice.length;
      this.note(`${why}: failed append of ${slice.length} to ${stream} is on disk after all (adopted)`);
    }
    if (at < beyond.length) throw new Violation(`${why}: ${stream} shows ${beyond.length - at} events nobody appended (first ${beyond[at]?.id})`);
    for (let i = this.uncertain.length - 1; i >= 0; i--) if (this.uncertain[i]?.stream === stream) this.uncertain.splice(i, 1);
  }

  // --- Checks --------------------------------------------------------------------

  /** Events of a stream that reads must show: all, except heartbeats older than $maxAge. */
  private visible(stream: string): ModelEvent[] {
    const events = this.modelEvents(stream);
    const maxAge = this.maxAge.get(stream);
    if (maxAge === undefined) return events;
    const cutoff = this.clock - maxAge * 1000;
    return events.filter((event) => event.writtenAt >= cutoff);
  }

  /** Whether retention allows this event to be gone from disk. */
  private reclaimable(event: ModelEvent): boolean {
    const maxAge = this.maxAge.get(event.stream);
    if (maxAge === undefined || !event.stream.startsWith('heartbeat-')) return false;
    const events = this.modelEvents(event.stream);
    return event.writtenAt < this.clock - maxAge * 1000 && event.revision < events.length - 1;
  }

  private compare(got: RecordedEvent, want: ModelEvent, where: string): void {
    const data = JSON.stringify(got.data);
    if (got.id !== want.id || got.streamName !== want.stream || Number(got.revision) !== want.revision || got.type !== want.type || data !== want.data) {
      throw new Violation(
        `${where}: expected ${want.stream}@${want.revision} ${want.id} ${want.type} ${want.data.slice(0, 60)}, ` +
          `got ${got.streamName}@${got.revision} ${got.id} ${got.type} ${data.slice(0, 60)}`,
      );
    }
    if (got.position.commit > want.appendLast) throw new Violation(`${where}: ${want.stream}@${want.revision} at position ${got.position.commit}, after its append's last ${want.appendLast}`);
    const events = this.modelEvents(want.stream);
    const next = events[want.revision + 1];
    if ((next === undefined || next.order !== want.order) && got.position.commit !== want.appendLast) {
      throw new Violation(`${where}: ${want.stream}@${want.revision} at position ${got.position.commit}, its append answered ${want.appendLast}`);
    }
  }

  private async readCheck(stream: string, damageAllowed = false): Promise<void> {
    const want = this.visible(stream);
    const backwards = this.rng.chance(0.3);
    try {
      if (!backwards) {
        const got: RecordedEvent[] = [];
        for await (const event of this.live.readStream(stream)) got.push(event);
        if (got.length !== want.length) {
          throw new Violation(`read ${stream}: ${got.length} events, model has ${want.length} visible (revisions ${got.map((e) => e.revision).join(',').slice(0, 200)})`);
        }
        for (const [i, event] of got.entries()) this.compare(event, want[i] as ModelEvent, `read ${stream}`);
      } else {
        const maxCount = 1 + this.rng.int(5);
        const got: RecordedEvent[] = [];
        for await (const event of this.live.readStream(stream, { direction: 'backwards', maxCount })) got.push(event);
        const expected = want.slice(Math.max(0, want.length - maxCount)).reverse();
        if (got.length !== expected.length) throw new Violation(`read ${stream} backwards ×${maxCount}: ${got.length} events, model ${expected.length}`);
        for (const [i, event] of got.entries()) this.compare(event, expected[i] as ModelEvent, `read ${stream} backwards`);
      }
    } catch (error) {
      // While faults are on (EMFILE), a read may fail; it must never answer wrong data.
      if (!(error instanceof Violation) && this.faultsOn()) {
        this.note(`read ${stream}: failed under faults: ${message(error)}`);
        return;
      }
      if (error instanceof Violation || !damageAllowed || !namesFileAndOffset(error)) {
        throw error instanceof Violation ? error : new Violation(`read ${stream}: ${message(error)}`);
      }
    }
    this.note(`read ${stream}${backwards ? ' backwards' : ''}: ok (${want.length} visible)`);
  }

  private async subscribeCheck(damageAllowed = false): Promise<void> {
    const all = this.log;
    // A checkpoint: the last position of some recent append (or the very start).
    const fromAt = all.length === 0 || this.rng.chance(0.05) ? null : (all[Math.max(0, all.length - 1 - this.rng.int(Math.min(all.length, 80)))] as ModelEvent).appendLast;
    let from = all.length;
    while (from > 0 && fromAt !== null && (all[from - 1] as ModelEvent).appendLast > fromAt) from--;
    const expected = fromAt === null ? all : all.slice(from);
    const subscription = this.live.subscribe(fromAt === null ? {} : { fromPosition: { commit: fromAt, prepare: fromAt } });
    const got: RecordedEvent[] = [];
    try {
      for await (const item of subscription) {
        if (item.kind === 'caught-up') break;
        got.push(item.event);
        if (got.length > expected.length + 5) break;
      }
    } catch (error) {
      if (this.faultsOn()) return;
      if (!damageAllowed || !namesFileAndOffset(error)) throw new Violation(`subscription from ${String(fromAt)}: ${message(error)}`);
      return;
    } finally {
      await subscription.close();
    }
    let at = 0;
    let previous = fromAt ?? -1n;
    for (const event of got) {
      if (event.position.commit <= previous) throw new Violation(`subscription from ${String(fromAt)}: position ${event.position.commit} after ${previous} (out of order or twice)`);
      previous = event.position.commit;
      while (at < expected.length && (expected[at] as ModelEvent).id !== event.id) {
        const skipped = expected[at] as ModelEvent;
        if (!this.reclaimable(skipped)) throw new Violation(`subscription from ${String(fromAt)}: missed ${skipped.stream}@${skipped.revision} (retention does not allow its removal)`);
        at++;
      }
      const want = expected[at];
      if (want === undefined) throw new Violation(`subscription from ${String(fromAt)}: delivered ${event.streamName}@${event.revision} ${event.id}, not in the model (or out of order)`);
      this.compare(event, want, `subscription from ${String(fromAt)}`);
      at++;
    }
    for (; at < expected.length; at++) {
      const skipped = expected[at] as ModelEvent;
      if (!this.reclaimable(skipped)) throw new Violation(`subscription from ${String(fromAt)}: missed ${skipped.stream}@${skipped.revision} (appended up to ${skipped.appendLast}) at the end; delivered ${got.map((e) => `${e.streamName.slice(0, 12)}@${e.revision}:${e.position.commit}`).join(' ')}`);
    }
    this.note(`subscribe from ${String(fromAt)}: ${got.length} events, ok`);
  }

  /** After a reopen: failed appends settle, then every stream is read and a subscription checked. */
  private async fullCheck(damageAllowed = false): Promise<void> {
    for (const stream of new Set(this.uncertain.map((u) => u.stream))) await this.resolveUncertain(stream, 'after reopen');
    this.uncertain.length = 0;
    const streams = [...this.model.keys()];
    const sample = streams.length <= 12 ? streams : Array.from({ length: 12 }, () => this.rng.pick(streams));
    for (const stream of sample) await this.readCheck(stream, damageAllowed);
    await this.subscribeCheck(damageAllowed);
    let head;
    try {
      head = await this.live.headPosition();
    } catch (error) {
      // Opened read-only (a full disk): readiness says so until writes work again.
      if (this.faultsOn() && isStoreUnavailable(error)) return;
      throw error;
    }
    const last = this.log.at(-1)?.appendLast ?? null;
    if ((head?.commit ?? null) !== last && !(head !== null && last !== null && head.commit >= last)) {
      throw new Violation(`head position ${String(head?.commit)}, model's last append ends at ${String(last)}`);
    }
  }

  private async advanceClock(): Promise<void> {
    const ms = this.rng.pick([1000, 60_000, 3_600_000, DAY, 3 * DAY]) * (1 + this.rng.int(3));
    this.clock += ms;
    this.note(`clock +${ms} ms`);
  }

  private async reclaim(): Promise<void> {
    try {
      const result = await this.live.reclaimExpired();
      this.stats.eventsReclaimed += result.eventsReclaimed;
      this.note(`reclaim: ${result.eventsReclaimed} events from ${result.segmentsCompacted} segments`);
    } catch (error) {
      this.note(`reclaim failed: ${message(error)}`);
      if (!this.faultsOn() && !this.failedSinceHeal) throw new Violation(`reclamation failed without a fault: ${message(error)}`);
    }
    const leftovers = this.fs.list(DIRECTORY).filter((file) => file.name.endsWith('.compact'));
    if (leftovers.length > 0) throw new Violation(`reclamation left ${leftovers.map((f) => f.name).join(', ')} behind`);
    // Whatever was reclaimed, reads and subscriptions must still agree with retention.
    await this.readCheck(this.pickStream());
  }

  private async reopenAfter(what: string): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        await this.open();
        break;
      } catch (error) {
        this.note(`${what}: open failed: ${message(error)}`);
        if (attempt >= 2 && this.faultsOn()) {
          this.heal();
          continue;
        }
        if (!this.faultsOn()) throw new Violation(`${what}: the store does not open without faults: ${message(error)}`);
        if (this.fs.faults.diskFull && !this.fs.faults.writeEio && !this.fs.faults.syncEio && !this.fs.faults.emfile) {
          throw new Violation(`${what}: the store does not open on a full disk (it must open read-only): ${message(error)}`);
        }
      }
    }
    this.note(`${what}: reopened`);
    await this.fullCheck();
  }

  private async crash(): Promise<void> {
    this.stats.crashes++;
    // Let some of what is under way run first, then cut the power.
    this.store = null;
    this.fs.crash();
    this.note('crash (power cut)');
    this.failedSinceHeal = false;
    this.refusedAfterHeal = 0;
    await this.reopenAfter('after crash');
  }

  private async restart(): Promise<void> {
    await this.live.close().catch(() => undefined);
    this.store = null;
    this.fs.processExit();
    this.note('clean restart');
    this.failedSinceHeal = false;
    this.refusedAfterHeal = 0;
    await this.reopenAfter('after restart');
  }

  private heal(): void {
    this.fs.faults = { ...NO_FAULTS };
    this.faultOpsLeft = 0;
  }

  private injectFault(): void {
    const faults: Faults = { ...NO_FAULTS };
    const kind = this.rng.pick(['diskFull', 'writeEio', 'syncEio', 'emfile', 'shortWrite', 'mixed'] as const);
    if (kind === 'diskFull') faults.diskFull = true;
    if (kind === 'writeEio' || kind === 'mixed') faults.writeEio = 0.3;
    if (kind === 'syncEio' || kind === 'mixed') faults.syncEio = 0.3;
    if (kind === 'emfile' || kind === 'mixed') faults.emfile = 0.3;
    if (kind === 'shortWrite' || kind === 'mixed') faults.shortWrite = 0.5;
    this.fs.faults = faults;
    this.faultOpsLeft = 1 + this.rng.int(8);
    this.note(`fault: ${kind} for ${this.faultOpsLeft} ops`);
  }

  /**
   * The case the close file is for: a write fails on a full disk, the store is stopped
   * cleanly on that full disk (no room for its close record nor its checkpoint), one bit of
   * the last acknowledged record flips, and the next start (on the full disk or with space
   * back) must refuse it naming file and byte, never cut it as a torn tail.
   */
  private async fullDiskStopThenFlip(): Promise<void> {
    this.heal();
    // A start with space, so the close file is in place (a start on a full disk may not create it).
    await this.live.close().catch(() => undefined);
    this.store = null;
    this.fs.processExit();
    await this.reopenAfter('restart before a full disk');
    await this.appendOps(1);
    this.fs.faults = { ...NO_FAULTS, diskFull: true };
    this.note('fault: diskFull until the start after the stop');
    await this.appendOps(1);
    await this.live.close().catch(() => undefined);
    this.store = null;
    this.fs.processExit();
    const baseOf = (name: string): number => (name === 'events.log' ? 0 : Number(/events-(\d+)\.log/.exec(name)?.[1] ?? -1));
    const active = this.fs
      .list(DIRECTORY)
      .filter((file) => /^events(-\d+)?\.log$/.test(file.name))
      .sort((a, b) => baseOf(a.name) - baseOf(b.name))
      .at(-1)?.name;
    const file = `${DIRECTORY}/${active ?? 'events.log'}`;
    const last = lastRecordOf(this.fs.fileBytes(file));
    if (last === null) {
      // A segment just started (by a compaction's seal) and the append conflicted: nothing to damage.
      this.note(`stopped on a full disk; ${active ?? '?'} holds no record`);
      this.heal();
      await this.reopenAfter('after a stop on a full disk');
      return;
    }
    const at = last.offset + this.rng.int(last.size);
    const bit = this.rng.int(8);
    const undo = this.fs.flipBit(file, at, bit);
    const full = this.rng.chance(0.5);
    if (!full) this.heal();
    this.note(`stopped on a full disk; bit flip in the last record of ${active ?? '?'} (byte ${last.offset}) at byte ${at} bit ${bit}; start ${full ? 'on the full disk' : 'with space back'}`);
    try {
      await this.open();
      throw new Violation(`the last acknowledged record of ${active ?? '?'}, damaged after a clean stop on a full disk, was not refused at the start`);
    } catch (error) {
      this.openRefused(error);
      this.stats.fullDiskStopsRefused++;
    }
    this.heal();
    await this.repairAndReopen(undo);
  }

  /** An open that met damage must refuse it naming the file and the byte. */
  private openRefused(error: unknown): void {
    if (error instanceof Violation) throw error;
    if (!namesFileAndOffset(error)) throw new Violation(`open with a flipped bit failed without naming file and byte: ${message(error)}`);
    this.note(`open refused: ${message(error)}`);
  }

  /** The damaged copy is replaced by a good one (a backup), and the store opens again. */
  private async repairAndReopen(undo: () => void): Promise<void> {
    this.store = null;
    this.fs.processExit();
    undo();
    this.note('damage repaired (restored from backup)');
    await this.reopenAfter('after repair');
  }

  /**
   * Damage to acknowledged data: in a sealed segment or checkpoint, or in the active segment
   * followed by a clean stop (sometimes without the active segment's checkpoint, as a full
   * disk at close may leave it). Reads and a reopen must refuse it (naming file and byte) or
   * not need it, never drop it as a torn tail; then it is repaired.
   */
  private async bitflip(opSeed: number): Promise<void> {
    // The variants draw from their own generator: the plain case runs as it always did.
    const variant = new Rng(opSeed ^ 0x1b873593).int(4);
    if (variant === 0) return this.fullDiskStopThenFlip();
    const files = this.fs.list(DIRECTORY).filter((file) => file.name.endsWith('.log') || file.name.endsWith('.log.idx') || (variant === 1 && file.name === CLOSE_FILE_NAME));
    const baseOf = (name: string): number => (name === 'events.log' ? 0 : Number(/events-(\d+)\.log/.exec(name)?.[1] ?? -1));
    const segments = files.filter((file) => file.name.endsWith('.log')).sort((a, b) => baseOf(a.name) - baseOf(b.name));
    const active = segments[segments.length - 1]?.name;
    const damaged = files.filter((file) => file.size > 16);
    if (damaged.length === 0) return;
    // The active segment one time in four (among dozens of files it would seldom be picked).
    const activeFile = damaged.find((file) => file.name === active);
    const target = activeFile !== undefined && this.rng.chance(0.25) ? activeFile : this.rng.pick(damaged);
    const offset = 16 + this.rng.int(target.size - 16);
    const bit = this.rng.int(8);
    const undo = this.fs.flipBit(`${DIRECTORY}/${target.name}`, offset, bit);
    const withoutCheckpoint = target.name === active && this.rng.chance(0.5);
    this.note(`bit flip in ${target.name} at byte ${offset} bit ${bit}${withoutCheckpoint ? ', its checkpoint lost at the stop' : ''}`);
    this.heal();
    // The running store: reads of the damaged records fail, naming the place.
    for (const stream of this.model.keys()) await this.readCheck(stream, true);
    await this.subscribeCheck(true);
    // A restart: refuses to open (naming the place), or opens and serves nothing damaged.
    await this.live.close().catch(() => undefined);
    this.store = null;
    this.fs.processExit();
    if (withoutCheckpoint) await this.fs.unlink(`${DIRECTORY}/${target.name}.idx`);
    try {
      await this.open();
      this.note('reopened with the damage');
      for (const stream of this.model.keys()) await this.readCheck(stream, true);
      await this.live.close().catch(() => undefined);
    } catch (error) {
      this.openRefused(error);
    }
    await this.repairAndReopen(undo);
  }
}

/** The bounds of the last record of a segment's bytes (walking the length prefixes), or null when it holds none. */
function lastRecordOf(segment: Buffer): { offset: number; size: number } | null {
  let last: { offset: number; size: number } | null = null;
  for (let offset = 16; offset + 8 <= segment.length; ) {
    const size = 8 + segment.readUInt32LE(offset);
    if (offset + size > segment.length) break;
    last = { offset, size };
    offset += size;
  }
  return last;
}

export interface RunOptions {
  readonly seed: number;
  /** Operations to run (generated from the seed), or an explicit list (shrinking). */
  readonly ops: number | readonly Op[];
}

/** Runs one seed; never throws for a violation (it is in the result). */
export async function runSimulation(options: RunOptions): Promise<SimResult> {
  const ops = typeof options.ops === 'number' ? generateOps(options.seed, options.ops) : options.ops;
  const world = new World(options.seed);
  let violation: SimResult['violation'] = null;
  let executed = 0;
  try {
    await world.start();
    for (const [i, op] of ops.entries()) {
      executed = i + 1;
      await world.run(op, i);
    }
    await world.close();
  } catch (error) {
    violation = { step: executed - 1, message: message(error) };
  }
  return {
    seed: options.seed,
    ops: executed,
    ...world.stats,
    faults: world.fs.injected,
    violation,
    history: world.history,
  };
}

/**
 * The shortest history that still shows a violation: the run cut after the failing step,
 * then operations left out in chunks (halves, quarters, …) for as long as the violation
 * stays, within a budget of runs.
 */
export async function shrink(seed: number, ops: readonly Op[], budgetRuns = 300): Promise<{ ops: readonly Op[]; result: SimResult }> {
  let best = await runSimulation({ seed, ops });
  if (best.violation === null) throw new Error('nothing to shrink: the run passes');
  let current = ops.slice(0, best.violation.step + 1);
  let runs = 1;
  for (let chunk = Math.max(1, Math.floor(current.length / 2)); chunk >= 1 && runs < budgetRuns; chunk = Math.floor(chunk / 2)) {
    let start = 0;
    while (start < current.length - 1 && runs < budgetRuns) {
      // Never drop the failing (last) operation.
      const end = Math.min(start + chunk, current.length - 1);
      const candidate = [...current.slice(0, start), ...current.slice(end)];
      runs++;
      const result = await runSimulation({ seed, ops: candidate });
      if (result.violation !== null) {
        current = candidate.slice(0, result.violation.step + 1);
        best = result;
      } else {
        start = end;
      }
    }
    if (chunk === 1) break;
  }
  return { ops: current, result: best };
}
