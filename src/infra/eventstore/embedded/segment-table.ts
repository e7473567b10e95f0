/**
 * What one segment holds, record by record, without payloads: stream, revision, position
 * and file offset of each record, plus the $maxAge changes it makes. The active
 * segment's table grows with every commit; a sealed segment's table is saved as its
 * index checkpoint (segment-index-file.ts) and rebuilt from it at open instead of
 * scanning the segment.
 */
export interface MaxAgeChange {
  readonly target: string;
  readonly maxAge: number | null;
}

function grownFloat64(array: Float64Array, needed: number): Float64Array {
  if (needed <= array.length) return array;
  const next = new Float64Array(Math.max(needed, array.length * 2));
  next.set(array);
  return next;
}

function grownUint32(array: Uint32Array, needed: number): Uint32Array {
  if (needed <= array.length) return array;
  const next = new Uint32Array(Math.max(needed, array.length * 2));
  next.set(array);
  return next;
}

export class SegmentTable {
  readonly names: string[] = [];
  private readonly nameRefs = new Map<string, number>();
  refs: Uint32Array = new Uint32Array(64);
  revisions: Float64Array = new Float64Array(64);
  positions: Float64Array = new Float64Array(64);
  fileOffsets: Uint32Array = new Uint32Array(64);
  count = 0;
  readonly maxAgeChanges: MaxAgeChange[] = [];
  firstWrittenAt: number | null = null;
  lastWrittenAt = 0;
  lastUserPosition: number | null = null;
  /** Bytes of the segment file (header included) that this table covers. */
  coveredSize: number;
  /** CRC-32 of those bytes, when known: lets open trust a checkpoint of the active segment. */
  coveredCrc: number | null = null;

  constructor(coveredSize: number) {
    this.coveredSize = coveredSize;
  }

  refOf(streamName: string): number {
    let ref = this.nameRefs.get(streamName);
    if (ref === undefined) {
      ref = this.names.length;
      this.names.push(streamName);
      this.nameRefs.set(streamName, ref);
    }
    return ref;
  }

  add(streamName: string, revision: number, position: number, fileOffset: number, writtenAt: number): void {
    const i = this.count;
    this.refs = grownUint32(this.refs, i + 1);
    this.revisions = grownFloat64(this.revisions, i + 1);
    this.positions = grownFloat64(this.positions, i + 1);
    this.fileOffsets = grownUint32(this.fileOffsets, i + 1);
    this.refs[i] = this.refOf(streamName);
    this.revisions[i] = revision;
    this.positions[i] = position;
    this.fileOffsets[i] = fileOffset;
    this.count = i + 1;
    this.firstWrittenAt ??= writtenAt;
    this.lastWrittenAt = Math.max(this.lastWrittenAt, writtenAt);
    if (!streamName.startsWith('$')) this.lastUserPosition = position;
  }

  /** Loads whole columns at once (from an index checkpoint). */
  fill(columns: { refs: Uint32Array; revisions: Float64Array; positions: Float64Array; fileOffsets: Uint32Array }): void {
    this.refs = columns.refs;
    this.revisions = columns.revisions;
    this.positions = columns.positions;
    this.fileOffsets = columns.fileOffsets;
    this.count = columns.refs.length;
  }

  addName(streamName: string): void {
    this.refOf(streamName);
  }
}
