/**
 * The bytes of the log: segment file headers and records.
 *
 * Segment header (16 bytes): magic "HHEVLOG\x01" | u48 base position | u16 generation.
 * A single-file log of earlier versions (events.log) has base 0 and generation 0, which
 * is the same 16 bytes as its old header, so it opens as the first segment unchanged.
 *
 * Record: u32 bodyLength | u32 crc32(body) | body. Two body formats are read:
 *
 *   compact (written now) = u8 0xe8 | u8 flags | u48 position | f64 writtenAt |
 *                           varuint revision | stream name | payload
 *   json (older logs)     = u8 0xe7 | u8 flags | u16 nameLength | u64 revision |
 *                           f64 writtenAt | streamName | JSON {id, type, data, metadata}
 *
 * A compact record names its own global position, so compaction can move it within its
 * segment and the position stays what readers, checkpoints and audits were told. A json
 * record's position is where it sits: base + its offset in the file (such records only
 * live in segments that were never compacted: compaction rewrites them compact).
 *
 * Compact payload (value-codec.ts values): id | type | data | occurredAt | actor.type |
 * actor.id | requestId | u8 extras, then causationId if extras & 1, correlationId if
 * extras & 2 (each only when it differs from requestId, see stored-metadata.ts). The
 * stream name is a string value, or for `<prefix><uuid>` names the prefix and 16 bytes.
 *
 * Close record (the last bytes of the active segment after a clean close, fsynced; cut again
 * before the next append, so it never sits in the middle of a log):
 *
 *   u32 bodyLength (20) | u32 crc32(body) | body = u8 0xe9 | u8 version (1) |
 *   u48 its own file offset | u32 CRC-32 of the file's bytes before it | "HHEVEND\x01"
 *
 * It vouches that everything before it was acknowledged: open refuses damage there instead
 * of cutting it as a torn tail. A log without one (a crash, or a version before it) opens
 * as before. Versions before it see an unknown marker at the end: a torn tail they cut.
 */
import type { EventMetadata } from '../../../domain/messages';
import type { NewEvent } from '../port';
import { restoreMetadata, isStoredMetadata } from '../stored-metadata';
import { crc32 } from './crc32';
import { ByteReader, ByteWriter, readString, readValue, writeString, writeValue } from './value-codec';

export const SEGMENT_MAGIC = Buffer.from('HHEVLOG\x01', 'latin1');
/** The header also guarantees that no event sits at position 0, which callers may treat as "start". */
export const SEGMENT_HEADER_SIZE = 16;
export const RECORD_PREFIX_SIZE = 8;
export const FLAG_END_OF_APPEND = 1;
/** Set on the first record of each group commit: a later batch proves an earlier one was synced. */
export const FLAG_FIRST_OF_BATCH = 2;
export const MAX_BODY_SIZE = 16 * 1024 * 1024;

const JSON_MARKER = 0xe7;
const COMPACT_MARKER = 0xe8;
const CLOSE_MARKER = 0xe9;
const CLOSE_VERSION = 1;
const CLOSE_MAGIC = Buffer.from('HHEVEND\x01', 'latin1');
const CLOSE_BODY_SIZE = 20;
/** Bytes of a close record. */
export const CLOSE_RECORD_SIZE = RECORD_PREFIX_SIZE + CLOSE_BODY_SIZE;
const JSON_FIXED_SIZE = 20;
const COMPACT_FIXED_SIZE = 16;
const MIN_BODY_SIZE = COMPACT_FIXED_SIZE + 3;
const UUID_SUFFIX = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const NAME_PLAIN = 0;
const NAME_WITH_UUID = 1;
const EXTRA_CAUSATION = 1;
const EXTRA_CORRELATION = 2;

export interface SegmentHeader {
  readonly base: number;
  readonly generation: number;
}

