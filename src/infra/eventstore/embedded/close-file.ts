/**
 * The close file (`close.rec` in the log's directory): where a clean stop records what the
 * active segment's close record would have said when it cannot append that record (a full
 * disk: the close record needs new space, this file does not).
 *
 * The file has a fixed size (CLOSE_FILE_SIZE) and is created at open, written with zeros
 * and made durable (its data and its directory entry) while the disk takes writes, next to
 * the open's write probe. After that it is only ever overwritten in place, at offset 0 and
 * with all of its bytes: on file systems that overwrite in place (ext4, xfs, and most
 * others that are not copy-on-write) that needs no new blocks, so a stop on a full disk
 * can still write it. On copy-on-write file systems (btrfs, ZFS) an overwrite takes new
 * blocks too and may fail on a full disk: the stop then logs it and the next open treats
 * the end of the log as after a crash, as without the file.
 *
 * Layout (all little-endian): "HHCLOSE" | u8 version (1) | u48 base of the segment |
 * u16 its generation | u48 the bytes of the segment it vouches for | u16 0 |
 * u32 CRC-32 of those bytes | u32 CRC-32 of the 28 bytes before it | zeros to the end.
 *
 * It only ever adds vouching: at open, a record that is intact, names the active segment
 * (base and generation) and vouches for no more bytes than the segment has is used exactly
 * as the close record in the segment would be (damage in those bytes, or another checksum,
 * is refused naming the file and the byte). Anything else (zeros, a damaged or torn record,
 * another segment, a length beyond the file, a file of another size) is ignored, so the
 * file can never make a log unopenable. An ignored record is overwritten with zeros (and
 * synced) before the first write to the log after the open (its write probe; appends wait
 * for it): it must never come to vouch for bytes written later. A used one is kept: the
 * segment only grows past what it vouches for, and those bytes are never rewritten while
 * the segment is active, so it stays true.
 *
 * Kill points (a kill -9 or a power cut between any two I/O calls), in order:
 *
 * A stop on a full disk after a failed write (store.ts close, checkpoints.ts atClose):
 *   1. The failed batch is cut (a next segment whose creation failed unlinked, directory
 *      synced, the active segment truncated to its committed size, fdatasync). Killed here:
 *      the close file is as it was (zeros, or a used record that is still true); the next
 *      start sees a crash: every acknowledged record was synced, leftovers are a torn tail.
 *   2. The close record is appended at the committed size: ENOSPC, the segment is truncated
 *      back (unsynced). Whatever reached the disk lies past the committed size: a torn tail.
 *   3. The close file is overwritten at offset 0 and synced. Killed before the sync: the
 *      disk holds the old bytes (zeros or a true record), the new ones (true), or a torn
 *      mix that fails its CRC (ignored). Only the first and last lose the new vouching, as a
 *      crash before a close record always has. Killed after the sync: it vouches.
 *   4. The checkpoint (a temporary file and a rename; fails on a full disk), then files
 *      closed: nothing here can undo step 3.
 *
 * A start after it (index.ts, recovery.ts, store.ts checkWritableAtOpen):
 *   1. The close file is read, the segments listed, the directory synced, the segments
 *      opened. The active segment's torn tail past the vouched length may be truncated
 *      (never below it) and synced. Killed here: the same start happens again.
 *   2. The close file is opened in place (or, missing or of another size, created: zeros,
 *      fdatasync, directory sync; a kill leaves none, a short one or zeros, none of which
 *      vouches, and there was nothing to vouch with before). An ignored record is zeroed
 *      and synced; killed before the sync, the disk still holds it, still ignored (the log
 *      has not been written since open judged it).
 *   3. The write probe: 4 KiB of zeros past the end, cut again. Killed here, the zeros are
 *      a torn tail past the vouched length: a used record still applies, since it asks only
 *      that the segment be at least as long as what it vouches for, never exactly as long
 *      (an ignored record is already zeros: the probe's zeros cannot make it apply).
 *   4. Appends: written after the vouched length, each synced. The used record is never
 *      written by the start nor the appends, so a kill anywhere leaves it vouching.
 */
import * as path from 'node:path';
import { crc32 } from './crc32';
import { errorCode, errorMessage, writeFully } from './files';
import type { StoreFile, StoreIo } from './io';

export const CLOSE_FILE_NAME = 'close.rec';
/** Fixed size of the close file: far below one disk sector, so an overwrite is one sector write. */
export const CLOSE_FILE_SIZE = 64;

const MAGIC = Buffer.from('HHCLOSE', 'latin1');
const VERSION = 1;
const BODY_SIZE = 28;

/** What a close file vouches for: bytes [0, length) of the segment (base, generation) have CRC-32 `crc`. */
export interface CloseFileRecord {
  readonly base: number;
  readonly generation: number;
  readonly length: number;
  readonly crc: number;
}

