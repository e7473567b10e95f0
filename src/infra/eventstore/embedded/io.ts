/**
 * The file I/O the engine does, as one small interface: everything the log, its index
 * checkpoints and compaction read or write goes through a `StoreIo` (the lock file, which
 * needs the kernel's own locking, does not). In production it is node:fs (`nodeIo`); the
 * deterministic simulation (test/sim) puts an in-memory file system with injected faults
 * and crashes under it.
 *
 * Only what the engine needs: positional reads and writes on an open file, data sync,
 * truncate and size; whole-file reads and writes (index checkpoints); rename, unlink,
 * readdir, mkdir; and syncing a directory so created, renamed or removed entries survive
 * a crash.
 */
import * as fs from 'node:fs/promises';

export interface StoreFile {
  /** Reads up to `length` bytes at `position` into `buffer[offset..]`; fewer at the end of the file. */
  read(buffer: Buffer, offset: number, length: number, position: number): Promise<{ bytesRead: number }>;
  /** Writes `buffer[offset..offset+length)` at `position`; may write fewer bytes (a short write). */
  write(buffer: Buffer, offset: number, length: number, position: number): Promise<{ bytesWritten: number }>;
  /** Makes the file's data (and its size) durable. */
  datasync(): Promise<void>;
  truncate(length: number): Promise<void>;
  stat(): Promise<{ size: number }>;
  close(): Promise<void>;
}

/** Open modes the engine uses: read, read-write, create-exclusive read-write, create-or-truncate write. */
export type OpenMode = 'r' | 'r+' | 'wx+' | 'w';

export interface StoreIo {
  open(file: string, mode: OpenMode): Promise<StoreFile>;
  readFile(file: string): Promise<Buffer>;
  /** Creates or replaces the file with `bytes` (not synced). */
  writeFile(file: string, bytes: Buffer): Promise<void>;
  rename(from: string, to: string): Promise<void>;
  /** Removes the file; no error when it does not exist. */
  unlink(file: string): Promise<void>;
  readdir(directory: string): Promise<string[]>;
  mkdir(directory: string): Promise<void>;
  /** Makes created, renamed or removed entries of the directory durable. */
  syncDirectory(directory: string): Promise<void>;
}

/** Files the engine creates are the owner's alone, as is the data directory it creates. */
const FILE_MODE = 0o600;
const DIRECTORY_MODE = 0o700;

export const nodeIo: StoreIo = {
  open: (file, mode) => fs.open(file, mode, FILE_MODE),
  readFile: (file) => fs.readFile(file),
  writeFile: (file, bytes) => fs.writeFile(file, bytes, { mode: FILE_MODE }),
  rename: (from, to) => fs.rename(from, to),
  unlink: (file) => fs.rm(file, { force: true }),
  readdir: (directory) => fs.readdir(directory),
  mkdir: async (directory) => {
    await fs.mkdir(directory, { recursive: true, mode: DIRECTORY_MODE });
  },
  syncDirectory: async (directory) => {
    const handle = await fs.open(directory, 'r');
    try {
      await handle.sync();
    } finally {
      await handle.close();
    }
  },
};
