/**
 * Sequential decoding of the records of one segment file, reading ahead in chunks so a
 * scan or a replay costs few system calls.
 */
import { CorruptEventLogError } from './errors';
import { decodeRecord, isRecordMarker, FLAG_FIRST_OF_BATCH, RECORD_PREFIX_SIZE, type DecodeResult, type RawRecord } from './record-format';

/** Reads `length` bytes at a file offset (fewer at the end of the file). */
export type ReadAt = (offset: number, length: number) => Promise<Buffer>;

export const SCAN_CHUNK_SIZE = 4 * 1024 * 1024;
const POINT_READ_SIZE = 4096;

export class RecordCursor {
  private buffer: Buffer = Buffer.alloc(0);
  private bufferStart = 0;

  constructor(
    private readonly readAt: ReadAt,
    private readonly segmentBase: number,
    private readonly limit: number,
    private readonly chunkSize: number,
  ) {}

  async decodeAt(offset: number): Promise<DecodeResult> {
    let needed = RECORD_PREFIX_SIZE;
    for (;;) {
      const relative = offset - this.bufferStart;
      if (relative >= 0 && relative + needed <= this.buffer.length) {
        const result = decodeRecord(this.buffer, relative, offset, this.segmentBase);
        if (result.kind !== 'incomplete') return result;
        needed = result.needed;
        if (relative + needed <= this.buffer.length) return result;
      }
      if (offset + needed > this.limit) return { kind: 'incomplete', needed };
      const length = Math.min(Math.max(this.chunkSize, needed), this.limit - offset);
      // A fresh buffer per read: records already handed out keep pointing into the old one.
      this.buffer = await this.readAt(offset, length);
      this.bufferStart = offset;
      if (this.buffer.length < needed) return { kind: 'incomplete', needed };
    }
  }
}

/** The record at `offset`; damage is refused naming the file and the byte. */
export async function readRecordAt(readAt: ReadAt, segmentBase: number, offset: number, limit: number, file: string): Promise<RawRecord> {
  const cursor = new RecordCursor(readAt, segmentBase, limit, Math.min(POINT_READ_SIZE, limit - offset));
  const result = await cursor.decodeAt(offset);
  if (result.kind === 'ok') return result.record;
  throw new CorruptEventLogError(file, offset, `record unreadable (${result.kind === 'invalid' ? result.reason : 'truncated'})`);
}

/** File offset of the first intact record after `from` that starts a group commit, or null. */
export async function findBatchStart(readAt: ReadAt, segmentBase: number, from: number, fileEnd: number): Promise<number | null> {
  for (let chunkStart = from; chunkStart < fileEnd; chunkStart += SCAN_CHUNK_SIZE) {
    // Overlap by a prefix so a marker just past the chunk is still seen.
    const chunk = await readAt(chunkStart, Math.min(SCAN_CHUNK_SIZE + RECORD_PREFIX_SIZE + 1, fileEnd - chunkStart));
    const candidates = Math.min(SCAN_CHUNK_SIZE, chunk.length);
    for (let i = 0; i < candidates; i++) {
      if (!isRecordMarker(chunk[i + RECORD_PREFIX_SIZE])) continue;
      let candidate = decodeRecord(chunk, i, chunkStart + i, segmentBase);
      if (candidate.kind === 'incomplete') {
        candidate = await new RecordCursor(readAt, segmentBase, fileEnd, candidate.needed).decodeAt(chunkStart + i);
      }
      if (candidate.kind === 'ok' && candidate.record.flags & FLAG_FIRST_OF_BATCH) return chunkStart + i;
    }
  }
  return null;
}
