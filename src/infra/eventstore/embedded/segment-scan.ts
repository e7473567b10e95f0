/**
 * Reading a segment record by record into its SegmentTable: at open, for a segment
 * without a usable index checkpoint, and for the tail of the active segment after its
 * checkpoint.
 *
 * The last record of each append carries END_OF_APPEND, so an append whose records are
 * not all intact is dropped whole. In the active segment a damaged or cut record followed
 * by no later group commit is a torn last write (never acknowledged: dropped); followed by
 * the start of a later group commit it is damage to synced data (refused). A sealed
 * segment was synced whole before the next one was created: any damage there is refused.
 */
import { CorruptEventLogError } from './errors';
import { decodeEvent, FLAG_END_OF_APPEND, type RawRecord } from './record-format';
import { findBatchStart, RecordCursor, SCAN_CHUNK_SIZE, type ReadAt } from './record-cursor';
import type { SegmentTable } from './segment-table';

const METADATA_EVENT_TYPE = '$metadata';

/** EventStoreDB convention: the metadata of stream `s` lives in stream `$$s`. */
export function metadataTarget(streamName: string): string | null {
  return streamName.startsWith('$$') ? streamName.slice(2) : null;
}

export function maxAgeFromMetadata(data: unknown): number | null {
  if (typeof data !== 'object' || data === null) return null;
  const metadata: { $maxAge?: unknown } = data;
  const maxAge = metadata.$maxAge;
  return typeof maxAge === 'number' && Number.isFinite(maxAge) && maxAge > 0 ? maxAge : null;
}

/** The $maxAge change an event makes, if it is stream metadata. */
export function maxAgeChangeOf(streamName: string, type: string, data: unknown): { target: string; maxAge: number | null } | null {
  const target = metadataTarget(streamName);
  return target !== null && type === METADATA_EVENT_TYPE ? { target, maxAge: maxAgeFromMetadata(data) } : null;
}

export interface ScanTarget {
  readonly file: string;
  readonly base: number;
  readonly readAt: ReadAt;
  /** Bytes in the file. */
  readonly fileSize: number;
  /** Whether the segment is sealed (damage anywhere is refused). */
  readonly sealed: boolean;
  /**
   * Bytes the record of a clean close, or an index checkpoint whose checksum no longer
   * matches, vouches for: acknowledged data, where damage is refused, never dropped as a
   * torn tail.
   */
  readonly vouchedEnd?: number;
  /** Who vouches for those bytes, for a refusal's message, when it is not a clean close or a checkpoint (the close file). */
  readonly vouchedBy?: string;
}

/** Where complete appends end, and whether bytes after that are a torn tail. */
export interface ScanResult {
  readonly end: number;
}

function addRecord(table: SegmentTable, record: RawRecord): void {
  table.add(record.streamName, record.revision, record.position, record.writtenAt, record.fileOffset);
  if (record.streamName.startsWith('$$')) {
    const event = decodeEvent(record);
    const change = maxAgeChangeOf(record.streamName, event.type, event.data);
    if (change !== null) table.maxAgeChanges.push(change);
  }
}

/** Adds the records from table.coveredSize on to the table; returns where complete appends end. */
export async function scanSegment(target: ScanTarget, table: SegmentTable): Promise<ScanResult> {
  const { file, fileSize } = target;
  const cursor = new RecordCursor(target.readAt, target.base, fileSize, SCAN_CHUNK_SIZE);
  let unfinished: RawRecord[] = [];
  let offset = table.coveredSize;
  let end = offset;
  while (offset < fileSize) {
    const result = await cursor.decodeAt(offset);
    if (result.kind !== 'ok') {
      const reason = result.kind === 'invalid' ? result.reason : 'record runs past the end of file';
      if (target.sealed) throw new CorruptEventLogError(file, offset, `${reason} in a sealed segment`);
      if (offset < (target.vouchedEnd ?? 0)) throw new CorruptEventLogError(file, offset, `${reason} in acknowledged data (${target.vouchedBy ?? 'a clean close or an index checkpoint vouches for it'})`);
      // A batch is written only after the previous one was synced, so damage followed by
      // the start of a later batch hit synced (acknowledged) data. Without one, the damage
      // lies in the last batch, which a crash may leave torn anywhere, holes included.
      const laterBatch = await findBatchStart(target.readAt, target.base, offset + 1, fileSize);
      if (laterBatch !== null) {
        throw new CorruptEventLogError(file, offset, `${reason}, yet a later write starts intact at byte ${laterBatch}`);
      }
      break;
    }
    const record = result.record;
    const first = unfinished[0];
    if (first !== undefined && first.streamName !== record.streamName) {
      throw new CorruptEventLogError(file, first.fileOffset, 'an append of several events is cut short in the middle of the log');
    }
    unfinished.push(record);
    offset += record.size;
    if (record.flags & FLAG_END_OF_APPEND) {
      for (const done of unfinished) addRecord(table, done);
      unfinished = [];
      end = offset;
    }
  }
  if (target.sealed && end < fileSize) {
    throw new CorruptEventLogError(file, end, 'an append is cut short at the end of a sealed segment');
  }
  if (end < (target.vouchedEnd ?? 0)) throw new CorruptEventLogError(file, end, `an append is cut short in acknowledged data (${target.vouchedBy ?? 'a clean close or an index checkpoint vouches for it'})`);
  table.coveredSize = end;
  return { end };
}
