/**
 * Index checkpoints: next to each segment `X`, a file `X.idx` holds its SegmentTable, so
 * that opening the store reads a few compact columns instead of decoding every record.
 * Written when a segment is sealed or compacted and, for the active segment, every
 * `checkpointBytes` (1 MiB) of growth and at close (with the CRC-32 of the bytes it covers,
 * checked at open: only what follows is scanned, also after a crash). They are a cache: a missing, damaged (checksum) or stale
 * one (other base, generation or a segment shorter than it covers) is ignored and the
 * segment scanned instead. Columns are stored in the machine's byte order, which is
 * checked on load, so a data directory moved to a machine of the other order still opens
 * (by scanning).
 *
 * Layout: magic "HHEVIDX\x01" | u32 crc32(body) | u32 bodyLength | body, where body =
 * 12 f64 fields (byte order check, base, generation, covered size, record count, name count,
 * $maxAge change count, first and last written-at, last user event position, has offsets,
 * CRC-32 of the covered bytes or -1),
 * names, $maxAge changes, padding to an 8-byte boundary, then the columns revisions f64,
 * position − base f64, (compacted segments only) file offsets f64 and stream refs u32.
 */
import { crc32 } from './crc32';
import { errorCode, errorMessage } from './files';
import { nodeIo, type StoreIo } from './io';
import { SegmentTable } from './segment-table';
import { ByteReader, ByteWriter } from './value-codec';

const INDEX_MAGIC = Buffer.from('HHEVIDX\x01', 'latin1');
const PREFIX_SIZE = 16;
const BYTE_ORDER_MARK = 1.5;
const FIXED_FIELDS = 12;

export function indexFileOf(segmentFile: string): string {
  return `${segmentFile}.idx`;
}

export interface IndexedSegment {
  readonly base: number;
  readonly generation: number;
}

function columnBytes(array: Float64Array | Uint32Array, count: number): Buffer {
  return Buffer.from(array.buffer, array.byteOffset, count * array.BYTES_PER_ELEMENT);
}

function encodeIndex(segment: IndexedSegment, table: SegmentTable, withOffsets: boolean): Buffer {
  const out = new ByteWriter();
  const fields = [
    BYTE_ORDER_MARK,
    segment.base,
    segment.generation,
    table.coveredSize,
    table.count,
    table.names.length,
    table.maxAgeChanges.length,
    table.firstWrittenAt ?? Number.NaN,
    table.lastWrittenAt,
    table.lastUserPosition ?? -1,
    withOffsets ? 1 : 0,
    table.coveredCrc ?? -1,
  ];
  for (const field of fields) out.f64(field);
  for (const name of table.names) out.utf8(name);
  for (const change of table.maxAgeChanges) {
    out.utf8(change.target);
    out.f64(change.maxAge ?? 0);
  }
  // Columns start 8-byte aligned in the file, so open can use them where they were read.
  out.bytes(Buffer.alloc((8 - ((PREFIX_SIZE + out.length) % 8)) % 8));
  out.bytes(columnBytes(table.revisions, table.count));
  out.bytes(columnBytes(table.offsets, table.count));
  if (withOffsets) out.bytes(columnBytes(table.fileOffsets, table.count));
  out.bytes(columnBytes(table.refs, table.count));
  const body = out.view();
  const prefix = Buffer.alloc(PREFIX_SIZE);
  INDEX_MAGIC.copy(prefix);
  prefix.writeUInt32LE(crc32(body), 8);
  prefix.writeUInt32LE(body.length, 12);
  return Buffer.concat([prefix, body]);
}

/** Writes the checkpoint through a temporary file and a rename, so readers see all or nothing. */
export async function writeSegmentIndex(segmentFile: string, segment: IndexedSegment, table: SegmentTable, withOffsets: boolean, io: StoreIo = nodeIo): Promise<void> {
  await writeEncodedIndex(segmentFile, encodeIndex(segment, table, withOffsets), io);
}

/** The checkpoint of the table as it is now (the table may grow meanwhile), to write later with writeEncodedIndex. */
export function encodeSegmentIndex(segment: IndexedSegment, table: SegmentTable, withOffsets = false): Buffer {
  return encodeIndex(segment, table, withOffsets);
}

export async function writeEncodedIndex(segmentFile: string, bytes: Buffer, io: StoreIo): Promise<void> {
  const file = indexFileOf(segmentFile);
  const temporary = `${file}.tmp`;
  await io.writeFile(temporary, bytes);
  await io.rename(temporary, file);
}