export function encodeSegmentHeader(header: SegmentHeader): Buffer {
  const bytes = Buffer.alloc(SEGMENT_HEADER_SIZE);
  SEGMENT_MAGIC.copy(bytes);
  bytes.writeUIntLE(header.base, 8, 6);
  bytes.writeUInt16LE(header.generation, 14);
  return bytes;
}

export function decodeSegmentHeader(bytes: Buffer): SegmentHeader | null {
  if (bytes.length < SEGMENT_HEADER_SIZE || !bytes.subarray(0, SEGMENT_MAGIC.length).equals(SEGMENT_MAGIC)) return null;
  return { base: bytes.readUIntLE(8, 6), generation: bytes.readUInt16LE(14) };
}

export interface RawRecord {
  /** Where the record starts in its segment file. */
  readonly fileOffset: number;
  readonly size: number;
  readonly flags: number;
  readonly position: number;
  readonly streamName: string;
  readonly revision: number;
  readonly writtenAt: number;
  /** The whole body: the payload is decoded only when the event is handed out. */
  readonly body: Buffer;
  readonly payloadStart: number;
}

export type DecodeResult =
  | { readonly kind: 'ok'; readonly record: RawRecord }
  | { readonly kind: 'incomplete'; readonly needed: number }
  | { readonly kind: 'invalid'; readonly reason: string };

export interface StoredEvent {
  readonly id: string;
  readonly type: string;
  readonly data: unknown;
  readonly metadata: EventMetadata;
}

export interface RecordFields {
  readonly position: number;
  readonly flags: number;
  readonly writtenAt: number;
  readonly revision: number;
  readonly streamName: string;
  readonly event: NewEvent | StoredEvent;
}

function writeStreamName(out: ByteWriter, name: string): void {
  const uuid = UUID_SUFFIX.exec(name);
  if (uuid !== null && uuid.index > 0) {
    out.u8(NAME_WITH_UUID);
    writeString(out, name.slice(0, uuid.index));
    out.uuid(uuid[0]);
  } else {
    out.u8(NAME_PLAIN);
    writeString(out, name);
  }
}

function readStreamName(input: ByteReader): string {
  const kind = input.u8();
  if (kind === NAME_PLAIN) return readString(input);
  if (kind !== NAME_WITH_UUID) throw new Error(`unknown stream name form ${kind}`);
  const prefix = readString(input);
  return prefix + input.uuid();
}

/** Metadata as stored-metadata.ts trims it: causation and correlation ids only where they differ from the request id. */
function writePayload(out: ByteWriter, event: NewEvent | StoredEvent): void {
  writeString(out, event.id);
  writeString(out, event.type);
  writeValue(out, event.data, true);
  const { occurredAt, actor, requestId, causationId, correlationId } = event.metadata;
  writeString(out, occurredAt);
  writeString(out, actor.type);
  writeString(out, actor.id);
  writeString(out, requestId);
  const extras = (causationId !== requestId ? EXTRA_CAUSATION : 0) | (correlationId !== requestId ? EXTRA_CORRELATION : 0);
  out.u8(extras);
  if (extras & EXTRA_CAUSATION) writeString(out, causationId);
  if (extras & EXTRA_CORRELATION) writeString(out, correlationId);
}

const recordWriter = new ByteWriter();
const FIXED_PART_PLACEHOLDER = Buffer.alloc(RECORD_PREFIX_SIZE + COMPACT_FIXED_SIZE);

/** One record in the compact format, checksum included. */
export function encodeRecord(fields: RecordFields): Buffer {
  // One writer for every record (encoding is synchronous); each record is copied out of it.
  const out = recordWriter;
  out.length = 0;
  out.bytes(FIXED_PART_PLACEHOLDER);
  out.varuint(fields.revision);
  writeStreamName(out, fields.streamName);
  writePayload(out, fields.event);
  const record = Buffer.from(out.view());
  const bodyLength = record.length - RECORD_PREFIX_SIZE;
  if (bodyLength > MAX_BODY_SIZE) throw new Error(`Event too large for ${fields.streamName} (${bodyLength} bytes)`);
  record.writeUInt32LE(bodyLength, 0);
  const body = record.subarray(RECORD_PREFIX_SIZE);
  body[0] = COMPACT_MARKER;
  body[1] = fields.flags;
  body.writeUIntLE(fields.position, 2, 6);
  body.writeDoubleLE(fields.writtenAt, 8);
  record.writeUInt32LE(crc32(body), 4);
  return record;
}

