/**
 * The embedded event store: one durable append-only log file per data directory.
 *
 * File layout: a 16-byte file header, then records. One record per event:
 *
 *   u32 bodyLength | u32 crc32(body) | body
 *   body = u8 marker | u8 flags | u16 nameLength | u64 revision | f64 writtenAt | streamName | JSON payload
 *
 * An event's global position is the byte offset of its record (commit === prepare), so
 * positions increase with gaps. The last record of each append carries END_OF_APPEND: at
 * start, an append whose records are not all intact is dropped whole, so a multi-event
 * append never half-survives a crash. The first record of each group commit carries
 * FIRST_OF_BATCH, which tells a torn last write (dropped) from damage to synced data
 * (open fails). Everything but payloads (the stream index) lives in memory and is rebuilt
 * by scanning the log at open; so do the last few MiB of committed records, which readers
 * that keep up with the log (subscriptions, reads of what was just appended) get from memory.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import * as fs from 'node:fs/promises';
import * as path from 'node:path';
import * as zlib from 'node:zlib';
import type { EventMetadata } from '../../domain/messages';
import {
  WrongExpectedRevisionError,
  type AppendResult,
  type EventStore,
  type ExpectedRevision,
  type GlobalPosition,
  type NewEvent,
  type ReadStreamOptions,
  type RecordedEvent,
  type SubscribeOptions,
  type Subscription,
  type SubscriptionItem,
} from './port';

export const EVENT_LOG_FILE_NAME = 'events.log';
export const LOCK_FILE_NAME = 'events.lock';

export interface GroupCommit {
  readonly appends: number;
  readonly events: number;
  readonly bytes: number;
}

export interface TornTail {
  /** Byte offset where the log now ends. */
  readonly offset: number;
  readonly droppedBytes: number;
}

export interface EmbeddedEventStoreOptions {
  /** Clock (epoch ms) for the written-at time that $maxAge compares against; tests age events with it. */
  readonly now?: () => number;
  /** Called once per durable group commit: shows how well appends are being batched. */
  readonly onGroupCommit?: (commit: GroupCommit) => void;
  /** Called when open drops a torn tail; defaults to a warning on stderr. */
  readonly onTornTail?: (tail: TornTail) => void;
}

/** The log cannot be trusted: something other than a torn tail is damaged. */
export class CorruptEventLogError extends Error {
  constructor(
    readonly file: string,
    readonly offset: number,
    detail: string,
  ) {
    super(`Event log ${file} is corrupt at byte ${offset}: ${detail}. Refusing to open; restore it from a backup.`);
    this.name = 'CorruptEventLogError';
  }
}

export class EventStoreLockedError extends Error {
  constructor(
    readonly dataDir: string,
    readonly ownerPid: number,
  ) {
    super(
      `Event store in ${dataDir} is already open (process ${ownerPid}). ` +
        `If that process is gone, delete ${path.join(dataDir, LOCK_FILE_NAME)}.`,
    );
    this.name = 'EventStoreLockedError';
  }
}

export async function openEmbeddedEventStore(
  dataDir: string,
  options: EmbeddedEventStoreOptions = {},
): Promise<EventStore> {
  const directory = path.resolve(dataDir);
  await fs.mkdir(directory, { recursive: true });
  const releaseLock = await acquireLock(directory);
  try {
    const file = path.join(directory, EVENT_LOG_FILE_NAME);
    const handle = await openLogFile(file, directory);
    try {
      const index = await rebuildIndex(handle, file, options.onTornTail ?? warnTornTail(file));
      return new EmbeddedEventStore(handle, index, options, releaseLock);
    } catch (error) {
      await handle.close();
      throw error;
    }
  } catch (error) {
    await releaseLock();
    throw error;
  }
}

// ---------------------------------------------------------------------------------------
// Record format

const FILE_MAGIC = Buffer.from('HHEVLOG\x01', 'latin1');
/** The header also guarantees that no event sits at position 0, which callers may treat as "start". */
const FILE_HEADER_SIZE = 16;
const RECORD_PREFIX_SIZE = 8;
const RECORD_MARKER = 0xe7;
const BODY_FIXED_SIZE = 20;
const FLAG_END_OF_APPEND = 1;
/** Set on the first record of each group commit: a later batch proves an earlier one was synced. */
const FLAG_FIRST_OF_BATCH = 2;
const MAX_BODY_SIZE = 16 * 1024 * 1024;
const MAX_STREAM_NAME_BYTES = 0xffff;

const SCAN_CHUNK_SIZE = 4 * 1024 * 1024;
const REPLAY_CHUNK_SIZE = 1024 * 1024;
const POINT_READ_SIZE = 4096;
const STREAM_READ_BATCH = 32;
/** How much of the newest log the store keeps in memory for readers that keep up. */
const RECENT_COMMITS_BYTES = 4 * 1024 * 1024;
/** Every Nth record's offset is kept so a subscription can seek to any position cheaply. */
const SEEK_INDEX_EVERY = 1024;

interface RawRecord {
  readonly offset: number;
  readonly size: number;
  readonly flags: number;
  readonly streamName: string;
  readonly revision: number;
  readonly writtenAt: number;
  readonly payload: Buffer;
}

