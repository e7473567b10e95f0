/**
 * A compact binary form of JSON values, used for event payloads in the log. What it
 * decodes equals what `JSON.parse(JSON.stringify(value))` gives, so the log returns the
 * same values it returned when payloads were JSON text; it is only smaller:
 *
 * - canonical lowercase UUID strings take 16 bytes, ISO-8601 UTC timestamps with
 *   milliseconds (`2025-01-01T00:00:00.000Z`) a varint of epoch milliseconds: both only
 *   when decoding gives back exactly the same string;
 * - integers are varints; strings of WELL_KNOWN_STRINGS (event types, common keys) are one
 *   or two bytes.
 *
 * WELL_KNOWN_STRINGS is part of the on-disk format: only ever append to it.
 */

const enum Tag {
  Null = 0,
  False = 1,
  True = 2,
  UInt = 3,
  NegInt = 4,
  Float = 5,
  String = 6,
  KnownString = 7,
  Uuid = 8,
  Timestamp = 9,
  Array = 10,
  Object = 11,
  Undefined = 12,
}

export const WELL_KNOWN_STRINGS: readonly string[] = [
  'HeartbeatReceived',
  'DeviceWentOnline',
  'DeviceWentOffline',
  'DeviceRegistered',
  'DeviceUpdated',
  'DeviceDeleted',
  'DeviceTokenIssued',
  'UserLinked',
  'UserUnlinked',
  'UserRoleChanged',
  'UserSynced',
  'RefreshIssued',
  'RefreshRotated',
  'RefreshRevoked',
  'RefreshReuseDetected',
  'device',
  'user',
  'system',
  'crm',
  'uuid',
  'receivedAt',
  'heartbeatAt',
  'now',
  'at',
  'id',
  'userId',
  'deviceId',
  'name',
  'ipAddress',
  'port',
  'metadata',
  'reason',
  'sessionId',
  'familyId',
  'expiresAt',
  'role',
  'email',
  '$maxAge',
  '$metadata',
];

const KNOWN_INDEX = new Map(WELL_KNOWN_STRINGS.map((s, i) => [s, i]));
const UUID_PATTERN = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const TIMESTAMP_PATTERN = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
/** Integers up to this magnitude are varints; larger ones keep their float form. */
const MAX_VARINT_INTEGER = 2 ** 52;

/** The text of the uuid being read (one at a time: a read is synchronous). */
const UUID_TEXT = Buffer.alloc(36);
const HEX_DIGITS = Buffer.from('0123456789abcdef', 'latin1');
const DASH = 0x2d;

/** Value of a lowercase hex digit's character code. */
function hexDigit(code: number): number {
  return code <= 57 ? code - 48 : code - 87;
}

/** Appends bytes to a growing buffer. */
export class ByteWriter {
  private buffer = Buffer.allocUnsafe(256);
  length = 0;

  private reserve(extra: number): void {
    if (this.length + extra <= this.buffer.length) return;
    const grown = Buffer.allocUnsafe(Math.max(this.buffer.length * 2, this.length + extra));
    this.buffer.copy(grown, 0, 0, this.length);
    this.buffer = grown;
  }

  u8(value: number): void {
    this.reserve(1);
    this.buffer[this.length++] = value;
  }

  /** Unsigned LEB128 of a non-negative integer up to 2^53. */
  varuint(value: number): void {
    this.reserve(8);
    let rest = value;
    while (rest >= 0x80) {
      this.buffer[this.length++] = (rest % 0x80) | 0x80;
      rest = Math.floor(rest / 0x80);
    }
    this.buffer[this.length++] = rest;
  }

  f64(value: number): void {
    this.reserve(8);
    this.buffer.writeDoubleLE(value, this.length);
    this.length += 8;
  }

  bytes(value: Uint8Array): void {
    this.reserve(value.length);
    this.buffer.set(value, this.length);
    this.length += value.length;
  }

  utf8(value: string): void {
    const size = Buffer.byteLength(value, 'utf8');
    this.varuint(size);
    this.reserve(size);
    this.buffer.write(value, this.length, 'utf8');
    this.length += size;
  }

  /** 16 bytes of a canonical lowercase UUID (checked by the caller), parsed without allocating. */
  uuid(value: string): void {
    this.reserve(16);
    for (let i = 0; i < 36; i += 2) {
      if (i === 8 || i === 13 || i === 18 || i === 23) i++;
      this.buffer[this.length++] = (hexDigit(value.charCodeAt(i)) << 4) | hexDigit(value.charCodeAt(i + 1));
    }
  }

  /** A view of what was written (valid until the next write). */
  view(): Buffer {
    return this.buffer.subarray(0, this.length);
  }
}

/** Reads what ByteWriter wrote; any overrun throws (the caller reports a malformed record). */
export class ByteReader {
  constructor(
    private readonly buffer: Buffer,
    public at = 0,
    private readonly end = buffer.length,
  ) {}

  private take(size: number): number {
    const start = this.at;
    if (start + size > this.end) throw new Error('value runs past the end of its record');
    this.at += size;
    return start;
  }

  done(): boolean {
    return this.at >= this.end;
  }

  u8(): number {
    return this.buffer[this.take(1)] ?? 0;
  }

  varuint(): number {
    let value = 0;
    let scale = 1;
    for (let i = 0; i < 8; i++) {
      const byte = this.u8();
      value += (byte & 0x7f) * scale;
      if (byte < 0x80) return value;
      scale *= 0x80;
    }
    throw new Error('varint too long');
  }

  f64(): number {
    return this.buffer.readDoubleLE(this.take(8));
  }

  utf8(): string {
    const size = this.varuint();
    const start = this.take(size);
    return this.buffer.toString('utf8', start, start + size);
  }

