/**
 * The last blocks of segment files read for single records, kept in memory: a record read by
 * position costs a copy from memory instead of a read of the file, when a record near it was
 * read not long before.
 *
 * Why: after a restart every device's stream is read back once (its fold, at the hub's
 * handshake or first heartbeat), one record at a time, and each record was a read of the file
 * of its own (a 4 KiB read through the thread pool: its system calls, a promise and a buffer).
 * Those records lie close together (a device's events are written near each other, and the
 * snapshots of many devices next to one another): in a restart of 5,000 hubs, 15,000 such
 * reads fell in 63 blocks of 64 KiB (bench/README.md).
 *
 * What makes keeping bytes safe: a segment's bytes below its `size` are durable records, never
 * written again while that segment is in use (a compaction or an erasure's rewrite puts another
 * `Segment` in its place). A block keeps only bytes below the size its segment had when it was
 * read, and a segment's blocks are dropped when it is retired, so no byte of a replaced file
 * (an erased person's old plaintext) stays reachable from here.
 *
 * A record larger than a short read is read ahead 4 KiB first (record-cursor.ts), then whole
 * from the file: the block fetched for its head is let go then, unless another read used it,
 * so that reading large events (an export, an audit) does not fill the cache with their heads.
 */

import { ownBytes } from './own-bytes';

export const BLOCK_SIZE = 64 * 1024;
/** Reads up to this length are served from blocks; longer ones (scans, compaction) go to the file. */
export const BLOCK_READ_MAX = 16 * 1024;
/** 16 MiB of blocks at most. */
export const BLOCKS_KEPT = 256;

/** A segment as its blocks are read and kept: its identity is the object. */
export interface BlockSource {
  readonly retired: boolean;
  /** Bytes of durable records: never rewritten. */
  readonly size: number;
  /** The file's bytes, uncached. */
  readFile(offset: number, length: number): Promise<Buffer>;
}

/** A kept block. */
interface Kept {
  readonly segment: BlockSource;
  readonly block: number;
  readonly bytes: Buffer;
  /** Whether a read used it since the one that fetched it. */
  used: boolean;
}

export class BlockCache {
  /** The blocks kept, least recently used first (a Map keeps insertion order). */
  private readonly kept = new Map<string, Kept>();
  private readonly fetching = new Map<string, Promise<Buffer>>();
  private readonly ids = new WeakMap<BlockSource, number>();
  private nextId = 0;

  constructor(private readonly capacity = BLOCKS_KEPT) {}

  /** Bytes [offset, offset + length) of the segment, all below its size; from a block when one holds them. */
  async read(segment: BlockSource, offset: number, length: number): Promise<Buffer> {
    // Nothing to read: no block is fetched for it (an empty one would take the place of another).
    if (length <= 0) return Buffer.alloc(0);
    const block = Math.floor(offset / BLOCK_SIZE);
    // A long read, or one past the segment's durable bytes, goes to the file.
    if (length > BLOCK_READ_MAX || offset + length > segment.size) {
      // A large record: its first bytes were read through a block that nothing else has used.
      // That block only held the record's head: let it go rather than keep it for its 64 KiB.
      const head = this.kept.get(this.key(segment, block));
      if (length > BLOCK_READ_MAX && head !== undefined && !head.used) this.kept.delete(this.key(segment, block));
      return segment.readFile(offset, length);
    }
    const start = block * BLOCK_SIZE;
    const end = offset + length;
    if (end <= start + BLOCK_SIZE) return (await this.block(segment, block, end - start)).subarray(offset - start, end - start);
    // Across two blocks (a record's read ahead of 4 KiB meets the next block one time in sixteen): the two, joined.
    const [head, tail] = await Promise.all([this.block(segment, block, BLOCK_SIZE), this.block(segment, block + 1, end - start - BLOCK_SIZE)]);
    return Buffer.concat([head.subarray(offset - start), tail.subarray(0, end - start - BLOCK_SIZE)]);
  }

  /** Drops every block of a segment (retired: replaced by a compacted copy, or closed). */
  forget(segment: BlockSource): void {
    for (const [key, kept] of this.kept) if (kept.segment === segment) this.kept.delete(key);
  }

  /** The blocks held now, with their segments (tests). */
  held(): Array<{ readonly segment: BlockSource; readonly bytes: Buffer }> {
    return [...this.kept.values()].map(({ segment, bytes }) => ({ segment, bytes }));
  }

  /** Blocks held now (tests). */
  get size(): number {
    return this.kept.size;
  }

  /** A block holding at least its first `needed` bytes. */
  private async block(segment: BlockSource, block: number, needed: number): Promise<Buffer> {
    const key = this.key(segment, block);
    const kept = this.kept.get(key);
    if (kept === undefined || kept.bytes.length < needed) return this.fetch(segment, block, needed);
    // The most recently used now.
    this.kept.delete(key);
    this.kept.set(key, kept);
    kept.used = true;
    return kept.bytes;
  }

  private fetch(segment: BlockSource, block: number, needed: number): Promise<Buffer> {
    const key = this.key(segment, block);
    const inFlight = this.fetching.get(key);
    // Reads of one block at the same time share one read of the file, if it reaches far enough.
    if (inFlight !== undefined) return inFlight.then((bytes) => (bytes.length >= needed ? bytes : this.fetch(segment, block, needed)));
    const start = block * BLOCK_SIZE;
    // Only durable bytes: those below the size the segment has now.
    const length = Math.min(BLOCK_SIZE, segment.size - start);
    const read = segment.readFile(start, length).then((bytes) => {
      if (segment.retired || bytes.length !== length) return bytes;
      // Memory of its own: a short block (the end of a small segment) is read into one of Node's
      // shared 8 KiB pool slabs, and kept as it is it would keep all of it reachable — bytes of
      // other reads, a retired segment's (an erased person's old plaintext) among them.
      const own = ownBytes(bytes);
      this.kept.delete(key);
      this.kept.set(key, { segment, block, bytes: own, used: false });
      if (this.kept.size > this.capacity) this.kept.delete(this.kept.keys().next().value as string);
      return own;
    });
    this.fetching.set(key, read);
    const done = (): void => {
      if (this.fetching.get(key) === read) this.fetching.delete(key);
    };
    read.then(done, done);
    return read;
  }

  private key(segment: BlockSource, block: number): string {
    let id = this.ids.get(segment);
    if (id === undefined) this.ids.set(segment, (id = this.nextId++));
    return `${id}:${block}`;
  }
}
