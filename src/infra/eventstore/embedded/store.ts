/**
 * The embedded store's appends: expectations checked and positions reserved in call order,
 * group commit into the active segment, and sealing a full segment; reads by stream and
 * catch-up subscriptions are handed to reads.ts and subscription.ts. Whether appends are
 * taken at all (after a failed write, on a full disk) is write-availability.ts; index
 * checkpoints and the record of a clean close are checkpoints.ts; reclamation of expired
 * heartbeats is reclamation.ts.
 */
import { randomUUID } from 'node:crypto';
import {
  WrongExpectedRevisionError,
  type AppendResult,
  type EventStore,
  type ExpectedRevision,
  type GlobalPosition,
  type NewEvent,
  type ReadStreamOptions,
  type RecordedEvent,
  type SubscribeOptions,
  type Subscription,
} from '../port';
import { writeFully } from './files';
import type { LogIndex } from './log-index';
import { crc32 } from './crc32';
import { decodeEvent, encodeRecord, encodeSegmentHeader, FLAG_END_OF_APPEND, markFirstOfBatch, SEGMENT_HEADER_SIZE, setRecordPosition } from './record-format';
import { LogReader } from './reads';
import { positionAt } from './recorded-event';
import { createSegmentFile } from './recovery';
import { RecentCommits } from './recent-commits';
import { Segment, type HandlePool } from './segment';
import { maxAgeChangeOf } from './segment-scan';
import { SegmentTable } from './segment-table';
import { LogSubscription, tail, type TailSource } from './subscription';
import type { GroupCommit, ResolvedOptions } from './options';
import { CheckpointWriter } from './checkpoints';
import { WriteAvailability } from './write-availability';
import { CloseFile, type CloseFileAtOpen } from './close-file';

interface ReservedRecord {
  readonly revision: number;
  readonly position: number;
  readonly writtenAt: number;
}

interface PendingAppend {
  readonly streamName: string;
  /** Base of the segment the append was reserved in (a segment that may not exist yet). */
  readonly base: number;
  readonly fileOffset: number;
  readonly bytes: Buffer;
  readonly records: readonly ReservedRecord[];
  readonly result: AppendResult;
  readonly maxAgeChange: { readonly target: string; readonly maxAge: number | null } | null;
  readonly resolve: (result: AppendResult) => void;
  readonly reject: (error: Error) => void;
}

/** One append of historical events with the written-at time they get (see appendHistory). */
export interface HistoricalAppend {
  readonly streamName: string;
  readonly events: readonly NewEvent[];
  readonly writtenAt: number;
}

/** The revision the new events would get if the expectation holds, or null for "must not exist". */
function expectedFirstRevision(expected: ExpectedRevision, currentCount: number): number | null {
  switch (expected) {
    case 'any':
      return currentCount;
    case 'no_stream':
      return 0;
    case 'stream_exists':
      // Such an append cannot be told apart from a retry, so it has no idempotence check.
      return currentCount > 0 ? currentCount : null;
    default:
      return Number(expected) + 1;
  }
}

/** How many events the stream has had (reserved ones included): the revision of its next. */
function currentCountOf(index: LogIndex, streamName: string): number {
  const stream = index.streams.get(streamName);
  return stream === undefined ? 0 : stream.firstRevision + stream.length;
}

export class EmbeddedStoreCore implements EventStore {
  protected readonly now: () => number;
  private reservedBase: number;
  private reservedEnd: number;
  private queue: PendingAppend[] = [];
  private flushRunning = false;
  private flushDone: Promise<void> = Promise.resolve();
  /** Whether appends are taken (write-availability.ts). */
  protected readonly writes: WriteAvailability;
  protected closing = false;
  private changeWaiters: Array<() => void> = [];
  /** Every index checkpoint written while the store runs (checkpoints.ts), a compacted copy's too. */
  protected readonly checkpoints: CheckpointWriter;
  protected readonly recent = new RecentCommits();
  protected readonly reader: LogReader;
  /** Where a stop that cannot append its close record puts it (close-file.ts); set at open. */
  private closeFile: CloseFile | null = null;

