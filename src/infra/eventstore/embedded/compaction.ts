/**
 * Compaction of one sealed segment: a copy without the reclaimed records replaces it.
 *
 * Steps, each of which a crash may interrupt:
 *   1. write the kept records to `<segment>.compact` (same base, generation + 1);
 *   2. fsync it;
 *   3. rename it over the segment (atomic: readers and a reopen see the old or the new
 *      file whole, never a mix);
 *   4. (by the store, reclamation.ts) swap the open segment for the copy at once: from the
 *      rename on, the name holds the copy, so whatever fails later (the directory sync, the
 *      index checkpoint) must not leave the old segment in use, reading by a name that no
 *      longer holds its file;
 *   5. fsync the directory, making the rename durable, and write the new index checkpoint.
 * Before 3 the original is untouched, and a reopen deletes the temporary file. After 3 the
 * new file is complete and synced; its old index checkpoint no longer matches its
 * generation, so a reopen scans the segment and writes a new one. Kept records keep their
 * global positions (compact records carry them), hence their order and every checkpoint,
 * revision and audit reference that names them.
 */
import { writeFully } from './files';
import type { StoreFile, StoreIo } from './io';
import {
  decodeEvent,
  encodeRecord,
  encodeSegmentHeader,
  FLAG_END_OF_APPEND,
  RECORD_PREFIX_SIZE,
  SEGMENT_HEADER_SIZE,
  setRecordFlags,
  type RawRecord,
  type SegmentHeader,
  type StoredEvent,
} from './record-format';
import { RecordCursor, SCAN_CHUNK_SIZE } from './record-cursor';
import { COMPACTION_SUFFIX } from './recovery';
import type { Segment } from './segment';
import { maxAgeChangeOf } from './segment-scan';
import { SegmentTable } from './segment-table';

/** Records decoded between two turns given back to the event loop (about a millisecond). */
const YIELD_EVERY_RECORDS = 500;
const WRITE_CHUNK_SIZE = 4 * 1024 * 1024;

export type CompactionStep = 'temporary-written' | 'temporary-synced' | 'renamed' | 'directory-synced' | 'index-written';

/** Called after each step; tests crash or fail there. */
export type CompactionHook = (step: CompactionStep, segmentFile: string) => void | Promise<void>;

/** Records of a stream older than `cutoff` (written-at, epoch ms) are reclaimed, except its newest. */
export interface ReclaimRule {
  readonly cutoff: number;
  readonly newestRevision: number;
}

/**
 * Rewrites the event of a kept record (a redaction: the erasure of personal fields written in
 * the clear before they were sealed); null keeps it as it is. Id, type, stream, revision,
 * position and metadata stay what they were.
 */
export type RecordRewrite = (streamName: string, event: StoredEvent) => StoredEvent | null;

export interface CompactedSegment {
  readonly header: SegmentHeader;
  readonly table: SegmentTable;
  /** Highest reclaimed revision of each stream that lost events. */
  readonly reclaimedThrough: ReadonlyMap<string, number>;
  readonly eventsReclaimed: number;
  readonly eventsRewritten: number;
  readonly bytesBefore: number;
  readonly bytesAfter: number;
}

function isReclaimed(record: RawRecord, rules: ReadonlyMap<string, ReclaimRule>): boolean {
  const rule = rules.get(record.streamName);
  return rule !== undefined && record.writtenAt < rule.cutoff && record.revision < rule.newestRevision;
}

/** The record as the compacted file holds it: compact format, each one a whole append. */
function keptBytes(record: RawRecord, rewritten: StoredEvent | null): Buffer {
  if (rewritten !== null) return encodeRecord({ ...record, flags: FLAG_END_OF_APPEND, event: rewritten });
  if (record.body[0] !== 0xe8) {
    const event = decodeEvent(record);
    return encodeRecord({ ...record, flags: FLAG_END_OF_APPEND, event });
  }
  const bytes = Buffer.allocUnsafe(RECORD_PREFIX_SIZE + record.body.length);
  bytes.writeUInt32LE(record.body.length, 0);
  record.body.copy(bytes, RECORD_PREFIX_SIZE);
  setRecordFlags(bytes, () => FLAG_END_OF_APPEND);
  return bytes;
}

/** Writes the compacted copy in chunks as it is produced: a segment may be many GiB. */
class ChunkedFileWriter {
  private parts: Buffer[] = [];
  private buffered = 0;
  private written = 0;

  constructor(private readonly handle: StoreFile) {}

