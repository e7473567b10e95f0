/**
 * The in-memory index of the whole log: for every stream the positions of its events,
 * the $maxAge of streams that have one, and what appends need (newest written-at time).
 * Built at open from the segment tables, then kept up to date by commits and compaction.
 */
import { CorruptEventLogError } from './errors';
import { PositionList } from './position-list';
import type { SegmentTable } from './segment-table';

export interface StreamIndex {
  /** Revision of positions[0]: above 0 once compaction reclaimed the stream's oldest events. */
  firstRevision: number;
  /** Positions of the stream's events, including appends reserved but not yet durable. */
  readonly positions: PositionList;
  /** How many of `positions` are durable, hence visible to readers. */
  durableCount: number;
}

export class LogIndex {
  readonly streams = new Map<string, StreamIndex>();
  readonly maxAgeSeconds = new Map<string, number>();
  lastUserPosition: number | null = null;
  lastWrittenAt = 0;

  stream(streamName: string): StreamIndex {
    let stream = this.streams.get(streamName);
    if (stream === undefined) {
      stream = { firstRevision: 0, positions: new PositionList(), durableCount: 0 };
      this.streams.set(streamName, stream);
    }
    return stream;
  }

  applyMaxAge(target: string, maxAge: number | null): void {
    if (maxAge === null) this.maxAgeSeconds.delete(target);
    else this.maxAgeSeconds.set(target, maxAge);
  }

  /**
   * Adds the records of a segment table from `from` on. Revisions must continue each
   * stream without a gap; a stream may start above 0 where compaction reclaimed its oldest.
   */
  applyTable(table: SegmentTable, from: number, file: string): void {
    const streams = table.names.map((name) => this.stream(name));
    const { refs, revisions, offsets, base } = table;
    for (let i = from; i < table.count; i++) {
      const stream = streams[refs[i] as number] as StreamIndex;
      const revision = revisions[i] as number;
      const position = base + (offsets[i] as number);
      const expected = stream.firstRevision + stream.positions.length;
      if (revision !== expected) {
        // A stream may start above revision 0 where compaction reclaimed its oldest events.
        if (stream.positions.length > 0 || revision < expected) {
          const name = table.names[table.refs[i] ?? 0] ?? '?';
          throw new CorruptEventLogError(file, table.fileOffsets[i] ?? position - base, `${name} jumps to revision ${revision} after ${expected} events`);
        }
        stream.firstRevision = revision;
      }
      stream.positions.push(position);
      stream.durableCount = stream.positions.length;
    }
    this.lastWrittenAt = Math.max(this.lastWrittenAt, table.lastWrittenAt);
    if (table.lastUserPosition !== null) this.lastUserPosition = Math.max(this.lastUserPosition ?? 0, table.lastUserPosition);
  }

  /** Drops a stream's events up to and including `revision` (reclaimed by compaction). */
  reclaimThrough(streamName: string, revision: number): void {
    const stream = this.streams.get(streamName);
    if (stream === undefined) return;
    const count = Math.min(revision + 1 - stream.firstRevision, stream.durableCount);
    if (count <= 0) return;
    stream.positions.dropFirst(count);
    stream.firstRevision += count;
    stream.durableCount -= count;
  }
}