  constructor(
    protected readonly directory: string,
    protected segments: Segment[],
    protected readonly index: LogIndex,
    private activeTable: SegmentTable,
    protected readonly options: ResolvedOptions,
    protected readonly pool: HandlePool,
  ) {
    this.now = options.now;
    this.checkpoints = new CheckpointWriter(options.io, options.log, options.checkpointBytes);
    this.reader = new LogReader({
      index,
      recent: this.recent,
      segments: () => this.segments,
      now: () => this.now(),
      isClosing: () => this.closing,
    });
    const active = this.active();
    this.reservedBase = active.base;
    this.reservedEnd = active.size;
    this.writes = new WriteAvailability({
      directory,
      io: options.io,
      log: options.log,
      active: () => ({ segment: this.active(), table: this.activeTable }),
      isClosing: () => this.closing,
      idle: async () => {
        while (this.flushRunning) await this.flushDone;
      },
      beforeWrites: async () => {
        await this.closeFile?.beforeWrites();
      },
      resumed: (segment) => {
        this.reservedBase = segment.base;
        this.reservedEnd = segment.size;
      },
    });
  }

  protected active(): Segment {
    return this.segments[this.segments.length - 1] as Segment;
  }

  // Everything up to the first await runs synchronously, so expectations are checked and
  // positions reserved in call order even while earlier appends still wait for their fsync.
  async append(streamName: string, events: readonly NewEvent[], expected: ExpectedRevision): Promise<AppendResult> {
    await this.writes.untilWritable();
    return this.reserve(streamName, events, expected, this.now());
  }

  /**
   * Appends events with chosen written-at times (what $maxAge and reclamation compare), in
   * one go: for tools that write a long history, such as benchmarks. Times are clamped so
   * that they never decrease along the log. Expectations are 'any'.
   */
  async appendHistory(appends: readonly HistoricalAppend[]): Promise<void> {
    await this.writes.untilWritable();
    // One promise for the lot: commits resolve in order, so the last one answers for all.
    await new Promise<void>((resolve, reject) => {
      const ignore = (): void => undefined;
      for (const [i, append] of appends.entries()) {
        const done = i === appends.length - 1 ? () => resolve() : ignore;
        this.enqueue(append.streamName, append.events, currentCountOf(this.index, append.streamName), append.writtenAt, done, reject);
      }
      if (appends.length === 0) resolve();
    });
  }

  private reserve(streamName: string, events: readonly NewEvent[], expected: ExpectedRevision, now: number): Promise<AppendResult> {
    this.writes.assertWritable();
    if (events.length === 0) throw new Error('An append needs at least one event');
    const currentCount = currentCountOf(this.index, streamName);
    const firstRevision = expectedFirstRevision(expected, currentCount);
    if (firstRevision !== currentCount) return this.retriedAppendOrConflict(streamName, events, expected, currentCount, firstRevision);
    return new Promise<AppendResult>((resolve, reject) => this.enqueue(streamName, events, currentCount, now, resolve, reject));
  }

  /** Reserves positions for an append whose expectation holds and queues it for the next group commit. */
  private enqueue(
    streamName: string,
    events: readonly NewEvent[],
    currentCount: number,
    now: number,
    resolve: (result: AppendResult) => void,
    reject: (error: Error) => void,
  ): void {
    this.writes.assertWritable();
    if (events.length === 0) throw new Error('An append needs at least one event');
    const writtenAt = Math.max(now, this.index.lastWrittenAt);
    const encoded = this.encodeAppend(streamName, events, currentCount, writtenAt);
    this.index.lastWrittenAt = writtenAt;
    const stream = this.index.stream(streamName);
    for (const record of encoded.records) stream.push(record.position);
    const lastEvent = events[events.length - 1] as NewEvent;
    const lastPosition = (encoded.records[encoded.records.length - 1] as ReservedRecord).position;
    this.queue.push({
      ...encoded,
      streamName,
      result: { nextExpectedRevision: BigInt(currentCount + events.length - 1), position: positionAt(lastPosition) },
      maxAgeChange: maxAgeChangeOf(streamName, lastEvent.type, lastEvent.data),
      resolve,
      reject,
    });
    this.scheduleFlush();
  }

