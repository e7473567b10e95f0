/**
 * Opening the log: find the segments, repair what a crash can leave behind, and build the
 * index without reading the whole history.
 *
 * Sealed segments come from their index checkpoints (a missing or unusable one means a
 * scan of that segment, said on stderr, and a new checkpoint). The active segment (at
 * most a few MiB) comes from its latest checkpoint (written every `checkpointBytes` while
 * running and at close) if the bytes it covers still have its CRC-32, and only what follows
 * is scanned; otherwise all of it is. That is where a crash leaves a torn tail to drop, and
 * where damage to acknowledged data is caught before anything is appended after it: bytes
 * a checkpoint whose CRC no longer matches covers, and bytes before the record of a clean
 * close (record-format.ts), or the close file's record of it when the stop could not append
 * it (close-file.ts), were acknowledged, so damage there is refused, never cut as a
 * torn tail. Left over temporary files of an interrupted compaction are removed: until its
 * rename, the original segment is intact.
 */
import * as path from 'node:path';
import { crc32 } from './crc32';
import { CorruptEventLogError } from './errors';
import { errorCode, errorMessage, readFully, writeFully } from './files';
import type { StoreFile, StoreIo } from './io';
import { LogIndex } from './log-index';
import { CLOSE_FILE_NAME, decodeCloseFile, holdsRecord, type CloseFileAtOpen, type CloseFileRecord } from './close-file';
import { RecordCursor } from './record-cursor';
import { CLOSE_RECORD_SIZE, decodeCloseRecord, decodeSegmentHeader, encodeSegmentHeader, SEGMENT_HEADER_SIZE, type CloseRecord, type SegmentHeader } from './record-format';
import { locatorOf, Segment, segmentBaseOfName, segmentFileName, type HandlePool } from './segment';
import { loadSegmentIndex, writeSegmentIndex } from './segment-index-file';
import { scanSegment } from './segment-scan';
import { SegmentTable } from './segment-table';

export interface TornTail {
  /** Byte offset in the active segment file where the log now ends. */
  readonly offset: number;
  readonly droppedBytes: number;
}

export interface OpenedLog {
  readonly segments: Segment[];
  readonly index: LogIndex;
  /** The table of the active (last) segment, which commits keep growing. */
  readonly activeTable: SegmentTable;
  /** Why the log could only be opened for reading (a repair write failed: a full disk, say), or null. */
  readonly readOnly: Error | null;
  /** What open made of the close file's record (close-file.ts). */
  readonly closeFile: CloseFileAtOpen;
}

export interface RecoveryOptions {
  readonly onTornTail: (tail: TornTail) => void;
  readonly log: (message: string) => void;
  readonly pool: HandlePool;
  /** An active segment beyond this size (a single-file log of earlier versions) is sealed at open. */
  readonly segmentBytes: number;
  readonly io: StoreIo;
  /** The close file's bytes as open found them (close-file.ts), or null. */
  readonly closeFile: Buffer | null;
}

export const COMPACTION_SUFFIX = '.compact';
const CRC_CHUNK_SIZE = 4 * 1024 * 1024;
const OPEN_CONCURRENCY = 8;

/** Creates a segment file with its header, durably (the directory entry included). */
export async function createSegmentFile(io: StoreIo, directory: string, header: SegmentHeader): Promise<StoreFile> {
  const handle = await io.open(path.join(directory, segmentFileName(header.base)), 'wx+');
  try {
    await writeFully(handle, encodeSegmentHeader(header), 0);
    await handle.datasync();
    await io.syncDirectory(directory);
    return handle;
  } catch (error) {
    await handle.close();
    throw error;
  }
}

async function listSegmentBases(io: StoreIo, directory: string, log: (message: string) => void): Promise<number[]> {
  const bases: number[] = [];
  for (const name of await io.readdir(directory)) {
    if (name.endsWith(COMPACTION_SUFFIX) || name.endsWith('.idx.tmp')) {
      if (name.endsWith(COMPACTION_SUFFIX)) log(`Event log: removed ${name}, left by a compaction that did not finish (the segment itself is intact)`);
      await io.unlink(path.join(directory, name));
      continue;
    }
    const base = segmentBaseOfName(name);
    if (base !== null) bases.push(base);
  }
  return bases.sort((a, b) => a - b);
}

