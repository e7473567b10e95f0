/**
 * What one segment holds, record by record, without payloads: stream, revision, position
 * and (in compacted segments) file offset of each record, plus the $maxAge changes it
 * makes. Positions are kept relative to the segment's base (doubles: a single-file log of
 * an earlier version can be one segment of many GiB). The active segment's table grows with every commit; a sealed
 * segment's table is saved as its index checkpoint (segment-index-file.ts) and rebuilt
 * from it at open instead of scanning the segment.
 */
export interface MaxAgeChange {
  readonly target: string;
  readonly maxAge: number | null;
}

function grown<T extends Float64Array | Uint32Array>(array: T, needed: number, make: (length: number) => T): T {
  if (needed <= array.length) return array;
  const next = make(Math.max(needed, array.length * 2, 64));
  next.set(array);
  return next;
}

export interface TableColumns {
  readonly refs: Uint32Array;
  readonly revisions: Float64Array;
  readonly offsets: Float64Array;
  readonly fileOffsets: Float64Array;
}

export class SegmentTable {
  readonly names: string[] = [];
  /** Built on the first add: tables loaded from a checkpoint are rarely added to. */
  private nameRefs: Map<string, number> | null = null;
  refs: Uint32Array = new Uint32Array(64);
  revisions: Float64Array = new Float64Array(64);
  /** Position − base of each record. */
  offsets: Float64Array = new Float64Array(64);
  /** Where each record starts in the file; filled only where it differs from `offsets` (compacted segments). */
  fileOffsets: Float64Array = new Float64Array(0);
  count = 0;
  readonly maxAgeChanges: MaxAgeChange[] = [];
  firstWrittenAt: number | null = null;
  lastWrittenAt = 0;
  lastUserPosition: number | null = null;
  /** Bytes of the segment file (header included) that this table covers. */
  coveredSize: number;
  /** CRC-32 of those bytes, when known: lets open trust a checkpoint of the active segment. */
  coveredCrc: number | null = null;

  constructor(
    readonly base: number,
    coveredSize: number,
  ) {
    this.coveredSize = coveredSize;
  }

  refOf(streamName: string): number {
    this.nameRefs ??= new Map(this.names.map((name, i) => [name, i]));
    let ref = this.nameRefs.get(streamName);
    if (ref === undefined) {
      ref = this.names.length;
      this.names.push(streamName);
      this.nameRefs.set(streamName, ref);
    }
    return ref;
  }

  positionAt(i: number): number {
    return this.base + (this.offsets[i] ?? 0);
  }

  add(streamName: string, revision: number, position: number, writtenAt: number, fileOffset?: number): void {
    const i = this.count;
    this.refs = grown(this.refs, i + 1, (n) => new Uint32Array(n));
    this.revisions = grown(this.revisions, i + 1, (n) => new Float64Array(n));
    this.offsets = grown(this.offsets, i + 1, (n) => new Float64Array(n));
    this.refs[i] = this.refOf(streamName);
    this.revisions[i] = revision;
    this.offsets[i] = position - this.base;
    if (fileOffset !== undefined) {
      this.fileOffsets = grown(this.fileOffsets, i + 1, (n) => new Float64Array(n));
      this.fileOffsets[i] = fileOffset;
    }
    this.count = i + 1;
    this.firstWrittenAt ??= writtenAt;
    this.lastWrittenAt = Math.max(this.lastWrittenAt, writtenAt);
    if (!streamName.startsWith('$')) this.lastUserPosition = position;
  }

  /** Loads whole columns at once (from an index checkpoint). */
  fill(columns: TableColumns, count: number): void {
    this.refs = columns.refs;
    this.revisions = columns.revisions;
    this.offsets = columns.offsets;
    this.fileOffsets = columns.fileOffsets;
    this.count = count;
  }

  /**
   * Takes the index's copies of its names: `streams[ref]` is the index's entry for
   * `names[ref]`. The active segment's table lives as long as the store, and its names would
   * otherwise be second copies of the index's keys.
   */
  shareNames(streams: ReadonlyArray<{ readonly name: string }>): void {
    streams.forEach((stream, ref) => {
      this.names[ref] = stream.name;
    });
    // Rebuilt from the names on the next add, keyed by the shared strings.
    this.nameRefs = null;
  }

  /** Names of a checkpoint, in ref order (they are distinct). */
  addName(streamName: string): void {
    this.names.push(streamName);
    this.nameRefs?.set(streamName, this.names.length - 1);
  }
}
