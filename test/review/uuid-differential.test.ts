import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { Worker } from 'node:worker_threads';
import { decodeEvent, decodeRecord, SEGMENT_HEADER_SIZE } from '../../src/infra/eventstore/embedded/record-format';
import { ByteReader, ByteWriter, readValue, writeValue } from '../../src/infra/eventstore/embedded/value-codec';
import { mulberry32 } from '../support/prng';

/**
 * Not a defect: a check that held. `ByteReader.uuid()` writes the 36 characters into one
 * module-level buffer and returns them as one flat string; before, it joined five slices of the
 * bytes' hex text. Both must give the same text for every byte pattern, wherever the 16 bytes
 * sit in their buffer; a uuid kept from an earlier read must not change when the shared buffer
 * is written again; a read that runs past its record throws and leaves the next read right;
 * workers (each with its own copy of the module) decode at the same time; and the committed
 * v1 log decodes with every uuid as the previous code read it.
 */

/** The previous implementation, over the same bytes. */
function previousUuid(buffer: Buffer, start: number): string {
  const hex = buffer.toString('hex', start, start + 16);
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** The first byte pattern (as hex) at which the two implementations differ, or null. */
function firstDifference(buffer: Buffer, start: number): string | null {
  const reader = new ByteReader(buffer, start);
  const decoded = reader.uuid();
  const expected = previousUuid(buffer, start);
  if (reader.at !== start + 16) return `${buffer.toString('hex', start, start + 16)}: reader at ${reader.at}`;
  return decoded === expected ? null : `${buffer.toString('hex', start, start + 16)}: ${decoded} vs ${expected}`;
}

describe('ByteReader.uuid gives exactly what the previous implementation gave', () => {
  it('for every byte value at every position, on backgrounds of 0x00, 0xff and mixed bytes, and for every uniform fill', () => {
    const differences: string[] = [];
    let cases = 0;
    const bytes = Buffer.alloc(32);
    for (const background of [0x00, 0xff, 0x5a, 0xa5, 0x0f, 0xf0]) {
      for (let position = 0; position < 16; position++) {
        for (let value = 0; value < 256; value++) {
          bytes.fill(background);
          bytes[8 + position] = value;
          const difference = firstDifference(bytes, 8);
          cases++;
          if (difference !== null) differences.push(difference);
        }
      }
    }
    for (let value = 0; value < 256; value++) {
      const difference = firstDifference(Buffer.alloc(16, value), 0);
      cases++;
      if (difference !== null) differences.push(difference);
    }
    expect(cases).toBe(6 * 16 * 256 + 256);
    expect(differences.slice(0, 5)).toEqual([]);
  });

  it('for random bytes at random offsets, also in views of a shared pool and with a record end before the buffer end', () => {
    const random = mulberry32(0x5eed_0016);
    const differences: string[] = [];
    for (let i = 0; i < 30_000; i++) {
      const length = 16 + Math.floor(random() * 48);
      const source = Buffer.from(Array.from({ length }, () => Math.floor(random() * 256)));
      // Buffer.from(array) of a small length is a view into Node's shared pool (byteOffset > 0).
      const start = Math.floor(random() * (length - 15));
      const end = start + 16 + Math.floor(random() * (length - start - 15));
      const reader = new ByteReader(source, start, end);
      const decoded = reader.uuid();
      if (decoded !== previousUuid(source, start)) differences.push(source.toString('hex', start, start + 16));
    }
    expect(differences.slice(0, 5)).toEqual([]);
  });

  it('keeps every uuid of one decode and of earlier decodes intact while the shared buffer is reused', () => {
    const random = mulberry32(7);
    const uuidOf = (): string => {
      const bytes = Buffer.from(Array.from({ length: 16 }, () => Math.floor(random() * 256)));
      return previousUuid(bytes, 0);
    };
    const written = Array.from({ length: 40 }, () => ({ id: uuidOf(), nested: [uuidOf(), { deeper: uuidOf() }] }));
    const out = new ByteWriter();
    writeValue(out, written);
    const bytes = Buffer.from(out.view());
    const reads = jest.spyOn(ByteReader.prototype, 'uuid');
    const decoded = readValue(new ByteReader(bytes));
    expect(reads).toHaveBeenCalledTimes(3 * written.length); // each one stored in 16 bytes
    reads.mockRestore();
    // Decode more uuids after the first decode returned: what it returned must not change.
    for (let i = 0; i < 1_000; i++) readValue(new ByteReader(bytes));
    expect(decoded).toEqual(written);
  });

  it('throws on a uuid running past its record, leaves the reader where it was, and reads the next uuid right', () => {
    const bytes = Buffer.alloc(32, 0xff);
    const truncated = new ByteReader(bytes, 4, 19);
    expect(() => truncated.uuid()).toThrow('value runs past the end of its record');
    expect(truncated.at).toBe(4);
    bytes.fill(0x00, 0, 16);
    expect(new ByteReader(bytes).uuid()).toBe('00000000-0000-0000-0000-000000000000');
    expect(new ByteReader(bytes, 16).uuid()).toBe('ffffffff-ffff-ffff-ffff-ffffffffffff');
  });

  it('in worker threads decoding at the same time', async () => {
    const codec = resolve(__dirname, '../../src/infra/eventstore/embedded/value-codec.ts');
    const script = `
      require(${JSON.stringify(require.resolve('tsx/cjs'))});
      const { parentPort, workerData } = require('node:worker_threads');
      const { randomBytes } = require('node:crypto');
      const { ByteReader } = require(${JSON.stringify(codec)});
      let differences = 0;
      for (let i = 0; i < workerData.cases; i++) {
        const bytes = randomBytes(16);
        const hex = bytes.toString('hex');
        const expected = hex.slice(0, 8) + '-' + hex.slice(8, 12) + '-' + hex.slice(12, 16) + '-' + hex.slice(16, 20) + '-' + hex.slice(20);
        if (new ByteReader(bytes).uuid() !== expected) differences++;
      }
      parentPort.postMessage(differences);
    `;
    const run = (): Promise<unknown> =>
      new Promise((done, fail) => {
        const worker = new Worker(script, { eval: true, workerData: { cases: 20_000 } });
        worker.once('message', done);
        worker.once('error', fail);
      });
    await expect(Promise.all([run(), run(), run()])).resolves.toEqual([0, 0, 0]);
  });

  it('for every uuid of the committed v1 log (compact records, stream names and payloads)', () => {
    const file = readFileSync(resolve(__dirname, '../fixtures/events/v1-log/events.log'));
    const original = ByteReader.prototype.uuid;
    const pairs: [string, string][] = [];
    const spy = jest.spyOn(ByteReader.prototype, 'uuid').mockImplementation(function (this: ByteReader) {
      const { buffer, at } = this as unknown as { buffer: Buffer; at: number };
      const expected = at + 16 <= buffer.length ? previousUuid(buffer, at) : '(past the end)';
      const decoded = original.call(this);
      pairs.push([decoded, expected]);
      return decoded;
    });
    try {
      let records = 0;
      for (let at = SEGMENT_HEADER_SIZE; at < file.length; ) {
        const result = decodeRecord(file, at, at, 0);
        if (result.kind !== 'ok') throw new Error(`record at ${at}: ${result.kind}`);
        decodeEvent(result.record);
        records++;
        at += result.record.size;
      }
      expect(records).toBe(23);
    } finally {
      spy.mockRestore();
    }
    expect(pairs.length).toBeGreaterThan(23);
    expect(pairs.filter(([decoded, expected]) => decoded !== expected)).toEqual([]);
  });
});
