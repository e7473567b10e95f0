/**
 * One segment file of the log and how to find records in it by global position.
 *
 * Records of a segment that was never compacted sit at `position - base` (positions were
 * given out as base + file offset); a sampled list of record positions lets a scan start
 * near any position. A compacted segment keeps an exact table from position to file
 * offset. Reads are tracked so that a segment replaced by its compacted copy closes its
 * file only after the reads already under way have finished.
 *
 * A log that runs for years has thousands of (mostly compacted, small) segments, more than
 * a process may keep files open: sealed segments open their file when read, and a
 * HandlePool closes the least recently read ones beyond a few dozen. The active segment
 * keeps the file it is written through.
 */
import * as path from 'node:path';
import { BlockCache, type BlockSource } from './block-cache';
import { readFully } from './files';
import type { StoreFile, StoreIo } from './io';
import { SEGMENT_HEADER_SIZE } from './record-format';
import type { SegmentTable } from './segment-table';

export const LEGACY_LOG_FILE_NAME = 'events.log';
const SEGMENT_NAME = /^events-(\d{16})\.log$/;
/** Every Nth record's position of an uncompacted segment is kept to seek near any position. */
const SAMPLE_EVERY = 256;

/** The first segment keeps the single-file name of earlier versions, so old logs open as they are. */
export function segmentFileName(base: number): string {
  return base === 0 ? LEGACY_LOG_FILE_NAME : `events-${String(base).padStart(16, '0')}.log`;
}

export function segmentBaseOfName(name: string): number | null {
  if (name === LEGACY_LOG_FILE_NAME) return 0;
  const match = SEGMENT_NAME.exec(name);
  return match === null ? null : Number(match[1]);
}

/** Position − base and file offset of every record of a compacted segment, in order. */
interface CompactedLocator {
  readonly offsets: Float64Array;
  readonly fileOffsets: Float64Array;
}

export function locatorOf(table: SegmentTable): CompactedLocator {
  return { offsets: table.offsets.subarray(0, table.count), fileOffsets: table.fileOffsets.subarray(0, table.count) };
}

/**
 * Keeps at most `limit` sealed segments' files open, closing the least recently read ones;
 * and the blocks last read for single records, for every segment (block-cache.ts).
 */
export class HandlePool {
  private readonly recent = new Set<Segment>();
  readonly blocks: BlockCache;

  constructor(
    /** Sealed segments open their files through it. */
    readonly io: StoreIo,
    private readonly limit = 64,
    blocks = new BlockCache(),
  ) {
    this.blocks = blocks;
  }

  touch(segment: Segment): void {
    this.recent.delete(segment);
    this.recent.add(segment);
    if (this.recent.size <= this.limit) return;
    for (const candidate of this.recent) {
      if (this.recent.size <= this.limit) break;
      if (candidate.closeIdle()) this.recent.delete(candidate);
    }
  }

  forget(segment: Segment): void {
    this.recent.delete(segment);
    this.blocks.forget(segment);
  }
}

/** Index of the segment holding `position`: the greatest base at or below it (0 when none is). */
export function segmentIndexAt(segments: readonly { readonly base: number }[], position: number): number {
  let low = 0;
  let high = segments.length - 1;
  let found = 0;
  while (low <= high) {
    const middle = (low + high) >> 1;
    if ((segments[middle]?.base ?? 0) <= position) {
      found = middle;
      low = middle + 1;
    } else {
      high = middle - 1;
    }
  }
  return found;
}

export class Segment implements BlockSource {
  /** Bytes of complete, durable records (header included). */
  size: number;
  recordCount = 0;
  lastPosition: number | null = null;
  firstWrittenAt: number | null = null;
  retired = false;
  private readonly samples: number[] = [];
  private readonly inFlight = new Set<Promise<Buffer>>();
  private reader: Promise<StoreFile> | null;
  private sealed = false;
  /** Its file stays open until retired: a compaction is about to rename another file over its name. */
  private pinned = false;

  /** `writer`: the open file of the active segment (null for a sealed one, opened when read). */
  constructor(
    readonly directory: string,
    readonly base: number,
    readonly generation: number,
    private writer: StoreFile | null,
    size: number,
    private readonly compacted: CompactedLocator | null,
    private readonly pool: HandlePool,
  ) {
    this.size = size;
    this.reader = writer === null ? null : Promise.resolve(writer);
  }

  /** The file to write appends through; only the active segment has one. */
  get handle(): StoreFile {
    if (this.writer === null) throw new Error(`${this.file} is sealed`);
    return this.writer;
  }

  get file(): string {
    return path.join(this.directory, segmentFileName(this.base));
  }

  get isCompacted(): boolean {
    return this.compacted !== null;
  }