/** Reads (and for the active segment, finishes an interrupted creation of) a segment's header. */
async function readHeader(handle: StoreFile, file: string, base: number, active: boolean, repairs: Repairs): Promise<{ header: SegmentHeader; size: number }> {
  let size = (await handle.stat()).size;
  if (size < SEGMENT_HEADER_SIZE) {
    const existing = await readFully(handle, 0, size);
    const fresh = encodeSegmentHeader({ base, generation: 0 });
    if (!active || !existing.equals(fresh.subarray(0, size))) throw new CorruptEventLogError(file, 0, 'not an event log');
    // Only the creation of the file was interrupted. If it cannot be finished now (a full
    // disk), the segment is empty anyway: the log opens read-only, and the first append
    // that can write finishes it (write-availability.ts, resume).
    try {
      await handle.truncate(0);
      await writeFully(handle, fresh, 0);
      await handle.datasync();
    } catch (error) {
      repairs.failed ??= error instanceof Error ? error : new Error(String(error));
      return { header: { base, generation: 0 }, size: 0 };
    }
    size = SEGMENT_HEADER_SIZE;
  }
  const header = decodeSegmentHeader(await readFully(handle, 0, SEGMENT_HEADER_SIZE));
  if (header === null) throw new CorruptEventLogError(file, 0, 'not an event log (unknown file header)');
  if (header.base !== base) throw new CorruptEventLogError(file, 8, `its header names base ${header.base}, its file name ${base}`);
  return { header, size };
}

async function sealedTable(io: StoreIo, handle: StoreFile, file: string, header: SegmentHeader, size: number, log: (m: string) => void): Promise<SegmentTable> {
  const loaded = await loadSegmentIndex(file, header, size, io);
  if ('table' in loaded && loaded.table.coveredSize === size) return loaded.table;
  const problem = 'table' in loaded ? 'it covers less than the segment' : loaded.problem;
  log(`Event log: index checkpoint of ${path.basename(file)} not used (${problem}); scanning the segment`);
  const table = new SegmentTable(header.base, SEGMENT_HEADER_SIZE);
  await scanSegment({ file, base: header.base, readAt: (o, l) => readFully(handle, o, l), fileSize: size, sealed: true }, table);
  // A cache: when it cannot be written (a full disk), the next open scans again.
  await writeSegmentIndex(file, header, table, header.generation > 0, io).catch((error: unknown) =>
    log(`Event log: could not write the index checkpoint of ${path.basename(file)} (${errorMessage(error)})`),
  );
  return table;
}

/**
 * A sealed segment ends at its close record if it has one: a segment closed cleanly and
 * followed by another without being opened as the active one in between (not something the
 * store does: opening cuts it, sealing truncates), read as it stands rather than refused.
 */
async function sealedSegmentTable(handle: StoreFile, file: string, header: SegmentHeader, size: number, options: RecoveryOptions): Promise<{ table: SegmentTable; size: number }> {
  const end = (await readCloseRecord(handle, size))?.offset ?? size;
  return { table: await sealedTable(options.io, handle, file, header, end, options.log), size: end };
}

/** CRC-32 of the file's bytes in [from, to), continuing `previous`. */
async function crcOfFile(handle: StoreFile, from: number, to: number, previous: number): Promise<number> {
  let crc = previous;
  for (let at = from; at < to; at += CRC_CHUNK_SIZE) crc = crc32(await readFully(handle, at, Math.min(CRC_CHUNK_SIZE, to - at)), crc);
  return crc;
}

/**
 * The active segment's checkpoint (written while running and at close) is trusted only if the bytes it covers
 * still have its CRC: one native checksum pass instead of decoding every record, and any
 * change to acknowledged data still leads to the full scan that finds it.
 */
