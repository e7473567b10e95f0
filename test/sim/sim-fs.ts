/**
 * An in-memory file system under the engine's StoreIo, with a seeded fault layer and a
 * crash model. Deterministic: every choice comes from the Rng it is given.
 *
 * Crash model (what survives a power cut):
 *   - File data: each file has what its last successful datasync made durable. Writes and
 *     truncates since then are pending; at a crash each pending write independently
 *     reaches the disk whole, torn (a prefix of it) or not at all, and pending truncates
 *     are kept or lost (a seeded choice per file) — the reorderings a real disk and page
 *     cache allow between two syncs.
 *   - Directory entries (create, rename, unlink) are durable only once the directory is
 *     synced (syncDirectory); a crash restores the entries of the last sync, each naming
 *     the file it named then, with that file's durable data.
 *   - A failed datasync (EIO) is the Linux behaviour: the pending writes each did or did
 *     not reach the disk, the page cache still shows them all, and a later sync does not
 *     write them again. Reads see the cache, so cache and disk can disagree until a crash.
 *
 * Faults (switched on and off by the workload): ENOSPC on writes that need new blocks (a
 * "full disk", sometimes a short write first): writes past the end of the file, or into a
 * hole a truncate left, or after a truncate took the blocks away; overwriting bytes that were
 * written before, in place, needs none (as on ext4 or xfs, not on copy-on-write file systems), EIO on write and on datasync, EMFILE on
 * open (also a real cap on open files, to catch leaks), short writes, and bit flips in a
 * file's data (on disk and in the cache alike).
 */
import * as path from 'node:path';
import type { OpenMode, StoreFile, StoreIo } from '../../src/infra/eventstore/embedded/io';
import type { Rng } from './rng';

type PendingOp = { readonly kind: 'write'; readonly offset: number; readonly bytes: Buffer } | { readonly kind: 'truncate'; readonly length: number };

class Inode {
  cache: Buffer = Buffer.alloc(0);
  durable: Buffer = Buffer.alloc(0);
  pending: PendingOp[] = [];
  /**
   * Bytes from the start of the file that have blocks (were written, not a hole left by a
   * truncate that grew the file): overwriting them needs no space, as on ext4 or xfs.
   */
  allocated = 0;
}

interface Directory {
  entries: Map<string, Inode>;
  durable: Map<string, Inode>;
}

export interface Faults {
  /** Writes that add bytes fail with ENOSPC (sometimes after a short write). */
  diskFull: boolean;
  /** Probability of EIO per write. */
  writeEio: number;
  /** Probability of EIO per datasync. */
  syncEio: number;
  /** Probability of EMFILE per open. */
  emfile: number;
  /** Probability that a write writes only part of its bytes (no error). */
  shortWrite: number;
}

export const NO_FAULTS: Faults = { diskFull: false, writeEio: 0, syncEio: 0, emfile: 0, shortWrite: 0 };

export class SimIoError extends Error {
  constructor(
    readonly code: string,
    syscall: string,
    file: string,
  ) {
    super(`${code}: simulated fault, ${syscall} '${file}'`);
  }
}

function withBytes(target: Buffer, offset: number, bytes: Buffer): Buffer {
  const end = offset + bytes.length;
  let out = target;
  if (end > target.length) {
    out = Buffer.alloc(end);
    target.copy(out);
  }
  bytes.copy(out, offset);
  return out;
}

function truncated(target: Buffer, length: number): Buffer {
  if (length <= target.length) return Buffer.from(target.subarray(0, length));
  const out = Buffer.alloc(length);
  target.copy(out);
  return out;
}

function apply(target: Buffer, op: PendingOp): Buffer {
  return op.kind === 'write' ? withBytes(target, op.offset, op.bytes) : truncated(target, op.length);
}

export class SimFs implements StoreIo {
  faults: Faults = { ...NO_FAULTS };
  /** Faults injected so far, by kind. */
  readonly injected = new Map<string, number>();
  private readonly directories = new Map<string, Directory>();
  private openFiles = 0;
  /** Whatever a file handle opened before the last crash does is ignored (that process is gone). */
  private epoch = 0;

  constructor(
    public rng: Rng,
    private readonly maxOpenFiles = 200,
  ) {}

  private count(kind: string): void {
    this.injected.set(kind, (this.injected.get(kind) ?? 0) + 1);
  }

  private async tick(): Promise<void> {
    // Other promise chains may run in between, as with real I/O.
    for (let i = this.rng.int(3); i > 0; i--) await Promise.resolve();
  }

  private directoryOf(file: string): { dir: Directory; name: string } {
    const dir = this.directories.get(path.dirname(file));
    if (dir === undefined) throw new SimIoError('ENOENT', 'open', file);
    return { dir, name: path.basename(file) };
  }

  private inodeOf(file: string, syscall: string): Inode {
    const { dir, name } = this.directoryOf(file);
    const inode = dir.entries.get(name);
    if (inode === undefined) throw new SimIoError('ENOENT', syscall, file);
    return inode;
  }

  // --- StoreIo -------------------------------------------------------------------

