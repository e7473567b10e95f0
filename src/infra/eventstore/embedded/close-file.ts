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
 * u32 CRC-32 of those bytes | u32 identity length | u32 CRC-32 of the segment's first
 * identity-length bytes | u32 CRC-32 of the 36 bytes before it | zeros to the end.
 *
 * The identity covers the segment's header and its first record (at most 64 KiB of it,
 * never past the vouched length). Every log's first segment is base 0, generation 0: the
 * identity tells this log's from another one restored into the directory, whose first
 * record differs (its event id, its time).
 *
 * It only adds vouching: at open, a record that is intact, names the active segment (base
 * and generation) and vouches for no more bytes than the segment has is used exactly as
 * the close record in the segment would be: damage in those bytes is refused naming the
 * segment, the byte and the close file. Anything else (zeros, a damaged or torn record,
 * another segment, a length beyond the file, a file of another size) is ignored. A record
 * whose identity does not match is ignored when the segment's first record is intact (it
 * is another log's: a bit flip cannot turn one intact record into another); when that
 * first record is itself damaged or torn the record is used, and the scan refuses the
 * damage. That is the one way a stale close file refuses a log it does not belong to:
 * another log restored into the directory whose first record is damaged or torn (such a
 * log holds no acknowledged event, or is refused anyway when anything follows). Records
 * that are intact one by one but whose checksum differs from the record's are not damage
 * (that breaks a record's own CRC-32): the same log rewritten by something that does not
 * know the close file (a version before it after a downgrade, which cut a damaged last
 * record and appended over it; that loss happened then). Open says so, naming the file,
 * ignores the record and opens. A close file that exists but cannot be read (EIO, say)
 * fails the open, naming it: it is neither passed over nor cleared.
 *
 * An ignored record is overwritten with zeros (and synced) before the first write to the
 * log after the open (its write probe; appends wait for it), also when the file could not
 * be opened at open (then the write probe fails, the log opens read-only, and each resume
 * tries again): it must never come to vouch for bytes written later. A used one is kept:
 * the segment only grows past what it vouches for, and those bytes are never rewritten
 * while the segment is active, so it stays true. Open never removes a close file it did not
 * create itself.
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
import { errorCode, errorMessage, readFully, writeFully } from './files';
import type { StoreFile, StoreIo } from './io';
import { encodeSegmentHeader, RECORD_PREFIX_SIZE, SEGMENT_HEADER_SIZE } from './record-format';

export const CLOSE_FILE_NAME = 'close.rec';
/** Fixed size of the close file: far below one disk sector, so an overwrite is one sector write. */
export const CLOSE_FILE_SIZE = 64;

const MAGIC = Buffer.from('HHCLOSE', 'latin1');
const VERSION = 1;
const BODY_SIZE = 36;
/** The identity covers at most this many bytes of the segment (a first record can be up to 16 MiB). */
const MAX_IDENTITY_BYTES = 64 * 1024;

/** Which segment's bytes a record is about: CRC-32 of its first `length` bytes (its header and its first record). */
export interface SegmentIdentity {
  readonly length: number;
  readonly crc: number;
}

/**
 * What a close file vouches for: bytes [0, length) of the segment (base, generation) have
 * CRC-32 `crc`; `identity` tells that segment from another log's with the same base and
 * generation (every log's first segment is base 0, generation 0).
 */
export interface CloseFileRecord {
  readonly base: number;
  readonly generation: number;
  readonly length: number;
  readonly crc: number;
  readonly identity: SegmentIdentity;
}

/** The identity of a segment that holds only its header: the same for every log with that base and generation. */
export function headerIdentity(base: number, generation: number): SegmentIdentity {
  return { length: SEGMENT_HEADER_SIZE, crc: crc32(encodeSegmentHeader({ base, generation })) };
}

/** The identity of a segment whose first `length` bytes are vouched for: its header and first record (or what of it lies within `length`). */
export async function segmentIdentity(handle: StoreFile, length: number): Promise<SegmentIdentity> {
  let end = Math.min(length, SEGMENT_HEADER_SIZE);
  if (length >= SEGMENT_HEADER_SIZE + RECORD_PREFIX_SIZE) {
    const bodyLength = (await readFully(handle, SEGMENT_HEADER_SIZE, 4)).readUInt32LE(0);
    end = Math.min(length, SEGMENT_HEADER_SIZE + RECORD_PREFIX_SIZE + bodyLength, MAX_IDENTITY_BYTES);
  }
  return { length: end, crc: crc32(await readFully(handle, 0, end)) };
}

/** A record without `identity` is given the header's (tests of records that never apply). */
export function encodeCloseFile(record: Omit<CloseFileRecord, 'identity'> & { readonly identity?: SegmentIdentity }): Buffer {
  const identity = record.identity ?? headerIdentity(record.base, record.generation);
  const bytes = Buffer.alloc(CLOSE_FILE_SIZE);
  MAGIC.copy(bytes, 0);
  bytes[7] = VERSION;
  bytes.writeUIntLE(record.base, 8, 6);
  bytes.writeUInt16LE(record.generation, 14);
  bytes.writeUIntLE(record.length, 16, 6);
  bytes.writeUInt32LE(record.crc >>> 0, 24);
  bytes.writeUInt32LE(identity.length, 28);
  bytes.writeUInt32LE(identity.crc >>> 0, 32);
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
  return {
    base: bytes.readUIntLE(8, 6),
    generation: bytes.readUInt16LE(14),
    length: bytes.readUIntLE(16, 6),
    crc: bytes.readUInt32LE(24),
    identity: { length: bytes.readUInt32LE(28), crc: bytes.readUInt32LE(32) },
  };
}

/** Whether a close file's bytes (as open read them) hold something that must be zeroed before writes when open does not use it. */
export function holdsRecord(bytes: Buffer | null): boolean {
  return bytes !== null && bytes.length === CLOSE_FILE_SIZE && !bytes.every((byte) => byte === 0);
}

/**
 * Reads the close file at open, before the segments. Missing: none. Any other error fails
 * the open (to be retried), naming the file: a record it may hold must neither be passed
 * over (the end of the log would be cut as after a crash) nor cleared.
 */
export async function readCloseFile(io: StoreIo, directory: string): Promise<Buffer | null> {
  const file = path.join(directory, CLOSE_FILE_NAME);
  try {
    return await io.readFile(file);
  } catch (error) {
    if (errorCode(error) === 'ENOENT') return null;
    throw new Error(
      `Event log: could not read ${file} (${errorMessage(error)}); refusing to open. It may vouch for the last clean stop on a full disk: ` +
        `retry; if it stays unreadable, moving it away gives up only that vouching`,
      { cause: error },
    );
  }
}

/**
 * What open made of the close file's record: used (it vouches; kept), to be cleared (a
 * record open ignored: zeroed before the first write to the log), or nothing to do.
 */
export type CloseFileAtOpen = 'used' | 'clear' | 'none';

/** The close file of a running store: overwritten in place at a stop that cannot write its close record. */
export class CloseFile {
  private constructor(
    private readonly io: StoreIo,
    private readonly file: string,
    private handle: StoreFile | null,
    private readonly log: (message: string) => void,
    /** A record open ignored is still on disk: no write to the log until it is zeroed. */
    private mustClear: boolean,
  ) {}

  /**
   * At open, before the write probe: keeps the close file if it has its size, else creates
   * it (zeros, synced, its directory entry too). When that cannot be done (a full disk, an
   * I/O error) the store runs without a handle on it: an existing file is left as it is (its
   * record may be the one open used), a record open ignored is still zeroed before the first
   * write (beforeWrites opens it again, and writes wait until that works), and a stop tries
   * to open it again.
   */
  static async prepare(io: StoreIo, directory: string, log: (message: string) => void, atOpen: CloseFileAtOpen): Promise<CloseFile> {
    const file = path.join(directory, CLOSE_FILE_NAME);
    let handle: StoreFile | null = null;
    let created = false;
    try {
      handle = await openInPlace(io, file);
      if (handle !== null && (await handle.stat()).size === CLOSE_FILE_SIZE) return new CloseFile(io, file, handle, log, atOpen === 'clear');
      // Missing, or left by a creation that did not finish (another size: never used): created anew.
      if (handle !== null) await handle.close();
      handle = null;
      await io.unlink(file);
      handle = await io.open(file, 'wx+');
      created = true;
      await writeFully(handle, Buffer.alloc(CLOSE_FILE_SIZE), 0);
      await handle.datasync();
      await io.syncDirectory(directory);
      return new CloseFile(io, file, handle, log, false);
    } catch (error) {
      log(`Event log: could not prepare ${CLOSE_FILE_NAME} (${errorMessage(error)}); a clean stop on a full disk may not be able to mark its close`);
      await handle?.close().catch(() => undefined);
      // Only a file this call created is removed (it holds nothing); an existing one keeps its record.
      if (created) await io.unlink(file).catch(() => undefined);
      return new CloseFile(io, file, null, log, atOpen === 'clear');
    }
  }

  /**
   * Before the first write to the log after open (its write probe, its first append, a
   * resume): zeros over a record open did not use, so that it never comes to vouch for bytes
   * written later. Throws while that cannot be done: the write waits (read-only, resumed later).
   */
  /** Whether a record open did not use is still to be zeroed (so the append path can skip the await). */
  get clearPending(): boolean {
    return this.mustClear;
  }

  async beforeWrites(): Promise<void> {
    if (!this.mustClear) return;
    const handle = await this.openHandle();
    // Gone meanwhile: nothing left to clear.
    if (handle !== null) await overwrite(handle, Buffer.alloc(CLOSE_FILE_SIZE));
    this.mustClear = false;
  }

  /** At a stop that could not write the close record: the same vouching, here; false when even this fails. */
  async record(record: CloseFileRecord): Promise<boolean> {
    try {
      const handle = await this.openHandle();
      if (handle === null) throw new Error(`${CLOSE_FILE_NAME} does not exist`);
      await overwrite(handle, encodeCloseFile(record));
      return true;
    } catch (error) {
      this.log(`Event log: could not write ${this.file} either (${errorMessage(error)}); the next open checks the end of the log as after a crash`);
      return false;
    }
  }

  async close(): Promise<void> {
    await this.handle?.close();
    this.handle = null;
  }

  /** The open file, opened in place now if prepare could not (null: it does not exist). */
  private async openHandle(): Promise<StoreFile | null> {
    if (this.handle !== null) return this.handle;
    const handle = await openInPlace(this.io, this.file);
    if (handle === null) return null;
    const size = (await handle.stat().catch(async (error: unknown) => {
      await handle.close();
      throw error;
    })).size;
    if (size !== CLOSE_FILE_SIZE) {
      await handle.close();
      // Another size never vouches and open would create it anew.
      return null;
    }
    this.handle = handle;
    return handle;
  }
}

async function openInPlace(io: StoreIo, file: string): Promise<StoreFile | null> {
  try {
    return await io.open(file, 'r+');
  } catch (error) {
    if (errorCode(error) === 'ENOENT') return null;
    throw error;
  }
}

/** In place: all of its bytes at offset 0 (no new blocks), then synced. */
async function overwrite(handle: StoreFile, bytes: Buffer): Promise<void> {
  await writeFully(handle, bytes, 0);
  await handle.datasync();
}