/** Replaces the flags of the record at the start of `records` in place (and re-seals its checksum). */
export function setRecordFlags(records: Buffer, update: (flags: number) => number): void {
  const body = records.subarray(RECORD_PREFIX_SIZE, RECORD_PREFIX_SIZE + records.readUInt32LE(0));
  body[1] = update(body[1] ?? 0);
  records.writeUInt32LE(crc32(body), 4);
}

export function markFirstOfBatch(records: Buffer): void {
  setRecordFlags(records, (flags) => flags | FLAG_FIRST_OF_BATCH);
}

/** Sets the position of the compact record at the start of `record` (and re-seals its checksum). */
export function setRecordPosition(record: Buffer, position: number): void {
  const body = record.subarray(RECORD_PREFIX_SIZE, RECORD_PREFIX_SIZE + record.readUInt32LE(0));
  body.writeUIntLE(position, 2, 6);
  record.writeUInt32LE(crc32(body), 4);
}

/** Whether a byte can start a record body: lets a scan look for later intact records. */
export function isRecordMarker(byte: number | undefined): boolean {
  return byte === COMPACT_MARKER || byte === JSON_MARKER;
}

export function decodeRecord(buffer: Buffer, at: number, fileOffset: number, segmentBase: number): DecodeResult {
  if (buffer.length - at < RECORD_PREFIX_SIZE) return { kind: 'incomplete', needed: RECORD_PREFIX_SIZE };
  const bodyLength = buffer.readUInt32LE(at);
  if (bodyLength < MIN_BODY_SIZE || bodyLength > MAX_BODY_SIZE) {
    return { kind: 'invalid', reason: `implausible record length ${bodyLength}` };
  }
  const size = RECORD_PREFIX_SIZE + bodyLength;
  if (buffer.length - at < size) return { kind: 'incomplete', needed: size };
  const body = buffer.subarray(at + RECORD_PREFIX_SIZE, at + size);
  if (!isRecordMarker(body[0])) return { kind: 'invalid', reason: 'missing record marker' };
  if (crc32(body) !== buffer.readUInt32LE(at + 4)) return { kind: 'invalid', reason: 'checksum mismatch' };
  return body[0] === COMPACT_MARKER ? decodeCompact(body, size, fileOffset) : decodeJson(body, size, fileOffset, segmentBase);
}

function decodeCompact(body: Buffer, size: number, fileOffset: number): DecodeResult {
  try {
    const input = new ByteReader(body, COMPACT_FIXED_SIZE);
    const revision = input.varuint();
    const streamName = readStreamName(input);
    return {
      kind: 'ok',
      record: {
        fileOffset,
        size,
        flags: body[1] ?? 0,
        position: body.readUIntLE(2, 6),
        writtenAt: body.readDoubleLE(8),
        revision,
        streamName,
        body,
        payloadStart: input.at,
      },
    };
  } catch (error) {
    return { kind: 'invalid', reason: `malformed record header (${error instanceof Error ? error.message : String(error)})` };
  }
}