async function verifiedActiveCheckpoint(
  io: StoreIo,
  handle: StoreFile,
  file: string,
  header: SegmentHeader,
  size: number,
  log: (m: string) => void,
): Promise<{ table: SegmentTable | null; vouchedEnd: number }> {
  if (size <= SEGMENT_HEADER_SIZE) return { table: null, vouchedEnd: 0 };
  const loaded = await loadSegmentIndex(file, header, size, io);
  let problem = 'table' in loaded ? 'its checksum of the segment does not match' : loaded.problem;
  let vouchedEnd = 0;
  if ('table' in loaded && loaded.table.coveredCrc !== null) {
    if ((await crcOfFile(handle, 0, loaded.table.coveredSize, 0)) === loaded.table.coveredCrc) return { table: loaded.table, vouchedEnd: 0 };
    // An intact checkpoint covers these bytes: they were acknowledged, so damage in them is
    // refused by the scan, not cut off as a torn tail.
    vouchedEnd = loaded.table.coveredSize;
  } else if ('table' in loaded) {
    problem = 'it has no checksum of the segment';
  }
  log(`Event log: index checkpoint of ${path.basename(file)} not used (${problem}); scanning the segment`);
  return { table: null, vouchedEnd };
}

/** The close record a clean close left at the end of the active segment, or null (a crash, or a version before it). */
async function readCloseRecord(handle: StoreFile, size: number): Promise<CloseRecord | null> {
  if (size < SEGMENT_HEADER_SIZE + CLOSE_RECORD_SIZE) return null;
  const offset = size - CLOSE_RECORD_SIZE;
  return decodeCloseRecord(await readFully(handle, offset, CLOSE_RECORD_SIZE), offset);
}

async function activeTable(handle: StoreFile, file: string, header: SegmentHeader, size: number, options: RecoveryOptions, repairs: Repairs): Promise<{ table: SegmentTable; size: number }> {
  if (size < SEGMENT_HEADER_SIZE) return { table: new SegmentTable(header.base, SEGMENT_HEADER_SIZE), size };
  // After a clean close, everything before its close record was acknowledged: damage there
  // is refused, never cut as a torn tail, with or without the index checkpoint.
  const closed = await readCloseRecord(handle, size);
  const logEnd = closed?.offset ?? size;
  // A stop that could not write the close record (a full disk) left it in the close file.
  const fromFile = await closeFileFor(handle, file, header, logEnd, options);
  if (fromFile !== null) repairs.closeFile = 'used';
  const verified = await verifiedActiveCheckpoint(options.io, handle, file, header, logEnd, options.log);
  const checkpoint = verified.table;
  const table = checkpoint ?? new SegmentTable(header.base, SEGMENT_HEADER_SIZE);
  const from = table.coveredSize;
  const vouchedEnd = Math.max(verified.vouchedEnd, closed?.offset ?? 0, fromFile?.length ?? 0);
  const vouchedBy = fromFile !== null && fromFile.length === vouchedEnd ? closeFileVouching(fromFile) : undefined;
  const target = { file, base: header.base, readAt: (o: number, l: number) => readFully(handle, o, l), fileSize: logEnd, sealed: false, vouchedEnd, vouchedBy };
  const { end } = await scanSegment(target, table);
  table.coveredCrc = await crcOfFile(handle, checkpoint === null ? 0 : from, end, checkpoint?.coveredCrc ?? 0);
  if (closed !== null && table.coveredCrc !== closed.crc) {
    throw new CorruptEventLogError(file, closed.offset, 'the bytes before the record of its last clean close do not have the checksum it recorded');
  }
  if (fromFile !== null) {
    // The scan reached at least its length (else it refused): every record before it is
    // intact (its own CRC-32, or a checkpoint's). Another checksum then is not damage, which
    // breaks a record's CRC, but the same log rewritten from some record on by something
    // that does not know the close file: a version before it after a downgrade, which cut
    // the damaged last record as a torn tail and appended over it (that loss has happened
    // and cannot be undone now), or a copy of this log from another moment. Said loudly;
    // the record is stale and cleared.
    const crc = end === fromFile.length ? table.coveredCrc : await crcOfFile(handle, 0, fromFile.length, 0);
    if (crc !== fromFile.crc) {
      options.log(
        `Event log: ${CLOSE_FILE_NAME} vouched for the first ${fromFile.length} bytes of ${path.basename(file)} at its last clean stop on a full disk, ` +
          `but every record there is intact and their checksum differs: they were rewritten since by a version without ${CLOSE_FILE_NAME} ` +
          `(after a downgrade; it may have cut a damaged acknowledged record before byte ${fromFile.length}) or replaced by a copy from another moment. ` +
          `${CLOSE_FILE_NAME} is stale and cleared; the log opens as it is`,
      );
      repairs.closeFile = 'clear';
    }
  }
  if (end < logEnd) options.onTornTail({ offset: end, droppedBytes: size - end });
  if (end < size) {
    // A torn tail, or the close record: the next append goes where it starts.
    try {
      await handle.truncate(end);
    } catch (error) {
      // The bytes past `end` are never read; the first append that can write cuts them.
      repairs.failed ??= error instanceof Error ? error : new Error(String(error));
    }
  }
  // What open found and will serve is made durable before anything is read: a batch whose
  // fsync failed but whose bytes are still in the page cache must not be served now and
  // lost at the next power cut. If that cannot be done, the open fails (and is retried).
  await handle.datasync();
  return { table, size: end };
}