type DecodeResult =
  | { readonly kind: 'ok'; readonly record: RawRecord }
  | { readonly kind: 'incomplete'; readonly needed: number }
  | { readonly kind: 'invalid'; readonly reason: string };

interface StoredPayload {
  readonly id: string;
  readonly type: string;
  readonly data: unknown;
  readonly metadata: EventMetadata;
}

const CRC32_TABLE = buildCrc32Table();

function buildCrc32Table(): Int32Array {
  const table = new Int32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let bit = 0; bit < 8; bit++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c;
  }
  return table;
}

/** CRC-32 (IEEE) for Node versions whose zlib lacks crc32 (before 20.15). */
export function crc32Portable(bytes: Uint8Array): number {
  let c = -1;
  for (let i = 0; i < bytes.length; i++) c = (CRC32_TABLE[(c ^ (bytes[i] ?? 0)) & 0xff] ?? 0) ^ (c >>> 8);
  return (c ^ -1) >>> 0;
}

const crc32: (bytes: Uint8Array) => number =
  typeof zlib.crc32 === 'function' ? (bytes) => zlib.crc32(bytes) : crc32Portable;

function encodeRecord(streamName: string, revision: number, writtenAt: number, flags: number, json: string): Buffer {
  const nameLength = Buffer.byteLength(streamName, 'utf8');
  const payloadLength = Buffer.byteLength(json, 'utf8');
  const bodyLength = BODY_FIXED_SIZE + nameLength + payloadLength;
  if (nameLength > MAX_STREAM_NAME_BYTES) throw new Error(`Stream name too long (${nameLength} bytes)`);
  if (bodyLength > MAX_BODY_SIZE) throw new Error(`Event too large for ${streamName} (${bodyLength} bytes)`);
  const record = Buffer.allocUnsafe(RECORD_PREFIX_SIZE + bodyLength);
  record.writeUInt32LE(bodyLength, 0);
  const body = record.subarray(RECORD_PREFIX_SIZE);
  body[0] = RECORD_MARKER;
  body[1] = flags;
  body.writeUInt16LE(nameLength, 2);
  body.writeBigUInt64LE(BigInt(revision), 4);
  body.writeDoubleLE(writtenAt, 12);
  body.write(streamName, BODY_FIXED_SIZE, 'utf8');
  body.write(json, BODY_FIXED_SIZE + nameLength, 'utf8');
  record.writeUInt32LE(crc32(body), 4);
  return record;
}

/** Flags the record at the start of `records` in place (and re-seals its checksum). */
function markFirstOfBatch(records: Buffer): void {
  const body = records.subarray(RECORD_PREFIX_SIZE, RECORD_PREFIX_SIZE + records.readUInt32LE(0));
  body[1] = (body[1] ?? 0) | FLAG_FIRST_OF_BATCH;
  records.writeUInt32LE(crc32(body), 4);
}

function decodeRecord(buffer: Buffer, at: number, fileOffset: number): DecodeResult {
  if (buffer.length - at < RECORD_PREFIX_SIZE) return { kind: 'incomplete', needed: RECORD_PREFIX_SIZE };
  const bodyLength = buffer.readUInt32LE(at);
  if (bodyLength < BODY_FIXED_SIZE || bodyLength > MAX_BODY_SIZE) {
    return { kind: 'invalid', reason: `implausible record length ${bodyLength}` };
  }
  const size = RECORD_PREFIX_SIZE + bodyLength;
  if (buffer.length - at < size) return { kind: 'incomplete', needed: size };
  const body = buffer.subarray(at + RECORD_PREFIX_SIZE, at + size);
  if (body[0] !== RECORD_MARKER) return { kind: 'invalid', reason: 'missing record marker' };
  if (crc32(body) !== buffer.readUInt32LE(at + 4)) return { kind: 'invalid', reason: 'checksum mismatch' };
  const nameLength = body.readUInt16LE(2);
  if (BODY_FIXED_SIZE + nameLength > bodyLength) return { kind: 'invalid', reason: 'stream name overruns record' };
  return {
    kind: 'ok',
    record: {
      offset: fileOffset,
      size,
      flags: body[1] ?? 0,
      revision: Number(body.readBigUInt64LE(4)),
      writtenAt: body.readDoubleLE(12),
      streamName: body.toString('utf8', BODY_FIXED_SIZE, BODY_FIXED_SIZE + nameLength),
      payload: body.subarray(BODY_FIXED_SIZE + nameLength),
    },
  };
}

function isStoredPayload(value: unknown): value is StoredPayload {
  if (typeof value !== 'object' || value === null) return false;
  const candidate: { id?: unknown; type?: unknown; metadata?: unknown } = value;
  return (
    typeof candidate.id === 'string' &&
    typeof candidate.type === 'string' &&
    typeof candidate.metadata === 'object' &&
    candidate.metadata !== null
  );
}

function parsePayload(record: RawRecord): StoredPayload {
  const parsed: unknown = JSON.parse(record.payload.toString('utf8'));
  if (!isStoredPayload(parsed)) throw new Error(`Event at byte ${record.offset} has a malformed payload`);
  return parsed;
}

function positionAt(offset: number): GlobalPosition {
  const value = BigInt(offset);
  return { commit: value, prepare: value };
}

