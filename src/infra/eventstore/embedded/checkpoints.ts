/**
 * Index checkpoints written while the store runs (segment-index-file.ts): a sealed
 * segment's when it is sealed, and the active segment's each time it grew by
 * `checkpointBytes`, so that an open after a crash checks the covered part with one CRC-32
 * pass and scans only what follows. They are written in the background, one at a time and
 * in order (a sealed segment's checkpoint never overtaken by an older one of the same
 * segment), each encoded when asked for: the table may grow meanwhile. A checkpoint is a
 * cache: one that cannot be written is logged, and the next open scans instead.
 *
 * At a clean close the active segment gets its close record (record-format.ts), or when
 * that cannot be appended (a full disk) the close file gets it (close-file.ts), then its
 * checkpoint.
 *
 * While the store runs, every checkpoint goes through this one queue, that of a compacted
 * copy too (compacted()): one writer per `X.idx` and its `X.idx.tmp`, so a sealed segment's
 * checkpoint, still queued when compaction replaces the segment, can neither interleave with
 * the copy's through the shared temporary file nor land after it; it is skipped once the
 * segment it was encoded from is retired.
 */
import { CLOSE_FILE_NAME, segmentIdentity, type CloseFile } from './close-file';
import { errorMessage, writeFully } from './files';
import type { StoreIo } from './io';
import { encodeCloseRecord, SEGMENT_HEADER_SIZE } from './record-format';
import type { Segment } from './segment';
import { encodeSegmentIndex, writeEncodedIndex } from './segment-index-file';
import type { SegmentTable } from './segment-table';

export class CheckpointWriter {
  private queue: Promise<void> = Promise.resolve();
  /** Bytes of the active segment its last checkpoint covers (asked for, maybe not written yet). */
  private activeCovered = 0;
  private activeWriting = false;

  constructor(
    private readonly io: StoreIo,
    private readonly log: (message: string) => void,
    private readonly every: number,
  ) {}

  /** After a commit: the active segment's checkpoint, if it grew by `every` since the last (and none is being written). */
  afterCommit(active: Segment, table: SegmentTable): void {
    if (this.activeWriting || table.coveredSize - this.activeCovered < this.every) return;
    this.activeCovered = table.coveredSize;
    this.activeWriting = true;
    this.enqueue(active, table, () => {
      this.activeWriting = false;
    });
  }

  /** A segment was sealed: its checkpoint, and the new active segment counts from its start. */
  sealed(segment: Segment, table: SegmentTable): void {
    this.activeCovered = 0;
    this.enqueue(segment, table, () => undefined);
  }

  /**
   * A compacted copy replaced a segment: its checkpoint (with file offsets), written after
   * every checkpoint asked for before; rejects when it cannot be written.
   */
  compacted(copy: Segment, table: SegmentTable): Promise<void> {
    const bytes = encodeSegmentIndex(copy, table, true);
    const written = this.queue.then(() => writeEncodedIndex(copy.file, bytes, this.io));
    this.queue = written.catch(() => undefined);
    return written;
  }

  /** Resolves once every checkpoint asked for is written (or failed). */
  settled(): Promise<void> {
    return this.queue;
  }

  /**
   * At a clean close, once settled(): the close record (in the close file when it cannot be
   * appended), then the checkpoint of the active segment.
   */
  async atClose(active: Segment, table: SegmentTable, closeFile: CloseFile | null): Promise<void> {
    await this.writeCloseRecord(active, table, closeFile);
    this.enqueue(active, table, () => undefined);
    await this.queue;
  }

  /**
   * Marks the clean close in the log itself: the next open refuses damage in what it vouches
   * for instead of cutting it as a torn tail, even without the index checkpoint. When it
   * cannot be written (a full disk), the next open treats the end of the log as after a crash.
   */
  private async writeCloseRecord(active: Segment, table: SegmentTable, closeFile: CloseFile | null): Promise<void> {
    const crc = table.coveredCrc;
    if (active.size < SEGMENT_HEADER_SIZE || crc === null) return;
    try {
      await writeFully(active.handle, encodeCloseRecord({ offset: active.size, crc }), active.size);
      await active.handle.datasync();
    } catch (error) {
      await active.handle.truncate(active.size).catch(() => undefined);
      // The bytes of the segment are never touched for it: the close file, overwritten in place, takes it.
      const identity = await segmentIdentity(active.handle, active.size).catch(() => null);
      const kept = identity !== null && closeFile !== null && (await closeFile.record({ base: active.base, generation: active.generation, length: active.size, crc, identity }));
      this.log(
        kept
          ? `Event log: could not mark the clean close of ${active.file} in the segment (${errorMessage(error)}); marked it in ${CLOSE_FILE_NAME}`
          : `Event log: could not mark the clean close of ${active.file} (${errorMessage(error)}); the next open checks its end as after a crash`,
      );
    }
  }

  private enqueue(segment: Segment, table: SegmentTable, done: () => void): void {
    const bytes = encodeSegmentIndex(segment, table);
    this.queue = this.queue
      // A segment compaction replaced meanwhile: the copy's checkpoint follows in this queue.
      .then(() => (segment.retired ? undefined : writeEncodedIndex(segment.file, bytes, this.io)))
      .catch((error: unknown) => this.log(`Event log: could not write the index checkpoint of ${segment.file} (${errorMessage(error)}); the next open scans it`))
      .finally(done);
  }
}