/** The first repair write at open that failed (the log then opens read-only), and what open made of the close file. */
interface Repairs {
  failed: Error | null;
  closeFile: CloseFileAtOpen;
}

/** How a refusal names the close file's vouching. */
function closeFileVouching(record: CloseFileRecord): string {
  return (
    `${CLOSE_FILE_NAME} vouches for its first ${record.length} bytes, recorded at its last clean stop on a full disk; ` +
    `only if these segments were restored or copied from another log or another moment is ${CLOSE_FILE_NAME} stale (move it away and start again)`
  );
}

/**
 * The close file's record if it vouches for this active segment: intact, naming it (base,
 * generation, and the identity of its first bytes), and for no more bytes than it has.
 * Anything else is ignored (said on the log when not empty). A record whose identity does
 * not match is another log's when the segment's first record is intact (damage cannot turn
 * one intact record into another); when that record is damaged or torn too, it is taken as
 * this log's, damaged there, and the scan refuses it naming the close file.
 */
async function closeFileFor(handle: StoreFile, file: string, header: SegmentHeader, size: number, options: RecoveryOptions): Promise<CloseFileRecord | null> {
  if (options.closeFile === null) return null;
  const decoded = decodeCloseFile(options.closeFile);
  let ignored: string | null = 'ignored' in decoded ? decoded.ignored : null;
  if (!('ignored' in decoded)) {
    const { identity } = decoded;
    if (decoded.base !== header.base || decoded.generation !== header.generation) ignored = `it names another segment (base ${decoded.base})`;
    else if (decoded.length > size) ignored = `it vouches for ${decoded.length} bytes, the segment has ${size}`;
    else if (decoded.length < SEGMENT_HEADER_SIZE) ignored = 'it vouches for less than a segment header';
    else if (identity.length < SEGMENT_HEADER_SIZE || identity.length > decoded.length) ignored = 'its identity of the segment is out of range';
    else if (crc32(await readFully(handle, 0, identity.length)) !== identity.crc && (await firstRecordIntact(handle, header.base, size))) {
      ignored = `it is another log's: the first record of ${path.basename(file)} is intact and not the one it names`;
    } else {
      options.log(`Event log: the last clean stop marked its close in ${CLOSE_FILE_NAME} (a full disk): the first ${decoded.length} bytes of ${path.basename(file)} are checked as acknowledged`);
      return decoded;
    }
  }
  if (ignored !== 'empty') options.log(`Event log: ${CLOSE_FILE_NAME} ignored (${ignored})`);
  return null;
}

async function firstRecordIntact(handle: StoreFile, base: number, size: number): Promise<boolean> {
  const cursor = new RecordCursor((o, l) => readFully(handle, o, l), base, size, 64 * 1024);
  return (await cursor.decodeAt(SEGMENT_HEADER_SIZE)).kind === 'ok';
}

/** Opens a segment; only the active one keeps its file open (sealed ones open theirs when read). */
async function openSegment(directory: string, base: number, active: boolean, options: RecoveryOptions, repairs: Repairs): Promise<{ segment: Segment; table: SegmentTable }> {
  const file = path.join(directory, segmentFileName(base));
  const handle = await options.io.open(file, active ? 'r+' : 'r');
  let keepOpen = false;
  try {
    const { header, size } = await readHeader(handle, file, base, active, repairs);
    const opened = active ? await activeTable(handle, file, header, size, options, repairs) : await sealedSegmentTable(handle, file, header, size, options);
    const { table } = opened;
    const locator = header.generation > 0 ? locatorOf(table) : null;
    const segment = new Segment(directory, base, header.generation, active ? handle : null, opened.size, locator, options.pool);
    segment.noteTable(table);
    keepOpen = active;
    return { segment, table };
  } finally {
    if (!keepOpen) await handle.close();
  }
}