  /** Encodes an append at the reserved end, first starting a new segment if the active one is full. */
  private encodeAppend(streamName: string, events: readonly NewEvent[], firstRevision: number, writtenAt: number) {
    const encoded = events.map((event, i) => {
      const flags = i === events.length - 1 ? FLAG_END_OF_APPEND : 0;
      return encodeRecord({ position: 0, flags, writtenAt, revision: firstRevision + i, streamName, event });
    });
    const total = encoded.reduce((sum, bytes) => sum + bytes.length, 0);
    if (this.reservedEnd > SEGMENT_HEADER_SIZE && this.reservedEnd + total > this.options.segmentBytes) {
      this.reservedBase += this.reservedEnd;
      this.reservedEnd = SEGMENT_HEADER_SIZE;
    }
    const base = this.reservedBase;
    const fileOffset = this.reservedEnd;
    const records: ReservedRecord[] = [];
    let at = fileOffset;
    for (const [i, bytes] of encoded.entries()) {
      setRecordPosition(bytes, base + at);
      records.push({ revision: firstRevision + i, position: base + at, writtenAt });
      at += bytes.length;
    }
    this.reservedEnd = at;
    return { base, fileOffset, records, bytes: encoded.length === 1 ? (encoded[0] as Buffer) : Buffer.concat(encoded) };
  }

  readStream(streamName: string, options: ReadStreamOptions = {}): AsyncIterable<RecordedEvent> {
    return this.reader.streamEvents(streamName, options);
  }

  /** The revision after the stream's last durable event, from the index (no I/O). */
  readonly streamEnd = (streamName: string): number => {
    const stream = this.index.streams.get(streamName);
    return stream === undefined ? 0 : stream.firstRevision + stream.durableCount;
  };

  subscribe(options: SubscribeOptions = {}): Subscription {
    const source: TailSource = {
      segments: () => this.segments,
      readerOf: (segment) => this.reader.readerOf(segment),
      recentRecord: (segment, fileOffset) => this.reader.recentRecord(segment, fileOffset),
      // A failed write stops appends, not reads: subscriptions go on serving what is durable.
      checkHealthy: () => undefined,
      isClosing: () => this.closing,
      waitForChange: () => this.waitForChange(),
      toRecordedEvent: (record) => this.reader.eventOf(record),
    };
    return new LogSubscription((isClosed) => tail(source, options, isClosed), () => this.wakeWaiters());
  }

  async setStreamMaxAge(streamName: string, maxAgeSeconds: number): Promise<void> {
    if (!Number.isFinite(maxAgeSeconds) || maxAgeSeconds <= 0) {
      throw new Error(`maxAgeSeconds must be a positive number, got ${maxAgeSeconds}`);
    }
    const id = randomUUID();
    const occurredAt = new Date(this.now()).toISOString();
    const actor = { type: 'system', id: 'event-store' } as const;
    const metadata = { occurredAt, actor, requestId: id, causationId: id, correlationId: id };
    await this.append(`$$${streamName}`, [{ id, type: '$metadata', data: { $maxAge: maxAgeSeconds }, metadata }], 'any');
  }

  async headPosition(): Promise<GlobalPosition | null> {
    // Readiness asks this: while appends are refused it fails (naming the event store),
    // after trying whether writes work again.
    await this.writes.untilWritable();
    // Only user events: a caller waiting for its subscription to reach the head must get
    // there, and subscriptions never hand out system events.
    const position = this.index.lastUserPosition;
    return position === null ? null : positionAt(position);
  }

  async close(): Promise<void> {
    this.closing = true;
    while (this.flushRunning) await this.flushDone;
    this.wakeWaiters();
    await this.checkpoints.settled();
    await this.writes.settled();
    // A stop after a failed write leaves nothing of the failed batch for the next start.
    const cut = this.writes.failure === null || (await this.writes.cutBack(this.active()).then(() => true, () => false));
    if (cut && this.writes.lockLost === null) await this.checkpoints.atClose(this.active(), this.activeTable, this.closeFile);
    await Promise.all(this.segments.map((segment) => segment.retire()));
    await this.closeFile?.close();
  }