export function encodeCloseFile(record: CloseFileRecord): Buffer {
  const bytes = Buffer.alloc(CLOSE_FILE_SIZE);
  MAGIC.copy(bytes, 0);
  bytes[7] = VERSION;
  bytes.writeUIntLE(record.base, 8, 6);
  bytes.writeUInt16LE(record.generation, 14);
  bytes.writeUIntLE(record.length, 16, 6);
  bytes.writeUInt32LE(record.crc >>> 0, 24);
  bytes.writeUInt32LE(crc32(bytes.subarray(0, BODY_SIZE)), BODY_SIZE);
  return bytes;
}

/** The record in a close file's bytes, or why there is none. */
export function decodeCloseFile(bytes: Buffer): CloseFileRecord | { readonly ignored: string } {
  if (bytes.length !== CLOSE_FILE_SIZE) return { ignored: `it has ${bytes.length} bytes, not ${CLOSE_FILE_SIZE}` };
  if (bytes.every((byte) => byte === 0)) return { ignored: 'empty' };
  if (!bytes.subarray(0, MAGIC.length).equals(MAGIC) || bytes[7] !== VERSION) return { ignored: 'unknown format' };
  if (crc32(bytes.subarray(0, BODY_SIZE)) !== bytes.readUInt32LE(BODY_SIZE) || bytes.readUInt16LE(22) !== 0) return { ignored: 'checksum mismatch' };
  if (!bytes.subarray(BODY_SIZE + 4).every((byte) => byte === 0)) return { ignored: 'bytes after the record' };
  return { base: bytes.readUIntLE(8, 6), generation: bytes.readUInt16LE(14), length: bytes.readUIntLE(16, 6), crc: bytes.readUInt32LE(24) };
}

/**
 * Reads the close file at open, before the segments. Missing, or unreadable but for a
 * transient lack of file handles (which fails the open, to be retried): none.
 */
export async function readCloseFile(io: StoreIo, directory: string, log: (message: string) => void): Promise<Buffer | null> {
  try {
    return await io.readFile(path.join(directory, CLOSE_FILE_NAME));
  } catch (error) {
    const code = errorCode(error);
    if (code === 'EMFILE' || code === 'ENFILE') throw error;
    if (code !== 'ENOENT') log(`Event log: could not read ${CLOSE_FILE_NAME} (${errorMessage(error)}); ignored`);
    return null;
  }
}

/** The open close file of a running store: overwritten in place at a stop that cannot write its close record. */
export class CloseFile {
  private nothingToClear: boolean;

  private constructor(
    private readonly handle: StoreFile,
    private readonly file: string,
    private readonly log: (message: string) => void,
    /** Whether open used the record it holds (then it stays); else it is zeroed before the first append. */
    used: boolean,
  ) {
    this.nothingToClear = used;
  }

  /**
   * At open, after the write probe: keeps the close file if it has its size, else creates it
   * (zeros, synced, its directory entry too). Null when that cannot be done (a full disk, say):
   * the store then runs as without it.
   */
  static async prepare(io: StoreIo, directory: string, log: (message: string) => void, used: boolean): Promise<CloseFile | null> {
    const file = path.join(directory, CLOSE_FILE_NAME);
    let handle: StoreFile | null = null;
    try {
      handle = await io.open(file, 'r+').catch((error: unknown) => {
        if (errorCode(error) === 'ENOENT') return null;
        throw error;
      });
      if (handle !== null && (await handle.stat()).size === CLOSE_FILE_SIZE) return new CloseFile(handle, file, log, used);
      // Missing, or left by a creation that did not finish: created anew.
      if (handle !== null) await handle.close();
      handle = null;
      await io.unlink(file);
      handle = await io.open(file, 'wx+');
      await writeFully(handle, Buffer.alloc(CLOSE_FILE_SIZE), 0);
      await handle.datasync();
      await io.syncDirectory(directory);
      return new CloseFile(handle, file, log, true);
    } catch (error) {
      log(`Event log: could not prepare ${CLOSE_FILE_NAME} (${errorMessage(error)}); a clean stop on a full disk cannot mark its close`);
      await handle?.close().catch(() => undefined);
      if (handle !== null) await io.unlink(file).catch(() => undefined);
      return null;
    }
  }

  /**
   * Before the first write to the log after open (its write probe, its first append): zeros
   * over a record open did not use, so that it never comes to vouch for bytes written later.
   */
  async beforeWrites(): Promise<void> {
    if (this.nothingToClear) return;
    await this.overwrite(Buffer.alloc(CLOSE_FILE_SIZE));
    this.nothingToClear = true;
  }

  /** At a stop that could not write the close record: the same vouching, here; false when even this fails. */
  async record(record: CloseFileRecord): Promise<boolean> {
    try {
      await this.overwrite(encodeCloseFile(record));
      return true;
    } catch (error) {
      this.log(`Event log: could not write ${this.file} either (${errorMessage(error)}); the next open checks the end of the log as after a crash`);
      return false;
    }
  }

  async close(): Promise<void> {
    await this.handle.close();
  }

  /** In place: all of its bytes at offset 0 (no new blocks), then synced. */
  private async overwrite(bytes: Buffer): Promise<void> {
    await writeFully(this.handle, bytes, 0);
    await this.handle.datasync();
  }
}