function toRecordedEvent(record: RawRecord): RecordedEvent {
  const payload = parsePayload(record);
  return {
    id: payload.id,
    streamName: record.streamName,
    revision: BigInt(record.revision),
    position: positionAt(record.offset),
    type: payload.type,
    data: payload.data,
    metadata: payload.metadata,
  };
}

function isSystemStream(streamName: string): boolean {
  return streamName.startsWith('$');
}

const METADATA_EVENT_TYPE = '$metadata';

/** EventStoreDB convention: the metadata of stream `s` lives in stream `$$s`. */
function metadataTarget(streamName: string): string | null {
  return streamName.startsWith('$$') ? streamName.slice(2) : null;
}

function maxAgeFromMetadata(data: unknown): number | null {
  if (typeof data !== 'object' || data === null) return null;
  const metadata: { $maxAge?: unknown } = data;
  const maxAge = metadata.$maxAge;
  return typeof maxAge === 'number' && Number.isFinite(maxAge) && maxAge > 0 ? maxAge : null;
}

// ---------------------------------------------------------------------------------------
// File access

type ReadAt = (offset: number, length: number) => Promise<Buffer>;

async function readFully(handle: fs.FileHandle, offset: number, length: number): Promise<Buffer> {
  const buffer = Buffer.allocUnsafe(length);
  let filled = 0;
  while (filled < length) {
    const { bytesRead } = await handle.read(buffer, filled, length - filled, offset + filled);
    if (bytesRead === 0) break;
    filled += bytesRead;
  }
  return filled === length ? buffer : buffer.subarray(0, filled);
}

async function writeFully(handle: fs.FileHandle, bytes: Buffer, offset: number): Promise<void> {
  let written = 0;
  while (written < bytes.length) {
    const result = await handle.write(bytes, written, bytes.length - written, offset + written);
    written += result.bytesWritten;
  }
}

/** Decodes consecutive records, reading ahead in chunks so a replay costs few syscalls. */
class RecordCursor {
  private buffer: Buffer = Buffer.alloc(0);
  private bufferStart = 0;

  constructor(
    private readonly readAt: ReadAt,
    private readonly limit: number,
    private readonly chunkSize: number,
  ) {}