  async mkdir(directory: string): Promise<void> {
    await this.tick();
    // Directory creation is durable at once (the data directory exists before the store).
    if (!this.directories.has(directory)) this.directories.set(directory, { entries: new Map(), durable: new Map() });
  }

  async readdir(directory: string): Promise<string[]> {
    await this.tick();
    const dir = this.directories.get(directory);
    if (dir === undefined) throw new SimIoError('ENOENT', 'readdir', directory);
    return [...dir.entries.keys()].sort();
  }

  async syncDirectory(directory: string): Promise<void> {
    await this.tick();
    const dir = this.directories.get(directory);
    if (dir === undefined) throw new SimIoError('ENOENT', 'fsync', directory);
    if (this.faults.syncEio > 0 && this.rng.chance(this.faults.syncEio)) {
      this.count('EIO on directory sync');
      if (this.rng.chance(0.5)) dir.durable = new Map(dir.entries);
      throw new SimIoError('EIO', 'fsync', directory);
    }
    dir.durable = new Map(dir.entries);
  }

  async open(file: string, mode: OpenMode): Promise<StoreFile> {
    await this.tick();
    if (this.openFiles >= this.maxOpenFiles || (this.faults.emfile > 0 && this.rng.chance(this.faults.emfile))) {
      this.count('EMFILE');
      throw new SimIoError('EMFILE', 'open', file);
    }
    const { dir, name } = this.directoryOf(file);
    let inode = dir.entries.get(name);
    if (mode === 'wx+' && inode !== undefined) throw new SimIoError('EEXIST', 'open', file);
    if (mode === 'r' || mode === 'r+') {
      if (inode === undefined) throw new SimIoError('ENOENT', 'open', file);
    } else {
      if (this.faults.diskFull && inode === undefined) {
        this.count('ENOSPC');
        throw new SimIoError('ENOSPC', 'open', file);
      }
      if (inode === undefined) {
        inode = new Inode();
        dir.entries.set(name, inode);
      } else if (mode === 'w') {
        this.truncateInode(inode, 0);
      }
    }
    this.openFiles++;
    return new SimFile(this, inode, file, mode !== 'r', this.epoch);
  }

  async readFile(file: string): Promise<Buffer> {
    await this.tick();
    return Buffer.from(this.inodeOf(file, 'open').cache);
  }

  async writeFile(file: string, bytes: Buffer): Promise<void> {
    const handle = await this.open(file, 'w');
    try {
      let written = 0;
      while (written < bytes.length) written += (await handle.write(bytes, written, bytes.length - written, written)).bytesWritten;
    } finally {
      await handle.close();
    }
  }

  async rename(from: string, to: string): Promise<void> {
    await this.tick();
    const source = this.directoryOf(from);
    const target = this.directoryOf(to);
    const inode = source.dir.entries.get(source.name);
    if (inode === undefined) throw new SimIoError('ENOENT', 'rename', from);
    source.dir.entries.delete(source.name);
    target.dir.entries.set(target.name, inode);
  }

  async unlink(file: string): Promise<void> {
    await this.tick();
    const { dir, name } = this.directoryOf(file);
    dir.entries.delete(name);
  }

  // --- Used by SimFile -----------------------------------------------------------

  closed(epoch: number): void {
    if (epoch === this.epoch) this.openFiles--;
  }

  isCurrent(epoch: number): boolean {
    return epoch === this.epoch;
  }

  async writeAt(inode: Inode, file: string, buffer: Buffer, offset: number, length: number, position: number): Promise<number> {
    await this.tick();
    if (this.faults.writeEio > 0 && this.rng.chance(this.faults.writeEio)) {
      this.count('EIO on write');
      // Some of it may have reached the cache before the error.
      if (this.rng.chance(0.5) && length > 1) this.record(inode, position, Buffer.from(buffer.subarray(offset, offset + this.rng.int(length))));
      throw new SimIoError('EIO', 'write', file);
    }
    let take = length;
    const grows = position + length > Math.min(inode.allocated, inode.cache.length);
    if (this.faults.diskFull && grows) {
      const room = Math.max(0, Math.min(inode.allocated, inode.cache.length) - position);
      if (room === 0 || this.rng.chance(0.5)) {
        this.count('ENOSPC');
        throw new SimIoError('ENOSPC', 'write', file);
      }
      this.count('short write (ENOSPC)');
      take = Math.max(1, this.rng.int(length));
    } else if (this.faults.shortWrite > 0 && length > 1 && this.rng.chance(this.faults.shortWrite)) {
      this.count('short write');
      take = 1 + this.rng.int(length - 1);
    }
    this.record(inode, position, Buffer.from(buffer.subarray(offset, offset + take)));
    return take;
  }

  private record(inode: Inode, position: number, bytes: Buffer): void {
    const op: PendingOp = { kind: 'write', offset: position, bytes };
    inode.cache = apply(inode.cache, op);
    inode.pending.push(op);
    // A write that starts within the written prefix extends it; one past a hole does not.
    if (position <= inode.allocated) inode.allocated = Math.max(inode.allocated, position + bytes.length);
  }