async function createFirstSegment(io: StoreIo, directory: string): Promise<void> {
  try {
    const handle = await createSegmentFile(io, directory, { base: 0, generation: 0 });
    await handle.close();
  } catch (error) {
    if (errorCode(error) !== 'EEXIST') throw error;
  }
}

/**
 * Seals an active segment that is already full (the whole log of an earlier version, say),
 * so that later opens read its checkpoint instead of checking all of it; returns the new,
 * empty active segment.
 */
async function sealOversized(directory: string, full: { segment: Segment; table: SegmentTable }, pool: HandlePool, log: (m: string) => void): Promise<{ segment: Segment; table: SegmentTable }> {
  const { segment, table } = full;
  // A cache: when it cannot be written (a full disk), the next open scans the segment.
  await writeSegmentIndex(segment.file, segment, table, false, pool.io).catch((error: unknown) =>
    log(`Event log: could not write the index checkpoint of ${path.basename(segment.file)} (${errorMessage(error)})`),
  );
  const base = segment.base + segment.size;
  const handle = await createSegmentFile(pool.io, directory, { base, generation: 0 });
  segment.seal();
  const next = new SegmentTable(base, SEGMENT_HEADER_SIZE);
  next.coveredCrc = crc32(encodeSegmentHeader({ base, generation: 0 }));
  return { segment: new Segment(directory, base, 0, handle, SEGMENT_HEADER_SIZE, null, pool), table: next };
}

/**
 * Runs `work` on each item, at most `limit` at a time; results in the order of the items.
 * On a failure no new item starts, and it throws only once the started ones have ended.
 */
async function mapLimited<T, R>(items: readonly T[], limit: number, work: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array<R>(items.length);
  const failures: unknown[] = [];
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length && failures.length === 0) {
      const i = next++;
      try {
        results[i] = await work(items[i] as T);
      } catch (error) {
        failures.push(error);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  if (failures.length > 0) throw failures[0];
  return results;
}

export async function openLog(directory: string, options: RecoveryOptions): Promise<OpenedLog> {
  let bases = await listSegmentBases(options.io, directory, options.log);
  if (bases.length === 0) {
    await createFirstSegment(options.io, directory);
    bases = [0];
  }
  const opened: Array<{ segment: Segment; table: SegmentTable }> = [];
  // A record open does not use is zeroed before the first write (close-file.ts).
  const repairs: Repairs = { failed: null, closeFile: holdsRecord(options.closeFile) ? 'clear' : 'none' };
  // The entries open finds are made durable before anything is appended: a segment whose
  // creation a stopped process left unsynced must not vanish at a later power cut with the
  // appends acknowledged in it.
  await options.io.syncDirectory(directory);
  const keep = async (base: number, active: boolean): Promise<{ segment: Segment; table: SegmentTable }> => {
    const result = await openSegment(directory, base, active, options, repairs);
    opened.push(result);
    return result;
  };
  try {
    // Sealed segments in parallel (their checkpoints are independent), the active one last.
    const sealed = await mapLimited(bases.slice(0, -1), OPEN_CONCURRENCY, (base) => keep(base, false));
    let active = await keep(bases[bases.length - 1] as number, true);
    const all = [...sealed, active];
    if (active.segment.size > options.segmentBytes && repairs.failed === null) {
      try {
        active = await sealOversized(directory, active, options.pool, options.log);
        opened.push(active);
        all.push(active);
      } catch (error) {
        // The next segment could not be created (a full disk): the log opens read-only with
        // this one still active, and resuming removes what the failed creation left.
        repairs.failed = error instanceof Error ? error : new Error(String(error));
      }
    }
    const index = new LogIndex();
    index.applyTables(all.map(({ segment, table }) => ({ table, file: segment.file })));
    return { segments: all.map(({ segment }) => segment), index, activeTable: active.table, readOnly: repairs.failed, closeFile: repairs.closeFile };
  } catch (error) {
    await Promise.all(opened.map(({ segment }) => segment.retire()));
    throw error;
  }
}