  async decodeAt(offset: number): Promise<DecodeResult> {
    let needed = RECORD_PREFIX_SIZE;
    for (;;) {
      const relative = offset - this.bufferStart;
      if (relative >= 0 && relative + needed <= this.buffer.length) {
        const result = decodeRecord(this.buffer, relative, offset);
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

async function readRecordAt(readAt: ReadAt, offset: number, limit: number): Promise<RawRecord> {
  const cursor = new RecordCursor(readAt, limit, Math.min(POINT_READ_SIZE, limit - offset));
  const result = await cursor.decodeAt(offset);
  if (result.kind === 'ok') return result.record;
  throw new Error(
    `Event log record at byte ${offset} is unreadable (${result.kind === 'invalid' ? result.reason : 'truncated'})`,
  );
}

async function openLogFile(file: string, directory: string): Promise<fs.FileHandle> {
  try {
    return await fs.open(file, 'r+');
  } catch (error) {
    if (errorCode(error) !== 'ENOENT') throw error;
  }
  const handle = await fs.open(file, 'wx+');
  await writeFileHeader(handle);
  // The new directory entry must be durable too, or a crash could lose the whole file.
  await syncDirectory(directory);
  return handle;
}

async function writeFileHeader(handle: fs.FileHandle): Promise<void> {
  const header = Buffer.alloc(FILE_HEADER_SIZE);
  FILE_MAGIC.copy(header);
  await handle.truncate(0);
  await writeFully(handle, header, 0);
  await handle.datasync();
}

async function syncDirectory(directory: string): Promise<void> {
  const handle = await fs.open(directory, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

function errorCode(error: unknown): string | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const withCode: { code?: unknown } = error;
  return typeof withCode.code === 'string' ? withCode.code : undefined;
}

function warnTornTail(file: string): (tail: TornTail) => void {
  return (tail) =>
    console.warn(
      `Event log ${file}: dropped a torn tail of ${tail.droppedBytes} bytes at byte ${tail.offset} ` +
        `(an append that was never acknowledged)`,
    );
}

// ---------------------------------------------------------------------------------------
// Lock file

/** Data directories this process holds open; tells our own stale lock from a live one. */
const openDataDirectories = new Set<string>();

async function acquireLock(directory: string): Promise<() => Promise<void>> {
  const lockFile = path.join(directory, LOCK_FILE_NAME);
  if (openDataDirectories.has(directory)) throw new EventStoreLockedError(directory, process.pid);
  // Claimed before the first await, so two opens racing in this process cannot both win.
  openDataDirectories.add(directory);
  try {
    return await createLockFile(directory, lockFile);
  } catch (error) {
    openDataDirectories.delete(directory);
    throw error;
  }
}

async function createLockFile(directory: string, lockFile: string): Promise<() => Promise<void>> {
  for (let attempt = 0; ; attempt++) {
    try {
      const handle = await fs.open(lockFile, 'wx');
      try {
        await handle.writeFile(`${process.pid} ${processStartTime(process.pid) ?? ''}\n`);
      } finally {
        await handle.close();
      }
      return async () => {
        await fs.rm(lockFile, { force: true });
        openDataDirectories.delete(directory);
      };
    } catch (error) {
      if (errorCode(error) !== 'EEXIST') throw error;
    }
    const [pidText, startText] = (await fs.readFile(lockFile, 'utf8').catch(() => '')).trim().split(' ');
    const ownerPid = Number.parseInt(pidText ?? '', 10);
    // Another process took over the stale lock between our two attempts.
    if (attempt > 0) throw new EventStoreLockedError(directory, ownerPid);
    // A lock holding our own pid but not in our registry was left by an earlier process
    // that had the same pid (common in containers, where the service is often pid 1).
    if (Number.isInteger(ownerPid) && ownerPid !== process.pid && isLockOwnerAlive(ownerPid, startText)) {
      throw new EventStoreLockedError(directory, ownerPid);
    }
    await fs.rm(lockFile, { force: true });
  }
}

/**
 * Whether the process that wrote the lock still runs. A process killed with SIGKILL is a
 * zombie until its parent reaps it: it holds nothing any more, so it does not count (a
 * restart right after a crash must succeed at once). Where /proc tells the start time, a
 * pid reused by another process does not count either.
 */
function isLockOwnerAlive(pid: number, recordedStart: string | undefined): boolean {
  try {
    process.kill(pid, 0);
  } catch (error) {
    return errorCode(error) === 'EPERM';
  }
  const stat = procStat(pid);
  if (stat === null) return true;
  if (stat.state === 'Z' || stat.state === 'X' || stat.state === 'x') return false;
  return recordedStart === undefined || recordedStart === '' || recordedStart === stat.startTime;
}

/** State and start time (clock ticks since boot) of a process, from Linux's /proc; null elsewhere. */
function procStat(pid: number): { state: string; startTime: string } | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  // The command name (field 2) is in parentheses and may hold spaces: count from the last ')'.
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  const state = fields[0];
  const startTime = fields[19];
  return state === undefined || startTime === undefined ? null : { state, startTime };
}

function processStartTime(pid: number): string | null {
  return procStat(pid)?.startTime ?? null;
}

// ---------------------------------------------------------------------------------------
// Index rebuilt at open

interface StreamIndex {
  /** Offsets of every event of the stream, including appends reserved but not yet durable. */
  readonly positions: number[];
  /** How many of `positions` are durable, hence visible to readers. */
  durableCount: number;
}

interface LogIndex {
  readonly streams: Map<string, StreamIndex>;
  readonly maxAgeSeconds: Map<string, number>;
  readonly seekIndex: number[];
  recordCount: number;
  end: number;
  lastUserEventOffset: number | null;
  lastWrittenAt: number;
}

function streamIndexOf(index: LogIndex, streamName: string): StreamIndex {
  let stream = index.streams.get(streamName);
  if (stream === undefined) {
    stream = { positions: [], durableCount: 0 };
    index.streams.set(streamName, stream);
  }
  return stream;
}

function noteDurableRecord(index: LogIndex, offset: number, streamName: string): void {
  if (index.recordCount % SEEK_INDEX_EVERY === 0) index.seekIndex.push(offset);
  index.recordCount++;
  if (!isSystemStream(streamName)) index.lastUserEventOffset = offset;
}

function applyMaxAge(index: LogIndex, streamName: string, maxAge: number | null): void {
  if (maxAge === null) index.maxAgeSeconds.delete(streamName);
  else index.maxAgeSeconds.set(streamName, maxAge);
}

async function rebuildIndex(handle: fs.FileHandle, file: string, onTornTail: (tail: TornTail) => void): Promise<LogIndex> {
  const readAt: ReadAt = (offset, length) => readFully(handle, offset, length);
  let fileSize = (await handle.stat()).size;
  if (fileSize < FILE_HEADER_SIZE) {
    const existing = await readAt(0, fileSize);
    const blankHeader = Buffer.alloc(FILE_HEADER_SIZE);
    FILE_MAGIC.copy(blankHeader);
    if (!existing.equals(blankHeader.subarray(0, fileSize))) throw new CorruptEventLogError(file, 0, 'not an event log');
    // Only the creation of the file was interrupted.
    await writeFileHeader(handle);
    fileSize = FILE_HEADER_SIZE;
  }
  const header = await readAt(0, FILE_MAGIC.length);
  if (!header.equals(FILE_MAGIC)) throw new CorruptEventLogError(file, 0, 'not an event log (unknown file header)');

  const index: LogIndex = {
    streams: new Map(),
    maxAgeSeconds: new Map(),
    seekIndex: [],
    recordCount: 0,
    end: FILE_HEADER_SIZE,
    lastUserEventOffset: null,
    lastWrittenAt: 0,
  };
  const cursor = new RecordCursor(readAt, fileSize, SCAN_CHUNK_SIZE);
  let unfinishedAppend: RawRecord[] = [];
  let offset = FILE_HEADER_SIZE;
  while (offset < fileSize) {
    const result = await cursor.decodeAt(offset);
    if (result.kind !== 'ok') {
      // A batch is written only after the previous one was synced, so damage followed by
      // the start of a later batch hit synced (acknowledged) data. Without one, the damage
      // lies in the last batch, which a crash may leave torn anywhere, holes included.
      const laterBatch = await findBatchStart(readAt, offset + 1, fileSize);
      if (laterBatch !== null) {
        const reason = result.kind === 'invalid' ? result.reason : 'record runs past the end of file';
        throw new CorruptEventLogError(file, offset, `${reason}, yet a later write starts intact at byte ${laterBatch}`);
      }
      break;
    }
    const record = result.record;
    const first = unfinishedAppend[0];
    if (first !== undefined && first.streamName !== record.streamName) {
      throw new CorruptEventLogError(file, first.offset, 'an append of several events is cut short in the middle of the log');
    }
    unfinishedAppend.push(record);
    offset += record.size;
    if (record.flags & FLAG_END_OF_APPEND) {
      indexAppend(index, unfinishedAppend, file);
      unfinishedAppend = [];
      index.end = offset;
    }
  }
  if (index.end < fileSize) {
    await handle.truncate(index.end);
    await handle.datasync();
    onTornTail({ offset: index.end, droppedBytes: fileSize - index.end });
  }
  return index;
}

function indexAppend(index: LogIndex, records: readonly RawRecord[], file: string): void {
  for (const record of records) {
    const stream = streamIndexOf(index, record.streamName);
    if (record.revision !== stream.positions.length) {
      throw new CorruptEventLogError(
        file,
        record.offset,
        `${record.streamName} jumps to revision ${record.revision} after ${stream.positions.length} events`,
      );
    }
    stream.positions.push(record.offset);
    stream.durableCount = stream.positions.length;
    noteDurableRecord(index, record.offset, record.streamName);
    index.lastWrittenAt = Math.max(index.lastWrittenAt, record.writtenAt);
    const target = metadataTarget(record.streamName);
    if (target !== null) {
      const payload = parsePayload(record);
      if (payload.type === METADATA_EVENT_TYPE) applyMaxAge(index, target, maxAgeFromMetadata(payload.data));
    }
  }
}

async function findBatchStart(readAt: ReadAt, from: number, fileEnd: number): Promise<number | null> {
  for (let chunkStart = from; chunkStart < fileEnd; chunkStart += SCAN_CHUNK_SIZE) {
    // Overlap by a prefix so a marker just past the chunk is still seen.
    const chunk = await readAt(chunkStart, Math.min(SCAN_CHUNK_SIZE + RECORD_PREFIX_SIZE + 1, fileEnd - chunkStart));
    const candidates = Math.min(SCAN_CHUNK_SIZE, chunk.length);
    for (let i = 0; i < candidates; i++) {
      if (chunk[i + RECORD_PREFIX_SIZE] !== RECORD_MARKER) continue;
      let candidate = decodeRecord(chunk, i, chunkStart + i);
      if (candidate.kind === 'incomplete') {
        candidate = await new RecordCursor(readAt, fileEnd, candidate.needed).decodeAt(chunkStart + i);
      }
      if (candidate.kind === 'ok' && candidate.record.flags & FLAG_FIRST_OF_BATCH) return chunkStart + i;
    }
  }
  return null;
}

// ---------------------------------------------------------------------------------------
// The store

interface PendingAppend {
  readonly streamName: string;
  readonly bytes: Buffer;
  readonly offsets: readonly number[];
  readonly endOffset: number;
  readonly result: AppendResult;
  readonly maxAgeUpdate: { readonly target: string; readonly maxAge: number | null } | null;
  readonly resolve: (result: AppendResult) => void;
  readonly reject: (error: Error) => void;
}

class EmbeddedEventStore implements EventStore {
  private readonly now: () => number;
  private reservedEnd: number;
  private queue: PendingAppend[] = [];
  private flushRunning = false;
  private flushDone: Promise<void> = Promise.resolve();
  private failure: Error | null = null;
  private closing = false;
  private closed: Promise<void> | null = null;
  private changeWaiters: Array<() => void> = [];
  private readonly inFlightReads = new Set<Promise<Buffer>>();
  private readonly readAt: ReadAt = (offset, length) => this.recentRead(offset, length) ?? this.trackedRead(offset, length);
  /**
   * The last group commits, as written (oldest first): subscribers that keep up — the
   * projector, the expiry feed — and reads of what was just appended decode from memory, in
   * the same turn of the event loop as the commit, instead of a file read through the
   * thread pool. That turn is what a write's read-your-writes wait would otherwise cost.
   */
  private recent: Array<{ readonly start: number; readonly bytes: Buffer }> = [];
  private recentBytes = 0;

  constructor(
    private readonly handle: fs.FileHandle,
    private readonly index: LogIndex,
    private readonly options: EmbeddedEventStoreOptions,
    private readonly releaseLock: () => Promise<void>,
  ) {
    this.now = options.now ?? Date.now;
    this.reservedEnd = index.end;
  }

  // Everything up to the first await runs synchronously, so expectations are checked and
  // offsets reserved in call order even while earlier appends still wait for their fsync.
  async append(streamName: string, events: readonly NewEvent[], expected: ExpectedRevision): Promise<AppendResult> {
    this.assertWritable();
    if (events.length === 0) throw new Error('An append needs at least one event');
    const jsonPayloads = events.map((event) =>
      JSON.stringify({ id: event.id, type: event.type, data: event.data, metadata: event.metadata }),
    );
    const stream = this.index.streams.get(streamName);
    const currentCount = stream?.positions.length ?? 0;
    const firstRevision = expectedFirstRevision(expected, currentCount);
    if (firstRevision !== currentCount) {
      return this.retriedAppendOrConflict(streamName, events, expected, currentCount, firstRevision);
    }

    const writtenAt = Math.max(this.now(), this.index.lastWrittenAt);
    const records = jsonPayloads.map((json, i) =>
      encodeRecord(streamName, currentCount + i, writtenAt, i === events.length - 1 ? FLAG_END_OF_APPEND : 0, json),
    );
    const offsets: number[] = [];
    let end = this.reservedEnd;
    for (const record of records) {
      offsets.push(end);
      end += record.length;
    }
    this.reservedEnd = end;
    this.index.lastWrittenAt = writtenAt;
    const positions = streamIndexOf(this.index, streamName).positions;
    for (const offset of offsets) positions.push(offset);

    const target = metadataTarget(streamName);
    const lastEvent = events[events.length - 1];
    const maxAgeUpdate =
      target !== null && lastEvent !== undefined && lastEvent.type === METADATA_EVENT_TYPE
        ? { target, maxAge: maxAgeFromMetadata(lastEvent.data) }
        : null;
    return new Promise<AppendResult>((resolve, reject) => {
      this.queue.push({
        streamName,
        bytes: records.length === 1 && records[0] !== undefined ? records[0] : Buffer.concat(records),
        offsets,
        endOffset: end,
        result: {
          nextExpectedRevision: BigInt(currentCount + events.length - 1),
          position: positionAt(offsets[offsets.length - 1] ?? end),
        },
        maxAgeUpdate,
        resolve,
        reject,
      });
      this.scheduleFlush();
    });
  }

  readStream(streamName: string, options: ReadStreamOptions = {}): AsyncIterable<RecordedEvent> {
    return this.streamEvents(streamName, options);
  }

  subscribe(options: SubscribeOptions = {}): Subscription {
    return new LogSubscription((isClosed) => this.tail(options, isClosed), () => this.wakeWaiters());
  }

  async setStreamMaxAge(streamName: string, maxAgeSeconds: number): Promise<void> {
    if (!Number.isFinite(maxAgeSeconds) || maxAgeSeconds <= 0) {
      throw new Error(`maxAgeSeconds must be a positive number, got ${maxAgeSeconds}`);
    }
    const id = randomUUID();
    await this.append(
      `$$${streamName}`,
      [
        {
          id,
          type: METADATA_EVENT_TYPE,
          data: { $maxAge: maxAgeSeconds },
          metadata: {
            occurredAt: new Date(this.now()).toISOString(),
            actor: { type: 'system', id: 'event-store' },
            requestId: id,
            causationId: id,
            correlationId: id,
          },
        },
      ],
      'any',
    );
  }

  async headPosition(): Promise<GlobalPosition | null> {
    // Only user events: a caller waiting for its subscription to reach the head must get
    // there, and subscriptions never hand out system events.
    const offset = this.index.lastUserEventOffset;
    return offset === null ? null : positionAt(offset);
  }

  close(): Promise<void> {
    this.closed ??= this.closeOnce();
    return this.closed;
  }

  private async closeOnce(): Promise<void> {
    this.closing = true;
    while (this.flushRunning) await this.flushDone;
    this.wakeWaiters();
    await Promise.allSettled([...this.inFlightReads]);
    await this.handle.close();
    await this.releaseLock();
  }

  private assertWritable(): void {
    if (this.failure !== null) throw this.failure;
    if (this.closing) throw new Error('The event store is closed');
  }

  private async retriedAppendOrConflict(
    streamName: string,
    events: readonly NewEvent[],
    expected: ExpectedRevision,
    currentCount: number,
    firstRevision: number | null,
  ): Promise<AppendResult> {
    const conflict = new WrongExpectedRevisionError(
      streamName,
      expected,
      currentCount === 0 ? 'no_stream' : BigInt(currentCount - 1),
    );
    if (firstRevision === null || firstRevision < 0 || firstRevision + events.length > currentCount) throw conflict;
    const stream = streamIndexOf(this.index, streamName);
    const offsets = stream.positions.slice(firstRevision, firstRevision + events.length);
    const lastOffset = offsets[offsets.length - 1] ?? 0;
    // The original may still be waiting for its fsync; answer only once it is durable.
    await this.untilDurable(() => stream.durableCount > firstRevision + events.length - 1);
    const stored = await Promise.all(offsets.map((offset) => readRecordAt(this.readAt, offset, this.index.end)));
    const sameEvents = stored.every((record, i) => parsePayload(record).id === events[i]?.id);
    if (!sameEvents) throw conflict;
    return { nextExpectedRevision: BigInt(firstRevision + events.length - 1), position: positionAt(lastOffset) };
  }

  private scheduleFlush(): void {
    if (this.flushRunning) return;
    this.flushRunning = true;
    // Waiting one turn of the event loop lets appends issued together share one fsync.
    this.flushDone = new Promise<void>((resolve) => setImmediate(resolve)).then(() => this.flushLoop());
  }

  private async flushLoop(): Promise<void> {
    for (;;) {
      if (this.queue.length === 0 || this.failure !== null) {
        this.flushRunning = false;
        return;
      }
      // Appends arriving while this batch is written and synced form the next batch.
      const batch = this.queue;
      this.queue = [];
      const bytes = batch.length === 1 && batch[0] !== undefined ? batch[0].bytes : Buffer.concat(batch.map((a) => a.bytes));
      markFirstOfBatch(bytes);
      const start = this.index.end;
      try {
        await writeFully(this.handle, bytes, start);
        await this.handle.datasync();
      } catch (error) {
        this.fail(error, batch);
        continue;
      }
      this.remember(start, bytes);
      this.commit(batch, bytes.length);
    }
  }

  private commit(batch: readonly PendingAppend[], bytes: number): void {
    let events = 0;
    for (const append of batch) {
      const stream = streamIndexOf(this.index, append.streamName);
      stream.durableCount += append.offsets.length;
      for (const offset of append.offsets) noteDurableRecord(this.index, offset, append.streamName);
      if (append.maxAgeUpdate !== null) applyMaxAge(this.index, append.maxAgeUpdate.target, append.maxAgeUpdate.maxAge);
      this.index.end = append.endOffset;
      events += append.offsets.length;
    }
    for (const append of batch) append.resolve(append.result);
    this.wakeWaiters();
    try {
      this.options.onGroupCommit?.({ appends: batch.length, events, bytes });
    } catch (error) {
      // An observer's bug must not stop the writer.
      console.error('onGroupCommit failed', error);
    }
  }

  private remember(start: number, bytes: Buffer): void {
    this.recent.push({ start, bytes });
    this.recentBytes += bytes.length;
    while (this.recentBytes > RECENT_COMMITS_BYTES && this.recent.length > 1) {
      this.recentBytes -= (this.recent.shift() as { bytes: Buffer }).bytes.length;
    }
  }

  /** `length` bytes at `offset` from the recent commits, or null when they are not all there. */
  private recentRead(offset: number, length: number): Promise<Buffer> | null {
    const recent = this.recent;
    const first = recent[0];
    if (first === undefined || offset < first.start || offset + length > this.index.end) return null;
    let i = recent.length - 1;
    while (i > 0 && (recent[i] as { start: number }).start > offset) i--;
    const parts: Buffer[] = [];
    let at = offset;
    for (; i < recent.length && at < offset + length; i++) {
      const batch = recent[i] as { start: number; bytes: Buffer };
      const batchEnd = batch.start + batch.bytes.length;
      if (at < batch.start || at >= batchEnd) return null;
      const take = Math.min(batchEnd, offset + length) - at;
      parts.push(batch.bytes.subarray(at - batch.start, at - batch.start + take));
      at += take;
    }
    if (at < offset + length) return null;
    // Committed bytes never change: handing out views of them is safe.
    return Promise.resolve(parts.length === 1 ? (parts[0] as Buffer) : Buffer.concat(parts));
  }

  private fail(error: unknown, batch: readonly PendingAppend[]): void {
    // What reached the disk is unknown now; only a reopen (which rescans the log) can tell.
    this.recent = [];
    this.recentBytes = 0;
    this.failure = new Error(
      `Event log write failed; reopen the event store: ${error instanceof Error ? error.message : String(error)}`,
      { cause: error },
    );
    for (const append of [...batch, ...this.queue]) append.reject(this.failure);
    this.queue = [];
    this.wakeWaiters();
  }

  private waitForChange(): Promise<void> {
    return new Promise((resolve) => this.changeWaiters.push(resolve));
  }

  private wakeWaiters(): void {
    const waiters = this.changeWaiters;
    this.changeWaiters = [];
    for (const wake of waiters) wake();
  }

  private async untilDurable(condition: () => boolean): Promise<void> {
    while (!condition()) {
      if (this.failure !== null) throw this.failure;
      if (this.closing && !this.flushRunning) throw new Error('The event store is closed');
      await this.waitForChange();
    }
  }

  private trackedRead(offset: number, length: number): Promise<Buffer> {
    if (this.closing) return Promise.reject(new Error('The event store is closed'));
    const read = readFully(this.handle, offset, length);
    this.inFlightReads.add(read);
    const forget = (): void => {
      this.inFlightReads.delete(read);
    };
    read.then(forget, forget);
    return read;
  }

  private async *streamEvents(streamName: string, options: ReadStreamOptions): AsyncGenerator<RecordedEvent> {
    if (this.closing) throw new Error('The event store is closed');
    const stream = this.index.streams.get(streamName);
    const count = stream?.durableCount ?? 0;
    if (stream === undefined || count === 0) return;
    const limit = this.index.end;
    const backwards = options.direction === 'backwards';
    const maxCount = options.maxCount ?? Number.POSITIVE_INFINITY;

    const maxAge = this.index.maxAgeSeconds.get(streamName);
    const cutoff = maxAge === undefined ? null : this.now() - maxAge * 1000;
    // Forwards, aged-out events are skipped by a binary search. Backwards, the walk stops at
    // the first aged-out one (written-at times never decrease along the log): reading the
    // newest event of a $maxAge stream — what presence expiry does — costs one record.
    const oldestVisible =
      cutoff === null || backwards ? 0 : await firstRevisionWrittenSince(this.readAt, stream.positions, count, limit, cutoff);
    let revision: number;
    let stop: number;
    let step: number;
    if (backwards) {
      revision = options.fromRevision === undefined ? count - 1 : Math.min(Number(options.fromRevision), count - 1);
      stop = oldestVisible - 1;
      step = -1;
    } else {
      revision = Math.max(options.fromRevision === undefined ? 0 : Number(options.fromRevision), oldestVisible);
      stop = count;
      step = 1;
    }

    let remaining = maxCount;
    while (remaining > 0 && (backwards ? revision > stop : revision < stop)) {
      const batchSize = Math.min(STREAM_READ_BATCH, Math.abs(stop - revision), remaining);
      const offsets: number[] = [];
      for (let i = 0; i < batchSize; i++) offsets.push(stream.positions[revision + i * step] ?? 0);
      const records = await Promise.all(offsets.map((offset) => readRecordAt(this.readAt, offset, limit)));
      for (const record of records) {
        if (backwards && cutoff !== null && record.writtenAt < cutoff) return;
        yield toRecordedEvent(record);
      }
      revision += batchSize * step;
      remaining -= batchSize;
    }
  }

  /**
   * One loop serves both replay and live: it reads whatever is durable, and when it has
   * reached the durable end it waits for the next commit. There is no hand-over from a
   * history reader to a live feed, so nothing can be lost or doubled at the switch.
   */
  private async *tail(options: SubscribeOptions, isClosed: () => boolean): AsyncGenerator<SubscriptionItem> {
    const after = options.fromPosition === undefined ? -1 : Number(options.fromPosition.commit);
    const prefixes = options.streamPrefixes;
    const wanted = (streamName: string): boolean =>
      !isSystemStream(streamName) && (prefixes === undefined || prefixes.some((prefix) => streamName.startsWith(prefix)));
    let next = after < 0 ? FILE_HEADER_SIZE : this.seekFloor(after);
    let caughtUp = false;
    for (;;) {
      if (isClosed() || this.closing) return;
      if (this.failure !== null) throw this.failure;
      const end = this.index.end;
      if (next < end) {
        const cursor = new RecordCursor(this.readAt, end, REPLAY_CHUNK_SIZE);
        while (next < end) {
          if (isClosed() || this.closing) return;
          const result = await cursor.decodeAt(next);
          if (result.kind !== 'ok') throw new Error(`Event log record at byte ${next} is unreadable`);
          const record = result.record;
          next = record.offset + record.size;
          if (record.offset > after && wanted(record.streamName)) {
            yield { kind: 'event', event: toRecordedEvent(record) };
          }
        }
      } else if (!caughtUp) {
        caughtUp = true;
        yield { kind: 'caught-up' };
      } else {
        // Checked and registered in one synchronous step: a commit cannot slip in between.
        await this.waitForChange();
      }
    }
  }

  /** Offset of a record at or before `position` from which scanning reaches every later event. */
  private seekFloor(position: number): number {
    const seekIndex = this.index.seekIndex;
    let low = 0;
    let high = seekIndex.length - 1;
    let floor = FILE_HEADER_SIZE;
    while (low <= high) {
      const middle = (low + high) >> 1;
      const offset = seekIndex[middle] ?? FILE_HEADER_SIZE;
      if (offset <= position) {
        floor = offset;
        low = middle + 1;
      } else {
        high = middle - 1;
      }
    }
    return floor;
  }
}

/** The revision the new events would get if the expectation holds, or null for "must not exist". */
function expectedFirstRevision(expected: ExpectedRevision, currentCount: number): number | null {
  switch (expected) {
    case 'any':
      return currentCount;
    case 'no_stream':
      return 0;
    case 'stream_exists':
      // Such an append cannot be told apart from a retry, so it has no idempotence check.
      return currentCount > 0 ? currentCount : null;
    default:
      return Number(expected) + 1;
  }
}

/** Binary search: written-at times never decrease along the log (append clamps them). */
async function firstRevisionWrittenSince(
  readAt: ReadAt,
  positions: readonly number[],
  count: number,
  limit: number,
  cutoff: number,
): Promise<number> {
  let low = 0;
  let high = count;
  while (low < high) {
    const middle = (low + high) >> 1;
    const record = await readRecordAt(readAt, positions[middle] ?? 0, limit);
    if (record.writtenAt >= cutoff) high = middle;
    else low = middle + 1;
  }
  return low;
}

class LogSubscription implements Subscription {
  private closedByCaller = false;
  private iterator: AsyncGenerator<SubscriptionItem> | null = null;

  constructor(
    private readonly items: (isClosed: () => boolean) => AsyncGenerator<SubscriptionItem>,
    private readonly wake: () => void,
  ) {}

  /** Always the same iterator: a second `for await` continues where the first stopped. */
  [Symbol.asyncIterator](): AsyncIterator<SubscriptionItem> {
    this.iterator ??= this.items(() => this.closedByCaller);
    return this.iterator;
  }

  async close(): Promise<void> {
    this.closedByCaller = true;
    this.wake();
  }
}