  truncateInode(inode: Inode, length: number): void {
    const op: PendingOp = { kind: 'truncate', length };
    inode.cache = apply(inode.cache, op);
    inode.pending.push(op);
    inode.allocated = Math.min(inode.allocated, length);
  }

  async datasync(inode: Inode, file: string): Promise<void> {
    await this.tick();
    if (this.faults.syncEio > 0 && this.rng.chance(this.faults.syncEio)) {
      this.count('EIO on fsync');
      for (const op of inode.pending) if (this.rng.chance(0.5)) inode.durable = apply(inode.durable, op);
      // Linux marks the pages clean: a later sync will not write them again.
      inode.pending = [];
      throw new SimIoError('EIO', 'fsync', file);
    }
    for (const op of inode.pending) inode.durable = apply(inode.durable, op);
    inode.pending = [];
  }

  // --- Machine-level events ------------------------------------------------------

  /** Power cut: the cache is lost; see the crash model above. */
  crash(): void {
    this.epoch++;
    this.openFiles = 0;
    const inodes = new Set<Inode>();
    for (const dir of this.directories.values()) {
      for (const inode of dir.entries.values()) inodes.add(inode);
      for (const inode of dir.durable.values()) inodes.add(inode);
      dir.entries = new Map(dir.durable);
    }
    for (const inode of inodes) {
      const keepTruncates = this.rng.chance(0.5);
      for (const op of inode.pending) {
        if (op.kind === 'truncate') {
          if (keepTruncates) inode.durable = apply(inode.durable, op);
          continue;
        }
        const fate = this.rng.int(4);
        if (fate === 0) inode.durable = apply(inode.durable, op);
        else if (fate === 1 && op.bytes.length > 1) inode.durable = apply(inode.durable, { ...op, bytes: op.bytes.subarray(0, this.rng.int(op.bytes.length)) });
      }
      inode.pending = [];
      inode.cache = Buffer.from(inode.durable);
      // Blocks beyond what survived are free again (a conservative count: within it, only what was written before).
      inode.allocated = Math.min(inode.allocated, inode.durable.length);
    }
  }

  /** A clean stop of the process (no power cut): open files are gone, data stays. */
  processExit(): void {
    this.epoch++;
    this.openFiles = 0;
  }

  // --- Inspection and damage, for the workload -----------------------------------

  list(directory: string): Array<{ name: string; size: number }> {
    const dir = this.directories.get(directory);
    return dir === undefined ? [] : [...dir.entries].map(([name, inode]) => ({ name, size: inode.cache.length })).sort((a, b) => a.name.localeCompare(b.name));
  }

  /** Flips one bit of a file on disk and in the cache; returns the undo. */
  flipBit(file: string, offset: number, bit: number): () => void {
    const inode = this.inodeOf(file, 'flip');
    const flip = (buffer: Buffer): void => {
      if (offset < buffer.length) buffer[offset] = (buffer[offset] as number) ^ (1 << bit);
    };
    flip(inode.cache);
    flip(inode.durable);
    for (const op of inode.pending) if (op.kind === 'write' && offset >= op.offset && offset < op.offset + op.bytes.length) op.bytes[offset - op.offset] ^= 1 << bit;
    return () => {
      flip(inode.cache);
      flip(inode.durable);
    };
  }

  fileBytes(file: string): Buffer {
    return this.inodeOf(file, 'read').cache;
  }
}

class SimFile implements StoreFile {
  private open = true;

  constructor(
    private readonly fs: SimFs,
    private readonly inode: Inode,
    private readonly file: string,
    private readonly writable: boolean,
    private readonly epoch: number,
  ) {}

  private check(syscall: string): void {
    if (!this.open) throw new SimIoError('EBADF', syscall, this.file);
    // A handle of the process that died at a crash: the machine is gone.
    if (!this.fs.isCurrent(this.epoch)) throw new SimIoError('EBADF', syscall, this.file);
  }

  async read(buffer: Buffer, offset: number, length: number, position: number): Promise<{ bytesRead: number }> {
    this.check('read');
    const data = this.inode.cache;
    const bytesRead = Math.max(0, Math.min(length, data.length - position));
    if (bytesRead > 0) data.copy(buffer, offset, position, position + bytesRead);
    return { bytesRead };
  }

  async write(buffer: Buffer, offset: number, length: number, position: number): Promise<{ bytesWritten: number }> {
    this.check('write');
    if (!this.writable) throw new SimIoError('EBADF', 'write', this.file);
    return { bytesWritten: await this.fs.writeAt(this.inode, this.file, buffer, offset, length, position) };
  }

  async datasync(): Promise<void> {
    this.check('fsync');
    await this.fs.datasync(this.inode, this.file);
  }

  async truncate(length: number): Promise<void> {
    this.check('ftruncate');
    if (!this.writable) throw new SimIoError('EBADF', 'ftruncate', this.file);
    this.fs.truncateInode(this.inode, length);
  }

  async stat(): Promise<{ size: number }> {
    this.check('fstat');
    return { size: this.inode.cache.length };
  }

  async close(): Promise<void> {
    if (!this.open) return;
    this.open = false;
    this.fs.closed(this.epoch);
  }
}