  async add(bytes: Buffer): Promise<void> {
    this.parts.push(bytes);
    this.buffered += bytes.length;
    if (this.buffered >= WRITE_CHUNK_SIZE) await this.flush();
  }

  async flush(): Promise<void> {
    const chunk = Buffer.concat(this.parts);
    this.parts = [];
    this.buffered = 0;
    await writeFully(this.handle, chunk, this.written);
    this.written += chunk.length;
  }
}

interface Filtered {
  readonly table: SegmentTable;
  readonly reclaimedThrough: Map<string, number>;
  readonly eventsReclaimed: number;
  readonly eventsRewritten: number;
}

async function filterRecords(segment: Segment, rules: ReadonlyMap<string, ReclaimRule>, output: ChunkedFileWriter, rewrite: RecordRewrite | null): Promise<Filtered> {
  const cursor = new RecordCursor((o, l) => segment.read(o, l), segment.base, segment.size, SCAN_CHUNK_SIZE);
  const table = new SegmentTable(segment.base, SEGMENT_HEADER_SIZE);
  await output.add(encodeSegmentHeader({ base: segment.base, generation: segment.generation + 1 }));
  const reclaimedThrough = new Map<string, number>();
  let eventsReclaimed = 0;
  let eventsRewritten = 0;
  for (let offset = SEGMENT_HEADER_SIZE, seen = 0; offset < segment.size; seen++) {
    // Let appends and reads run between short slices of this work.
    if (seen % YIELD_EVERY_RECORDS === 0) await new Promise((resolve) => setImmediate(resolve));
    const result = await cursor.decodeAt(offset);
    if (result.kind !== 'ok') throw new Error(`${segment.file}: record at byte ${offset} is unreadable; not compacting it`);
    const record = result.record;
    offset += record.size;
    if (isReclaimed(record, rules)) {
      reclaimedThrough.set(record.streamName, record.revision);
      eventsReclaimed++;
      continue;
    }
    const rewritten = rewrite === null ? null : rewrite(record.streamName, decodeEvent(record));
    if (rewritten !== null) eventsRewritten++;
    const bytes = keptBytes(record, rewritten);
    table.add(record.streamName, record.revision, record.position, record.writtenAt, table.coveredSize);
    table.coveredSize += bytes.length;
    await output.add(bytes);
    if (record.streamName.startsWith('$$')) {
      const event = decodeEvent(record);
      const change = maxAgeChangeOf(record.streamName, event.type, event.data);
      if (change !== null) table.maxAgeChanges.push(change);
    }
  }
  await output.flush();
  return { table, reclaimedThrough, eventsReclaimed, eventsRewritten };
}

const changed = (filtered: Filtered): boolean => filtered.eventsReclaimed > 0 || filtered.eventsRewritten > 0;

/**
 * Steps 1–3 above; null when the segment holds nothing to reclaim or rewrite (its copy is dropped).
 * Once it returns a copy, the caller must swap it in before anything else can fail.
 */
export async function compactSegment(
  segment: Segment,
  rules: ReadonlyMap<string, ReclaimRule>,
  hook: CompactionHook,
  io: StoreIo,
  rewrite: RecordRewrite | null = null,
): Promise<CompactedSegment | null> {
  const header = { base: segment.base, generation: segment.generation + 1 };
  const temporary = `${segment.file}${COMPACTION_SUFFIX}`;
  let filtered: Filtered;
  try {
    // From the rename on, the name holds the copy: the segment must read through its own file.
    await segment.pin();
    const handle = await io.open(temporary, 'w');
    try {
      filtered = await filterRecords(segment, rules, new ChunkedFileWriter(handle), rewrite);
      if (changed(filtered)) {
        await hook('temporary-written', segment.file);
        await handle.datasync();
      }
    } finally {
      await handle.close();
    }
    if (changed(filtered)) await hook('temporary-synced', segment.file);
  } catch (error) {
    // A failed compaction leaves nothing behind; the segment is untouched.
    segment.unpin();
    await io.unlink(temporary).catch(() => undefined);
    throw error;
  }
  if (!changed(filtered)) {
    segment.unpin();
    await io.unlink(temporary);
    return null;
  }
  try {
    await io.rename(temporary, segment.file);
  } catch (error) {
    segment.unpin();
    await io.unlink(temporary).catch(() => undefined);
    throw error;
  }
  return {
    header,
    table: filtered.table,
    reclaimedThrough: filtered.reclaimedThrough,
    eventsReclaimed: filtered.eventsReclaimed,
    eventsRewritten: filtered.eventsRewritten,
    bytesBefore: segment.size,
    bytesAfter: filtered.table.coveredSize,
  };
}