  private async retriedAppendOrConflict(
    streamName: string,
    events: readonly NewEvent[],
    expected: ExpectedRevision,
    currentCount: number,
    firstRevision: number | null,
  ): Promise<AppendResult> {
    const conflict = new WrongExpectedRevisionError(streamName, expected, currentCount === 0 ? 'no_stream' : BigInt(currentCount - 1));
    const stream = this.index.streams.get(streamName);
    if (stream === undefined || firstRevision === null || firstRevision < stream.firstRevision || firstRevision + events.length > currentCount) {
      throw conflict;
    }
    const from = firstRevision - stream.firstRevision;
    const positions = stream.slice(from, from + events.length);
    // The original may still be waiting for its fsync; answer only once it is durable.
    await this.untilDurable(() => stream.firstRevision + stream.durableCount > firstRevision + events.length - 1);
    const stored = await Promise.all(positions.map((position) => this.reader.readRecord(position)));
    const sameEvents = stored.every((record, i) => record !== null && decodeEvent(record).id === events[i]?.id);
    if (!sameEvents) throw conflict;
    return { nextExpectedRevision: BigInt(firstRevision + events.length - 1), position: positionAt(positions[positions.length - 1] ?? 0) };
  }

  private scheduleFlush(): void {
    if (this.flushRunning) return;
    this.flushRunning = true;
    // Waiting one turn of the event loop lets appends issued together share one fsync.
    this.flushDone = new Promise<void>((resolve) => setImmediate(resolve)).then(() => this.flushLoop());
  }

  private async flushLoop(): Promise<void> {
    for (;;) {
      if (this.queue.length === 0 || this.writes.failure !== null || this.writes.lockLost !== null) {
        this.flushRunning = false;
        return;
      }
      // Appends arriving while this batch is written and synced form the next batch; a
      // batch stops where a new segment begins.
      const base = (this.queue[0] as PendingAppend).base;
      const split = this.queue.findIndex((append) => append.base !== base);
      const batch = split === -1 ? this.queue : this.queue.slice(0, split);
      this.queue = split === -1 ? [] : this.queue.slice(split);
      try {
        // A close file's record open did not use must not come to vouch for what is written now
        // (cleared before the probe already; this only guards).
        if (this.closeFile?.clearPending === true) await this.closeFile.beforeWrites();
        if (base !== this.active().base) await this.startSegment(base);
        const bytes = batch.length === 1 ? (batch[0] as PendingAppend).bytes : Buffer.concat(batch.map((a) => a.bytes));
        markFirstOfBatch(bytes);
        const start = (batch[0] as PendingAppend).fileOffset;
        await writeFully(this.active().handle, bytes, start);
        await this.active().handle.datasync();
        this.activeTable.coveredCrc = crc32(bytes, this.activeTable.coveredCrc ?? 0);
        this.recent.remember(base + start, bytes);
        this.commit(batch, bytes.length);
      } catch (error) {
        this.fail(error, batch);
      }
    }
  }

  /**
   * Seals the active segment now, so that compaction may rewrite what it holds (the next
   * append goes to a new segment); nothing when it holds no record. Queued appends are written
   * first; appends made meanwhile wait for the new segment.
   */
  protected async sealActiveSegment(): Promise<void> {
    while (this.flushRunning || this.queue.length > 0) {
      this.writes.assertWritable();
      await this.flushDone;
    }
    this.writes.assertWritable();
    if (this.reservedEnd <= SEGMENT_HEADER_SIZE) return;
    this.reservedBase += this.reservedEnd;
    this.reservedEnd = SEGMENT_HEADER_SIZE;
    // The flush loop stays off until the new segment exists (a failure here leaves the next
    // flush to start it, as after a full segment).
    this.flushRunning = true;
    try {
      await this.startSegment(this.reservedBase);
    } finally {
      this.flushRunning = false;
      if (this.queue.length > 0) this.scheduleFlush();
    }
  }