  uuid(): string {
    const start = this.take(16);
    let at = 0;
    for (let i = 0; i < 16; i++) {
      if (i === 4 || i === 6 || i === 8 || i === 10) UUID_TEXT[at++] = DASH;
      const byte = this.buffer[start + i] as number;
      UUID_TEXT[at++] = HEX_DIGITS[byte >> 4] as number;
      UUID_TEXT[at++] = HEX_DIGITS[byte & 15] as number;
    }
    // One flat string. Joined from its five groups, a uuid is a tree of nine strings (about
    // 300 bytes, not 56), and the folds and read models of a device keep a dozen of them.
    return UUID_TEXT.toString('latin1', 0, 36);
  }
}

/** A tag, then a varint: integers, timestamps, well-known strings and the sizes of arrays and objects. */
function writeTaggedVaruint(out: ByteWriter, tag: Tag, value: number): void {
  out.u8(tag);
  out.varuint(value);
}

export function writeString(out: ByteWriter, value: string): void {
  const known = KNOWN_INDEX.get(value);
  if (known !== undefined) {
    writeTaggedVaruint(out, Tag.KnownString, known);
  } else if (value.length === 36 && UUID_PATTERN.test(value)) {
    out.u8(Tag.Uuid);
    out.uuid(value);
  } else if (value.length === 24 && isRoundTripTimestamp(value)) {
    writeTaggedVaruint(out, Tag.Timestamp, Date.parse(value));
  } else {
    out.u8(Tag.String);
    out.utf8(value);
  }
}

function isRoundTripTimestamp(value: string): boolean {
  if (!TIMESTAMP_PATTERN.test(value)) return false;
  const ms = Date.parse(value);
  return Number.isSafeInteger(ms) && ms >= 0 && new Date(ms).toISOString() === value;
}

function writeNumber(out: ByteWriter, value: number): void {
  if (!Number.isFinite(value)) out.u8(Tag.Null);
  else if (Number.isInteger(value) && Math.abs(value) <= MAX_VARINT_INTEGER) {
    writeTaggedVaruint(out, value >= 0 ? Tag.UInt : Tag.NegInt, Math.abs(value));
  } else {
    out.u8(Tag.Float);
    out.f64(value);
  }
}

interface WithToJson {
  toJSON(key: string): unknown;
}

function hasToJson(value: object): value is WithToJson {
  return typeof (value as { toJSON?: unknown }).toJSON === 'function';
}

/** Writes a value as JSON.stringify would see it; `undefined` only where `allowUndefined`. */
export function writeValue(out: ByteWriter, input: unknown, allowUndefined = false): void {
  const value = typeof input === 'object' && input !== null && hasToJson(input) ? input.toJSON('') : input;
  switch (typeof value) {
    case 'string':
      return writeString(out, value);
    case 'number':
      return writeNumber(out, value);
    case 'boolean':
      return out.u8(value ? Tag.True : Tag.False);
    case 'bigint':
      throw new TypeError('Do not know how to serialize a BigInt');
    case 'object':
      if (value === null) return out.u8(Tag.Null);
      return Array.isArray(value) ? writeArray(out, value) : writeObject(out, value);
    default:
      // undefined, functions and symbols: JSON leaves them out (null inside arrays).
      return out.u8(allowUndefined ? Tag.Undefined : Tag.Null);
  }
}

function writeArray(out: ByteWriter, items: readonly unknown[]): void {
  writeTaggedVaruint(out, Tag.Array, items.length);
  for (const item of items) writeValue(out, item);
}

function writeObject(out: ByteWriter, object: object): void {
  const entries = Object.entries(object).filter(([, v]) => isJsonVisible(v));
  writeTaggedVaruint(out, Tag.Object, entries.length);
  for (const [key, entry] of entries) {
    writeString(out, key);
    writeValue(out, entry);
  }
}

function isJsonVisible(value: unknown): boolean {
  const type = typeof value;
  return type !== 'undefined' && type !== 'function' && type !== 'symbol';
}

export function readValue(input: ByteReader): unknown {
  const tag = input.u8();
  switch (tag) {
    case Tag.Null:
      return null;
    case Tag.False:
      return false;
    case Tag.True:
      return true;
    case Tag.UInt:
      return input.varuint();
    case Tag.NegInt:
      return -input.varuint();
    case Tag.Float:
      return input.f64();
    case Tag.Array:
      return readArray(input);
    case Tag.Object:
      return readObject(input);
    case Tag.Undefined:
      return undefined;
    default:
      return readStringOfTag(input, tag);
  }
}

export function readString(input: ByteReader): string {
  return readStringOfTag(input, input.u8());
}

function readStringOfTag(input: ByteReader, tag: number): string {
  switch (tag) {
    case Tag.String:
      return input.utf8();
    case Tag.KnownString: {
      const known = WELL_KNOWN_STRINGS[input.varuint()];
      if (known === undefined) throw new Error('unknown well-known string');
      return known;
    }
    case Tag.Uuid:
      return input.uuid();
    case Tag.Timestamp:
      return new Date(input.varuint()).toISOString();
    default:
      throw new Error(`unknown value tag ${tag}`);
  }
}

function readArray(input: ByteReader): unknown[] {
  const count = input.varuint();
  const items: unknown[] = [];
  for (let i = 0; i < count; i++) items.push(readValue(input));
  return items;
}

function readObject(input: ByteReader): Record<string, unknown> {
  const count = input.varuint();
  const object: Record<string, unknown> = {};
  for (let i = 0; i < count; i++) {
    const key = readString(input);
    const value = readValue(input);
    // A "__proto__" key must become an own property, as JSON.parse makes it.
    Object.defineProperty(object, key, { value, enumerable: true, writable: true, configurable: true });
  }
  return object;
}
