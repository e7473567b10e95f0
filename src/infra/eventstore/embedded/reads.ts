/**
 * Reading the log by position and by stream: finding a record's segment and file offset,
 * serving what was just committed from memory, and stream reads with $maxAge applied.
 */
import type { ReadStreamOptions, RecordedEvent } from '../port';
import { CorruptEventLogError } from './errors';
import type { LogIndex } from './log-index';
import type { RawRecord } from './record-format';
import { readRecordAt, type ReadAt } from './record-cursor';
import { ownBytes } from './own-bytes';
import type { RecentCommits } from './recent-commits';
import { segmentIndexAt, type Segment } from './segment';
import type { StreamIndex } from './stream-index';
import { toRecordedEvent } from './recorded-event';

const STREAM_READ_BATCH = 32;
/** Records read from segment files that are kept decoded (the last ones read)... */
const READ_RECORDS_KEPT = 2048;
/** ...and the bytes they may hold (their lengths): a record larger than this is not kept. */
const READ_RECORDS_BYTES = 4 * 1024 * 1024;

/** A record read from a segment file, kept for the next read of its position. */
interface KeptRecord {
  /** The segment it was read from: a compaction replaces a segment by another object, so its records are never served from here again. */
  readonly segment: Segment;
  readonly record: RawRecord;
}

export interface ReadSource {
  readonly index: LogIndex;
  readonly recent: RecentCommits;
  segments(): readonly Segment[];
  now(): number;
  isClosing(): boolean;
}

export class LogReader {
  /**
   * The last records read from segment files, by position: a stream read at each command (a
   * user's stream at each of their logins) would read, check and decode the same records again.
   * A record's bytes never change while its segment is in use; a compaction (reclaimed
   * heartbeats, an erased person's plaintext rewritten) puts another segment in its place.
   */
  private readonly kept = new Map<number, KeptRecord>();
  /** The bytes of the records in `kept`. */
  private keptBytes = 0;
  /** The event of each record handed out, decoded once for every reader (records are shared: recent-commits.ts and `kept`). */
  private readonly events = new WeakMap<RawRecord, RecordedEvent>();

  constructor(private readonly source: ReadSource) {}

  /** The event a record holds, decoded (and deep-frozen) once however many readers it is handed to: none can change it for another. */
  eventOf(record: RawRecord): RecordedEvent {
    let event = this.events.get(record);
    if (event === undefined) {
      event = toRecordedEvent(record);
      this.events.set(record, event);
    }
    return event;
  }

  /** The segment that holds `position` (the one with the greatest base at or below it). */
  segmentOf(position: number): Segment | undefined {
    const segments = this.source.segments();
    return segments.length === 0 ? undefined : segments[segmentIndexAt(segments, position)];
  }

  readerOf(segment: Segment): ReadAt {
    if (segment.isCompacted) return (offset, length) => segment.read(offset, length);
    return (offset, length) => this.source.recent.read(segment.base + offset, length, segment.base + segment.size) ?? segment.read(offset, length);
  }

  /** The record at `fileOffset` of a segment never compacted, from the last commits (decoded once for every reader), or undefined. */
  recentRecord(segment: Segment, fileOffset: number): RawRecord | undefined {
    if (segment.isCompacted) return undefined;
    return this.source.recent.record(segment.base, segment.base + fileOffset, segment.base + segment.size);
  }

  /**
   * The durable record at `position`, or null when compaction reclaimed it. A read that
   * meets a segment just replaced by its compacted copy is done again in the copy.
   */
  async readRecord(position: number): Promise<RawRecord | null> {
    for (;;) {
      if (this.source.isClosing()) throw new Error('The event store is closed');
      const segment = this.segmentOf(position);
      const offset = segment?.fileOffsetOf(position) ?? null;
      if (segment === undefined || offset === null) return null;
      const kept = this.kept.get(position);
      if (kept !== undefined && kept.segment === segment && !segment.retired) return kept.record;
      let record: RawRecord;
      let fromFile = false;
      try {
        const recent = this.recentRecord(segment, offset);
        fromFile = recent === undefined;
        record = recent ?? (await readRecordAt(this.readerOf(segment), segment.base, offset, segment.size, segment.file));
      } catch (error) {
        if (!segment.retired) throw error;
        continue;
      }
      // The record found must be the one asked for: never hand out another one.
      if (record.position === position) {
        // The kept copy is what every read of the position hands out from now on, so its event is decoded once.
        return fromFile && !segment.retired ? this.keep(position, segment, record) : record;
      }
      if (!segment.retired) throw new CorruptEventLogError(segment.file, offset, `the record there has position ${record.position}, not ${position}`);
    }
  }

