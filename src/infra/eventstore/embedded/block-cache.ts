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

export class BlockCache {
  /** Blocks by segment, then by block number; `order` keeps them least recently used first. */
  private readonly bySegment = new Map<BlockSource, Map<number, Buffer>>();
  private readonly order = new Map<string, { readonly segment: BlockSource; readonly block: number }>();
  private readonly fetching = new Map<BlockSource, Map<number, Promise<Buffer>>>();
  /** Blocks (by `order`'s key) no read has used since the one that fetched them. */
  private readonly unused = new Set<string>();
  private readonly ids = new WeakMap<BlockSource, number>();
  private nextId = 0;

  constructor(private readonly capacity = BLOCKS_KEPT) {}

  /** Bytes [offset, offset + length) of the segment, all below its size; from a block when one holds them. */
  async read(segment: BlockSource, offset: number, length: number): Promise<Buffer> {
    // Nothing to read: no block is fetched for it (an empty one would take the place of another).
    if (length <= 0) return Buffer.alloc(0);
    // A long read, or one past the segment's durable bytes, goes to the file.
    if (length > BLOCK_READ_MAX || offset + length > segment.size) {
      // A large record: its first bytes were read through a block that nothing else has used.
      // That block only held the record's head: let it go rather than keep it for its 64 KiB.
      if (length > BLOCK_READ_MAX) this.dropUnused(segment, Math.floor(offset / BLOCK_SIZE));
      return segment.readFile(offset, length);
    }
    const block = Math.floor(offset / BLOCK_SIZE);
    const start = block * BLOCK_SIZE;
    const end = offset + length;
    if (end <= start + BLOCK_SIZE) return (await this.block(segment, block, end - start)).subarray(offset - start, end - start);
    // Across two blocks (a record's read ahead of 4 KiB meets the next block one time in sixteen): the two, joined.
    const [head, tail] = await Promise.all([this.block(segment, block, BLOCK_SIZE), this.block(segment, block + 1, end - start - BLOCK_SIZE)]);
    return Buffer.concat([head.subarray(offset - start), tail.subarray(0, end - start - BLOCK_SIZE)]);
  }

  /** Drops every block of a segment (retired: replaced by a compacted copy, or closed). */
  forget(segment: BlockSource): void {
    const blocks = this.bySegment.get(segment);
    if (blocks === undefined) return;
    for (const block of blocks.keys()) {
      const key = this.key(segment, block);
      this.order.delete(key);
      this.unused.delete(key);
    }
    this.bySegment.delete(segment);
  }

  /** Blocks held now (tests). */
  get size(): number {
    return this.order.size;
  }

  /** A block holding at least its first `needed` bytes. */
  private async block(segment: BlockSource, block: number, needed: number): Promise<Buffer> {
    const bytes = this.get(segment, block);
    return bytes !== undefined && bytes.length >= needed ? bytes : this.fetch(segment, block, needed);
  }

  private get(segment: BlockSource, block: number): Buffer | undefined {
    const bytes = this.bySegment.get(segment)?.get(block);
    if (bytes === undefined) return undefined;
    const key = this.key(segment, block);
    const entry = this.order.get(key);
    if (entry !== undefined) {
      this.order.delete(key);
      this.order.set(key, entry);
    }
    this.unused.delete(key);
    return bytes;
  }

  private dropUnused(segment: BlockSource, block: number): void {
    const key = this.key(segment, block);
    if (!this.unused.has(key)) return;
    this.evict(key, segment, block);
  }

  private evict(key: string, segment: BlockSource, block: number): void {
    this.order.delete(key);
    this.unused.delete(key);
    const blocks = this.bySegment.get(segment);
    blocks?.delete(block);
    if (blocks?.size === 0) this.bySegment.delete(segment);
  }

  private fetch(segment: BlockSource, block: number, needed: number): Promise<Buffer> {
    let pending = this.fetching.get(segment);
    const inFlight = pending?.get(block);
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
      const kept = ownBytes(bytes);
      this.put(segment, block, kept);
      return kept;
    });
    if (pending === undefined) this.fetching.set(segment, (pending = new Map()));
    pending.set(block, read);
    const done = (): void => {
      const blocks = this.fetching.get(segment);
      if (blocks?.get(block) !== read) return;
      blocks.delete(block);
      if (blocks.size === 0) this.fetching.delete(segment);
    };
    read.then(done, done);
    return read;
  }

  private put(segment: BlockSource, block: number, bytes: Buffer): void {
    let blocks = this.bySegment.get(segment);
    if (blocks === undefined) this.bySegment.set(segment, (blocks = new Map()));
    blocks.set(block, bytes);
    const key = this.key(segment, block);
    this.order.delete(key);
    this.order.set(key, { segment, block });
    this.unused.add(key);
    while (this.order.size > this.capacity) {
      const [oldestKey, oldest] = this.order.entries().next().value as [string, { segment: BlockSource; block: number }];
      this.evict(oldestKey, oldest.segment, oldest.block);
    }
  }

  private key(segment: BlockSource, block: number): string {
    let id = this.ids.get(segment);
    if (id === undefined) this.ids.set(segment, (id = this.nextId++));
    return `${id}:${block}`;
  }
}
