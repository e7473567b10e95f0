/**
 * The in-memory index of the whole log: for every stream the positions of its events,
 * the $maxAge of streams that have one, and what appends need (newest written-at time).
 * Built at open from the segment tables, then kept up to date by commits and compaction.
 */
import { CorruptEventLogError } from './errors';
import type { SegmentTable } from './segment-table';
import { StreamIndex } from './stream-index';

/** Streams whose expired events reclamation removes (reclamation.ts). */
const RECLAIMED_STREAM_PREFIX = 'heartbeat-';

export class LogIndex {
  readonly streams = new Map<string, StreamIndex>();
  readonly maxAgeSeconds = new Map<string, number>();
  lastUserPosition: number | null = null;
  lastWrittenAt = 0;

  /**
   * The stream's entry, made on its first event. Its `name` is the string every table and
   * map of the index keys it by: the same name decoded from each segment, or given by each
   * append, would otherwise be kept once per holder.
   */
  stream(streamName: string): StreamIndex {
    let stream = this.streams.get(streamName);
    if (stream === undefined) {
      stream = new StreamIndex(streamName);
      this.streams.set(streamName, stream);
      // A $maxAge is usually set before the stream's first event: its key becomes the same string.
      const maxAge = this.maxAgeSeconds.size === 0 ? undefined : this.maxAgeSeconds.get(streamName);
      if (maxAge !== undefined) {
        this.maxAgeSeconds.delete(streamName);
        this.maxAgeSeconds.set(streamName, maxAge);
      }
    }
    return stream;
  }

  applyMaxAge(target: string, maxAge: number | null): void {
    if (maxAge === null) this.maxAgeSeconds.delete(target);
    else this.maxAgeSeconds.set(this.streams.get(target)?.name ?? target, maxAge);
  }

  /**
   * Adds the records of segment tables (in log order). Revisions must continue each stream
   * without a gap; a stream may start above 0 where compaction reclaimed its oldest.
   * Counts first, so that millions of records (at open) land without growing any list.
   */
  applyTables(tables: ReadonlyArray<{ readonly table: SegmentTable; readonly file: string }>): void {
    const streamsOf = tables.map(({ table }) => {
      const streams = table.names.map((name) => this.stream(name));
      table.shareNames(streams);
      return streams;
    });
    const counts = new Map<StreamIndex, number>();
    for (const [t, { table }] of tables.entries()) {
      const perRef = new Uint32Array(table.names.length);
      for (let i = 0; i < table.count; i++) perRef[table.refs[i] as number]++;
      for (const [ref, stream] of (streamsOf[t] as StreamIndex[]).entries()) counts.set(stream, (counts.get(stream) ?? 0) + (perRef[ref] ?? 0));
    }
    for (const [stream, count] of counts) stream.reserve(count);
    for (const [t, { table, file }] of tables.entries()) this.applyRecords(table, streamsOf[t] as StreamIndex[], file);
  }

  private applyRecords(table: SegmentTable, streams: readonly StreamIndex[], file: string): void {
    const { refs, revisions, offsets, base } = table;
    const next = Float64Array.from(streams, (stream) => stream.firstRevision + stream.length);
    // Streams of many events (reserved above) take their positions straight into their list:
    // at open, millions of them, as fast as one array write each.
    const lists = streams.map((stream) => stream.manyPositions());
    for (let i = 0; i < table.count; i++) {
      const ref = refs[i] as number;
      const revision = revisions[i] as number;
      if (revision !== next[ref]) {
        this.startStreamAt(table, streams[ref] as StreamIndex, i, file);
        lists[ref] = (streams[ref] as StreamIndex).manyPositions();
      }
      next[ref] = revision + 1;
      const list = lists[ref];
      if (list !== null) list.push(base + (offsets[i] as number));
      else (streams[ref] as StreamIndex).push(base + (offsets[i] as number));
    }
    for (const stream of streams) stream.durableCount = stream.length;
    this.lastWrittenAt = Math.max(this.lastWrittenAt, table.lastWrittenAt);
    if (table.lastUserPosition !== null) this.lastUserPosition = Math.max(this.lastUserPosition ?? 0, table.lastUserPosition);
    for (const change of table.maxAgeChanges) this.applyMaxAge(change.target, change.maxAge);
  }

  /** A revision other than the next: allowed only as the first of a stream whose oldest events were reclaimed. */
  private startStreamAt(table: SegmentTable, stream: StreamIndex, i: number, file: string): void {
    const revision = table.revisions[i] as number;
    const expected = stream.firstRevision + stream.length;
    if (stream.length > 0 && revision > expected && (table.names[table.refs[i] as number] ?? '').startsWith(RECLAIMED_STREAM_PREFIX)) {
      // A heartbeat stream cut in the middle by reclamation of earlier versions: what
      // comes before the gap is older still, hence expired too; it is dropped, so that
      // such a log opens again.
      stream.dropFirst(stream.length);
      stream.firstRevision = revision;
      return;
    }
    if (stream.length > 0 || revision < expected) {
      const name = table.names[table.refs[i] as number] ?? '?';
      const offset = table.fileOffsets[i] ?? table.positionAt(i) - table.base;
      throw new CorruptEventLogError(file, offset, `${name} jumps to revision ${revision} after ${expected} events`);
    }
    stream.firstRevision = revision;
  }

  /** Drops a stream's events up to and including `revision` (reclaimed by compaction). */
  reclaimThrough(streamName: string, revision: number): void {
    const stream = this.streams.get(streamName);
    if (stream === undefined) return;
    const count = Math.min(revision + 1 - stream.firstRevision, stream.durableCount);
    if (count <= 0) return;
    stream.dropFirst(count);
    stream.firstRevision += count;
    stream.durableCount -= count;
  }
}