  /** Seals the active segment (its index checkpoint is written in the background) and creates the next. */
  private async startSegment(base: number): Promise<void> {
    const sealed = this.active();
    const sealedTable = this.activeTable;
    // A sealed segment ends exactly at its last append on disk too: nothing a failed write
    // or a write probe left behind may be read later as damage in a sealed segment.
    await sealed.handle.truncate(sealed.size);
    await sealed.handle.datasync();
    const handle = await createSegmentFile(this.options.io, this.directory, { base, generation: 0 });
    this.segments = [...this.segments, new Segment(this.directory, base, 0, handle, SEGMENT_HEADER_SIZE, null, this.pool)];
    this.activeTable = new SegmentTable(base, SEGMENT_HEADER_SIZE);
    this.activeTable.coveredCrc = crc32(encodeSegmentHeader({ base, generation: 0 }));
    this.recent.forget();
    sealed.seal();
    sealedTable.coveredSize = sealed.size;
    this.checkpoints.sealed(sealed, sealedTable);
  }

  private commit(batch: readonly PendingAppend[], bytes: number): void {
    let events = 0;
    const segment = this.active();
    for (const append of batch) {
      const stream = this.index.stream(append.streamName);
      stream.durableCount += append.records.length;
      for (const record of append.records) {
        segment.noteRecord(record.position, record.writtenAt);
        // The index's copy of the name: the table keeps it for as long as the segment is active.
        this.activeTable.add(stream.name, record.revision, record.position, record.writtenAt);
        if (!append.streamName.startsWith('$')) this.index.lastUserPosition = record.position;
      }
      if (append.maxAgeChange !== null) {
        this.index.applyMaxAge(append.maxAgeChange.target, append.maxAgeChange.maxAge);
        this.activeTable.maxAgeChanges.push(append.maxAgeChange);
      }
      segment.size = append.fileOffset + append.bytes.length;
      this.activeTable.coveredSize = segment.size;
      events += append.records.length;
    }
    this.checkpoints.afterCommit(segment, this.activeTable);
    for (const append of batch) append.resolve(append.result);
    this.wakeWaiters();
    try {
      this.options.onGroupCommit?.({ appends: batch.length, events, bytes } satisfies GroupCommit);
    } catch (error) {
      // An observer's bug must not stop the writer.
      console.error('onGroupCommit failed', error);
    }
  }

  /** A batch failed: every append not yet durable is rejected and their reserved positions given back. */
  private fail(error: unknown, batch: readonly PendingAppend[]): void {
    this.recent.forget();
    const failure = this.writes.failed(error);
    const rejected = [...batch, ...this.queue];
    this.queue = [];
    for (const append of rejected) {
      const stream = this.index.stream(append.streamName);
      stream.dropLast(stream.length - stream.durableCount);
    }
    for (const append of rejected) append.reject(failure);
    this.wakeWaiters();
  }

  /**
   * Right after open: read-only if open could not repair the tail (`readOnly`), or if a
   * write probe fails now (a start on a full disk), so readiness says so from the start.
   * Before that the close file is made ready (close-file.ts).
   */
  async checkWritableAtOpen(readOnly: Error | null, closeFile: CloseFileAtOpen): Promise<void> {
    // Before the probe: while there is space, the close file is created (an existing one is kept).
    this.closeFile = await CloseFile.prepare(this.options.io, this.directory, this.options.log, closeFile);
    if (readOnly !== null) this.writes.openedReadOnly(readOnly);
    else await this.writes.probeAtOpen();
  }

  protected waitForChange(): Promise<void> {
    return new Promise((resolve) => this.changeWaiters.push(resolve));
  }

  protected wakeWaiters(): void {
    const waiters = this.changeWaiters;
    this.changeWaiters = [];
    for (const wake of waiters) wake();
  }

  private async untilDurable(condition: () => boolean): Promise<void> {
    while (!condition()) {
      if (this.writes.failure !== null) throw this.writes.failure;
      if (this.closing && !this.flushRunning) throw new Error('The event store is closed');
      await this.waitForChange();
    }
  }
}