  async *streamEvents(streamName: string, options: ReadStreamOptions): AsyncGenerator<RecordedEvent> {
    if (this.source.isClosing()) throw new Error('The event store is closed');
    const stream = this.source.index.streams.get(streamName);
    if (stream === undefined || stream.durableCount === 0) return;
    const end = stream.firstRevision + stream.durableCount;
    const backwards = options.direction === 'backwards';
    const maxAge = this.source.index.maxAgeSeconds.get(streamName);
    const cutoff = maxAge === undefined ? null : this.source.now() - maxAge * 1000;
    // Forwards, aged-out events are skipped by a binary search. Backwards, the walk stops at
    // the first aged-out one (written-at times never decrease along the log): reading the
    // newest event of a $maxAge stream — what presence expiry does — costs one record.
    const oldestVisible = cutoff === null || backwards ? stream.firstRevision : await this.firstRevisionWrittenSince(stream, end, cutoff);
    const from = options.fromRevision === undefined ? undefined : Number(options.fromRevision);
    let revision = backwards ? Math.min(from ?? end - 1, end - 1) : Math.max(from ?? 0, oldestVisible);
    const step = backwards ? -1 : 1;
    let remaining = options.maxCount ?? Number.POSITIVE_INFINITY;
    while (remaining > 0) {
      // Compaction may have reclaimed events since the last batch: never read below the first.
      const stop = backwards ? stream.firstRevision - 1 : end;
      if (backwards ? revision <= stop : revision >= stop) return;
      if (!backwards && revision < stream.firstRevision) revision = stream.firstRevision;
      const batchSize = Math.min(STREAM_READ_BATCH, Math.abs(stop - revision), remaining);
      const reads = Array.from({ length: batchSize }, (_, i) => this.readRevision(stream, revision + i * step));
      for (const record of await Promise.all(reads)) {
        if (record === null) continue;
        if (backwards && cutoff !== null && record.writtenAt < cutoff) return;
        yield this.eventOf(record);
      }
      revision += batchSize * step;
      remaining -= batchSize;
    }
  }

  /**
   * Drops the records kept from a segment that a compaction replaced, at once: an erasure's
   * rewrite leaves nothing of the person's old plaintext reachable from here.
   */
  forgetSegment(segment: Segment): void {
    for (const [position, kept] of this.kept) if (kept.segment === segment) this.drop(position, kept);
  }

  /** Keeps the record (a copy with bytes of its own) and answers what is kept, or the record itself when it is too large to keep. */
  private keep(position: number, segment: Segment, record: RawRecord): RawRecord {
    const previous = this.kept.get(position);
    if (previous !== undefined) this.drop(position, previous);
    if (record.body.length > READ_RECORDS_BYTES) return record;
    // Its own bytes: the read's buffer (a few KiB around it) is not held on to.
    const copy: RawRecord = { ...record, body: ownBytes(record.body) };
    this.kept.set(position, { segment, record: copy });
    this.keptBytes += record.body.length;
    while (this.kept.size > READ_RECORDS_KEPT || this.keptBytes > READ_RECORDS_BYTES) {
      const [oldest, kept] = this.kept.entries().next().value as [number, KeptRecord];
      this.drop(oldest, kept);
    }
    return copy;
  }

  private drop(position: number, kept: KeptRecord): void {
    this.kept.delete(position);
    this.keptBytes -= kept.record.body.length;
  }

  private async readRevision(stream: StreamIndex, revision: number): Promise<RawRecord | null> {
    const position = stream.at(revision - stream.firstRevision);
    return position === undefined ? null : this.readRecord(position);
  }

  /** Binary search: written-at times never decrease along the log (append clamps them). */
  private async firstRevisionWrittenSince(stream: StreamIndex, end: number, cutoff: number): Promise<number> {
    let low = stream.firstRevision;
    let high = end;
    while (low < high) {
      const middle = (low + high) >> 1;
      const record = await this.readRevision(stream, middle);
      if (record === null || record.writtenAt < cutoff) low = middle + 1;
      else high = middle;
    }
    return low;
  }}
