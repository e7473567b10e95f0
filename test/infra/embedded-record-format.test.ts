import { randomUUID } from 'node:crypto';
import {
  decodeEvent,
  decodeRecord,
  encodeRecord,
  FLAG_END_OF_APPEND,
  type RecordFields,
} from '../../src/infra/eventstore/embedded/record-format';
import { ByteReader, ByteWriter, readValue, writeValue } from '../../src/infra/eventstore/embedded/value-codec';
import { legacyRecord } from './fixtures/legacy-log';

/** The compact record format and its value encoding: what goes in comes out as JSON would give it. */

function roundTrip(value: unknown): { value: unknown; bytes: number } {
  const out = new ByteWriter();
  writeValue(out, value, true);
  const bytes = Buffer.from(out.view());
  const input = new ByteReader(bytes);
  const decoded = readValue(input);
  expect(input.done()).toBe(true);
  return { value: decoded, bytes: bytes.length };
}

const jsonOf = (value: unknown): unknown => JSON.parse(JSON.stringify(value) ?? 'null');

describe('value encoding', () => {
  it.each([
    ['scalars', [null, true, false, 0, -0, 1, -1, 127, 128, 2 ** 40, -(2 ** 52), 2 ** 53 + 2, 1.5, -1e-9, Number.MAX_VALUE]],
    ['strings', ['', 'é中😀', 'HeartbeatReceived', 'heartbeatreceived', 'x'.repeat(70_000)]],
    ['uuid-like strings', [randomUUID(), randomUUID().toUpperCase(), `${randomUUID()} `, '00000000-0000-0000-0000-000000000000']],
    ['timestamp-like strings', ['2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00Z', '2026-02-30T00:00:00.000Z', '1969-12-31T23:59:59.999Z', '2026-01-01T00:00:00.000+00:00']],
    ['nested values', [{ a: [1, { b: null, c: 'x' }], '': 2, __proto__x: 1 }, [[[]]], {}]],
    ['values JSON changes', [{ skip: undefined, f: () => 1, n: Number.NaN, i: Infinity }, [undefined, () => 1], new Date(0), { nested: new Date(5) }]],
  ])('round-trips %s exactly as JSON does', (_, values) => {
    for (const value of values) expect(roundTrip(value).value).toEqual(jsonOf(value));
  });

  it('keeps an own "__proto__" key as JSON.parse does', () => {
    const value: unknown = JSON.parse('{"__proto__": {"polluted": true}}');
    const decoded = roundTrip(value).value as Record<string, unknown>;
    expect(Object.keys(decoded)).toEqual(['__proto__']);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('stores canonical UUIDs and timestamps, well-known strings and small integers in few bytes', () => {
    expect(roundTrip(randomUUID()).bytes).toBe(17);
    expect(roundTrip('2026-11-21T12:00:00.000Z').bytes).toBe(7);
    expect(roundTrip('HeartbeatReceived').bytes).toBe(2);
    expect(roundTrip(100).bytes).toBe(2);
  });

  // The log on users' disks holds these bytes: an encoding may never change them.
  it.each([
    [null, '00'],
    [false, '01'],
    [true, '02'],
    [0, '0300'],
    [127, '037f'],
    [128, '038001'],
    [300, '03ac02'],
    [-1, '0401'],
    [2 ** 52, '038080808080808008'],
    [-(2 ** 52), '048080808080808008'],
    [2 ** 52 + 2, '050200000000003043'],
    [1.5, '05000000000000f83f'],
    ['', '0600'],
    ['hi', '06026869'],
    ['HeartbeatReceived', '0700'],
    ['$metadata', '0726'],
    ['00000000-0000-4000-8000-00000000000f', '080000000000004000800000000000000f'],
    ['2026-01-01T00:00:00.000Z', '0980d0eab6b733'],
    [[1, 'a'], '0a020301060161'],
    [{ uuid: 'x', n: -2 }, '0b02071306017806016e0402'],
    [undefined, '0c'],
  ])('encodes %j as the bytes %s', (value, hex) => {
    const out = new ByteWriter();
    writeValue(out, value, true);
    expect(Buffer.from(out.view()).toString('hex')).toBe(hex);
  });

  it('refuses a BigInt, as JSON does', () => {
    expect(() => writeValue(new ByteWriter(), { big: 1n })).toThrow(TypeError);
  });
});

describe('records', () => {
  const fields = (overrides: Partial<RecordFields> = {}): RecordFields => {
    const requestId = randomUUID();
    return {
      position: 123_456_789,
      flags: FLAG_END_OF_APPEND,
      writtenAt: Date.parse('2026-01-01T00:00:00.000Z'),
      revision: 70_000,
      streamName: `heartbeat-${randomUUID()}`,
      event: {
        id: randomUUID(),
        type: 'HeartbeatReceived',
        data: { uuid: randomUUID(), receivedAt: '2026-01-01T00:00:00.000Z' },
        metadata: { occurredAt: '2026-01-01T00:00:00.000Z', actor: { type: 'device', id: randomUUID() }, requestId, causationId: randomUUID(), correlationId: requestId },
      },
      ...overrides,
    };
  };

  it.each([
    ['a heartbeat', fields()],
    ['a stream name without a UUID and ids that are not UUIDs', fields({ streamName: 'user-alice', event: { id: 'custom-id', type: 'X', data: undefined, metadata: { occurredAt: 'yesterday', actor: { type: 'crm', id: 'c' }, requestId: 'r', causationId: 'c1', correlationId: 'c2' } } })],
  ])('reads back %s exactly, at its own position', (_, written) => {
    const bytes = encodeRecord(written);
    const decoded = decodeRecord(bytes, 0, 16, 999);
    if (decoded.kind !== 'ok') throw new Error(decoded.kind);
    expect(decoded.record).toMatchObject({ position: written.position, revision: written.revision, streamName: written.streamName, writtenAt: written.writtenAt, flags: written.flags, size: bytes.length });
    expect(decodeEvent(decoded.record)).toEqual(written.event);
  });

  it('reads records of the JSON format at base + file offset', () => {
    const written = fields();
    const bytes = legacyRecord({ streamName: written.streamName, revision: 5, writtenAt: written.writtenAt, event: written.event });
    const decoded = decodeRecord(bytes, 0, 16, 0);
    if (decoded.kind !== 'ok') throw new Error(decoded.kind);
    expect(decoded.record).toMatchObject({ position: 16, revision: 5, streamName: written.streamName });
    expect(decodeEvent(decoded.record)).toEqual(written.event);
  });

  it('encodes a record as the same bytes as always (logs on disk hold them)', () => {
    const bytes = encodeRecord({
      position: 4096,
      flags: FLAG_END_OF_APPEND,
      writtenAt: Date.parse('2026-01-01T00:00:00.000Z'),
      revision: 300,
      streamName: 'heartbeat-00000000-0000-4000-8000-00000000000f',
      event: {
        id: '11111111-1111-4111-8111-111111111111',
        type: 'HeartbeatReceived',
        data: { receivedAt: '2026-01-01T00:00:01.000Z', n: 7 },
        metadata: { occurredAt: '2026-01-01T00:00:01.000Z', actor: { type: 'device', id: 'hub-1' }, requestId: 'r-1', causationId: 'r-1', correlationId: 'c-1' },
      },
    });
    expect(bytes.toString('hex')).toBe(
      '6d00000073bd6522e801001000000000000080aa6db77942ac0201060a6865617274626561742d0000000000004000800000000000000f' +
        '081111111111114111811111111111111107000b02071409e8d7eab6b73306016e030709e8d7eab6b733070f06056875622d310603722d31020603632d31',
    );
  });

  it('refuses a record whose bytes changed', () => {
    const bytes = encodeRecord(fields());
    for (const at of [9, 20, bytes.length - 1]) {
      const damaged = Buffer.from(bytes);
      damaged[at] = (damaged[at] ?? 0) ^ 1;
      expect(decodeRecord(damaged, 0, 16, 0)).toEqual({ kind: 'invalid', reason: 'checksum mismatch' });
    }
  });
});