  /** Notes a durable record (in file order). */
  noteRecord(position: number, writtenAt: number): void {
    if (this.compacted === null && this.recordCount % SAMPLE_EVERY === 0) this.samples.push(position);
    this.recordCount++;
    this.lastPosition = position;
    this.firstWrittenAt ??= writtenAt;
  }

  /** Notes every record of a table at once (at open). */
  noteTable(table: SegmentTable): void {
    if (table.count === 0) return;
    if (this.compacted === null) {
      for (let i = this.recordCount === 0 ? 0 : SAMPLE_EVERY - (this.recordCount % SAMPLE_EVERY); i < table.count; i += SAMPLE_EVERY) {
        this.samples.push(table.positionAt(i));
      }
    }
    this.recordCount += table.count;
    this.lastPosition = table.positionAt(table.count - 1);
    this.firstWrittenAt ??= table.firstWrittenAt;
  }

  /** Where the record at `position` starts, or null when the segment has no such record. */
  fileOffsetOf(position: number): number | null {
    if (this.compacted === null) {
      const offset = position - this.base;
      return offset >= SEGMENT_HEADER_SIZE && offset < this.size ? offset : null;
    }
    const { offsets, fileOffsets } = this.compacted;
    const i = lowerBound(offsets, position - this.base);
    return offsets[i] === position - this.base ? (fileOffsets[i] ?? null) : null;
  }

  /** A record boundary from which a scan meets every record whose position is above `after`. */
  scanStart(after: number): number {
    if (this.compacted !== null) {
      const { offsets, fileOffsets } = this.compacted;
      const i = lowerBound(offsets, Math.max(0, after + 1 - this.base));
      return fileOffsets[i] ?? this.size;
    }
    let low = 0;
    let high = this.samples.length - 1;
    let floor = this.base + SEGMENT_HEADER_SIZE;
    while (low <= high) {
      const middle = (low + high) >> 1;
      const sample = this.samples[middle] ?? floor;
      if (sample <= after) {
        floor = sample;
        low = middle + 1;
      } else {
        high = middle - 1;
      }
    }
    return floor - this.base;
  }

  /** Bytes of the file; a short read (a record's) from the blocks kept when a record near it was read lately. */
  read(offset: number, length: number): Promise<Buffer> {
    if (this.retired) return Promise.reject(new Error('segment was replaced'));
    return this.pool.blocks.read(this, offset, length);
  }

  /** Bytes of the file, read from it. */
  readFile(offset: number, length: number): Promise<Buffer> {
    if (this.retired) return Promise.reject(new Error('segment was replaced'));
    const read = this.openReader().then((handle) => readFully(handle, offset, length));
    this.inFlight.add(read);
    if (this.writer === null || this.sealed) this.pool.touch(this);
    const forget = (): void => {
      this.inFlight.delete(read);
    };
    read.then(forget, forget);
    return read;
  }

  /** The open file; a failed open (EMFILE) is not kept, so the next read tries again. */
  private openReader(): Promise<StoreFile> {
    if (this.reader === null) {
      const opening = this.pool.io.open(this.file, 'r');
      this.reader = opening;
      opening.catch(() => {
        if (this.reader === opening) this.reader = null;
      });
    }
    return this.reader;
  }

  /**
   * Keeps the file open until the segment is retired: once a compacted copy is renamed
   * over its name, opening by name would find the copy, where its offsets mean nothing.
   */
  async pin(): Promise<void> {
    if (this.retired) throw new Error('segment was replaced');
    this.pinned = true;
    await this.openReader();
  }

  unpin(): void {
    this.pinned = false;
  }

  /** No more appends go here: from now on its file may be closed while unused. */
  seal(): void {
    this.sealed = true;
    this.pool.touch(this);
  }

  /** Closes a sealed segment's file if no read is under way (the next read opens it again). */
  closeIdle(): boolean {
    if (this.reader === null) return true;
    if ((this.writer !== null && !this.sealed) || this.inFlight.size > 0 || this.pinned) return false;
    const reader = this.reader;
    this.reader = null;
    this.writer = null;
    void reader.then((handle) => handle.close()).catch(() => undefined);
    return true;
  }

  /** Closes the file once the reads under way have finished. */
  async retire(): Promise<void> {
    this.retired = true;
    this.pool.forget(this);
    await Promise.allSettled([...this.inFlight]);
    const reader = this.reader;
    this.reader = null;
    if (this.writer !== null) await this.writer.close();
    else if (reader !== null) await (await reader.catch(() => null))?.close();
  }
}

function lowerBound(values: Float64Array, value: number): number {
  let low = 0;
  let high = values.length;
  while (low < high) {
    const middle = (low + high) >> 1;
    if ((values[middle] ?? 0) < value) low = middle + 1;
    else high = middle;
  }
  return low;
}