/** A column of `count` elements at the reader's position: a view where aligned, else a copy. */
function column<T extends Float64Array | Uint32Array>(input: ByteReader, bytes: Buffer, count: number, make: (length: number) => T, view: (buffer: ArrayBufferLike, at: number, length: number) => T): T {
  const start = bytes.byteOffset + input.at;
  const size = count * make(0).BYTES_PER_ELEMENT;
  if (input.at + size > bytes.length) throw new Error('column runs past the end');
  input.at += size;
  if (start % 8 === 0) return view(bytes.buffer, start, count);
  const copy = make(count);
  new Uint8Array(copy.buffer).set(bytes.subarray(input.at - size, input.at));
  return copy;
}

const float64Column = (input: ByteReader, bytes: Buffer, count: number): Float64Array =>
  column(input, bytes, count, (n) => new Float64Array(n), (buffer, at, n) => new Float64Array(buffer, at, n));
const uint32Column = (input: ByteReader, bytes: Buffer, count: number): Uint32Array =>
  column(input, bytes, count, (n) => new Uint32Array(n), (buffer, at, n) => new Uint32Array(buffer, at, n));

function decodeIndex(bytes: Buffer, segment: IndexedSegment, segmentSize: number): SegmentTable {
  if (bytes.length < PREFIX_SIZE || !bytes.subarray(0, INDEX_MAGIC.length).equals(INDEX_MAGIC)) throw new Error('not an index checkpoint');
  const body = bytes.subarray(PREFIX_SIZE, PREFIX_SIZE + bytes.readUInt32LE(12));
  if (body.length !== bytes.readUInt32LE(12) || crc32(body) !== bytes.readUInt32LE(8)) throw new Error('checksum mismatch');
  const input = new ByteReader(body);
  const [mark, base, generation, coveredSize, count, nameCount, changeCount, first, last, lastUser, withOffsets, coveredCrc] = Array.from(
    { length: FIXED_FIELDS },
    () => input.f64(),
  ) as number[];
  if (mark !== BYTE_ORDER_MARK) throw new Error('written on a machine of another byte order');
  if (base !== segment.base) throw new Error('stale (written for another segment)');
  if (generation !== segment.generation) throw new Error('stale (the segment was compacted since)');
  if (coveredSize === undefined || coveredSize > segmentSize) throw new Error('stale (the segment is shorter than it covers)');
  const table = new SegmentTable(segment.base, coveredSize);
  for (let i = 0; i < (nameCount ?? 0); i++) table.addName(input.utf8());
  for (let i = 0; i < (changeCount ?? 0); i++) {
    const target = input.utf8();
    const maxAge = input.f64();
    table.maxAgeChanges.push({ target, maxAge: maxAge > 0 ? maxAge : null });
  }
  input.at += (8 - ((PREFIX_SIZE + input.at) % 8)) % 8;
  const records = count ?? 0;
  const revisions = float64Column(input, body, records);
  const offsets = float64Column(input, body, records);
  const fileOffsets = withOffsets === 1 ? float64Column(input, body, records) : new Float64Array(0);
  const refs = uint32Column(input, body, records);
  table.fill({ refs, revisions, offsets, fileOffsets }, records);
  table.firstWrittenAt = first === undefined || Number.isNaN(first) ? null : first;
  table.lastWrittenAt = last ?? 0;
  table.lastUserPosition = lastUser === undefined || lastUser < 0 ? null : lastUser;
  table.coveredCrc = coveredCrc === undefined || coveredCrc < 0 ? null : coveredCrc;
  return table;
}

export type LoadedIndex = { readonly table: SegmentTable } | { readonly problem: string };

/** The segment's checkpoint, or why it cannot be used. */
export async function loadSegmentIndex(segmentFile: string, segment: IndexedSegment, segmentSize: number, io: StoreIo = nodeIo): Promise<LoadedIndex> {
  let bytes: Buffer;
  try {
    bytes = await io.readFile(indexFileOf(segmentFile));
  } catch (error) {
    return { problem: errorCode(error) === 'ENOENT' ? 'missing' : errorMessage(error) };
  }
  try {
    return { table: decodeIndex(bytes, segment, segmentSize) };
  } catch (error) {
    return { problem: errorMessage(error) };
  }
}