function decodeJson(body: Buffer, size: number, fileOffset: number, segmentBase: number): DecodeResult {
  if (body.length < JSON_FIXED_SIZE) return { kind: 'invalid', reason: 'record too short' };
  const nameLength = body.readUInt16LE(2);
  if (JSON_FIXED_SIZE + nameLength > body.length) return { kind: 'invalid', reason: 'stream name overruns record' };
  return {
    kind: 'ok',
    record: {
      fileOffset,
      size,
      flags: body[1] ?? 0,
      position: segmentBase + fileOffset,
      revision: Number(body.readBigUInt64LE(4)),
      writtenAt: body.readDoubleLE(12),
      streamName: body.toString('utf8', JSON_FIXED_SIZE, JSON_FIXED_SIZE + nameLength),
      body,
      payloadStart: JSON_FIXED_SIZE + nameLength,
    },
  };
}

/** The event a record holds; throws when its payload is malformed. */
export function decodeEvent(record: RawRecord): StoredEvent {
  return record.body[0] === COMPACT_MARKER ? decodeCompactPayload(record) : decodeJsonPayload(record);
}

function decodeCompactPayload(record: RawRecord): StoredEvent {
  const input = new ByteReader(record.body, record.payloadStart);
  const id = readString(input);
  const type = readString(input);
  const data = readValue(input);
  const occurredAt = readString(input);
  const actor = { type: readString(input), id: readString(input) };
  const requestId = readString(input);
  const extras = input.u8();
  const causationId = extras & EXTRA_CAUSATION ? readString(input) : undefined;
  const correlationId = extras & EXTRA_CORRELATION ? readString(input) : undefined;
  const stored = { occurredAt, actor, requestId, causationId, correlationId };
  if (!isStoredMetadata(stored)) throw new Error(`Event at position ${record.position} has malformed metadata`);
  return { id, type, data, metadata: restoreMetadata(stored) };
}

function decodeJsonPayload(record: RawRecord): StoredEvent {
  const parsed: unknown = JSON.parse(record.body.toString('utf8', record.payloadStart));
  if (typeof parsed !== 'object' || parsed === null) throw new Error(`Event at position ${record.position} has a malformed payload`);
  const candidate: { id?: unknown; type?: unknown; data?: unknown; metadata?: unknown } = parsed;
  if (typeof candidate.id !== 'string' || typeof candidate.type !== 'string' || !isStoredMetadata(candidate.metadata)) {
    throw new Error(`Event at position ${record.position} has a malformed payload`);
  }
  return { id: candidate.id, type: candidate.type, data: candidate.data, metadata: restoreMetadata(candidate.metadata) };
}

/** What a close record vouches for: the bytes of the file before `offset`, whose CRC-32 is `crc`. */
export interface CloseRecord {
  readonly offset: number;
  readonly crc: number;
}

export function encodeCloseRecord(close: CloseRecord): Buffer {
  const bytes = Buffer.alloc(CLOSE_RECORD_SIZE);
  bytes.writeUInt32LE(CLOSE_BODY_SIZE, 0);
  const body = bytes.subarray(RECORD_PREFIX_SIZE);
  body[0] = CLOSE_MARKER;
  body[1] = CLOSE_VERSION;
  body.writeUIntLE(close.offset, 2, 6);
  body.writeUInt32LE(close.crc, 8);
  CLOSE_MAGIC.copy(body, 12);
  bytes.writeUInt32LE(crc32(body), 4);
  return bytes;
}

/** The close record in `bytes` (the last CLOSE_RECORD_SIZE bytes of a file, read at `offset`), or null. */
export function decodeCloseRecord(bytes: Buffer, offset: number): CloseRecord | null {
  if (bytes.length !== CLOSE_RECORD_SIZE || bytes.readUInt32LE(0) !== CLOSE_BODY_SIZE) return null;
  const body = bytes.subarray(RECORD_PREFIX_SIZE);
  if (body[0] !== CLOSE_MARKER || body[1] !== CLOSE_VERSION || !body.subarray(12).equals(CLOSE_MAGIC)) return null;
  if (crc32(body) !== bytes.readUInt32LE(4) || body.readUIntLE(2, 6) !== offset) return null;
  return { offset, crc: body.readUInt32LE(8) };
}
