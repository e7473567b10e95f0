/**
 * A stream's entry in the embedded log's in-memory index (stream-index.ts): its positions
 * held as one number, a few in a plain array, or many in a PositionList, and what uses it
 * (the index built from segment tables, reclamation, failed writes, a long stream at open).
 */
import { LogIndex } from '../../src/infra/eventstore/embedded/log-index';
import { SegmentTable } from '../../src/infra/eventstore/embedded/segment-table';
import { FEW_POSITIONS, StreamIndex } from '../../src/infra/eventstore/embedded/stream-index';
import { EventStoreUnavailableError, openEmbeddedEventStore, type EmbeddedEventStore, type EmbeddedEventStoreOptions } from '../../src/infra/eventstore/embedded';
import { newEvent, readAll } from '../contract/eventstore.contract';
import { Rng } from '../sim/rng';
import { NO_FAULTS, SimFs } from '../sim/sim-fs';

/** Everything a StreamIndex answers, against the plain array it must behave as. */
function expectSame(stream: StreamIndex, model: readonly number[]): void {
  expect(stream.length).toBe(model.length);
  expect(Array.from({ length: model.length + 2 }, (_, i) => stream.at(i - 1))).toEqual([undefined, ...model, undefined]);
  expect(stream.slice(0, model.length)).toEqual(model);
}

function filled(count: number, first = 1000): { stream: StreamIndex; model: number[] } {
  const stream = new StreamIndex('device-1');
  const model = Array.from({ length: count }, (_, i) => first + i * 10);
  for (const position of model) stream.push(position);
  return { stream, model };
}

describe('StreamIndex', () => {
  it('grows from nothing to one, a few and many positions, and answers the same at every size', () => {
    const { stream, model } = { stream: new StreamIndex('device-1'), model: [] as number[] };
    expectSame(stream, model);
    for (let i = 0; i < FEW_POSITIONS * 5; i++) {
      stream.push(500 + i * 7);
      model.push(500 + i * 7);
      expectSame(stream, model);
      expect(stream.lowerBound(500 + i * 7)).toBe(i);
      expect(stream.lowerBound(501 + i * 7)).toBe(i + 1);
    }
    expect(stream.lowerBound(0)).toBe(0);
  });

  it('drops every position from the front, then takes pushes again, at every size', () => {
    for (const count of [1, 2, FEW_POSITIONS, FEW_POSITIONS + 1, 1000]) {
      const { stream } = filled(count);
      stream.dropFirst(count);
      expectSame(stream, []);
      stream.dropFirst(1);
      expectSame(stream, []);
      stream.push(7);
      stream.push(9);
      expectSame(stream, [7, 9]);
    }
  });

  it('drops from the front and the back of many positions down to a few, then grows again', () => {
    const { stream, model } = filled(100);
    stream.dropFirst(30);
    stream.dropLast(10);
    expectSame(stream, model.slice(30, 90));
    stream.dropFirst(55);
    expectSame(stream, model.slice(85, 90));
    stream.dropLast(4);
    expectSame(stream, model.slice(85, 86));
    for (let i = 0; i < 40; i++) stream.push(5000 + i);
    expectSame(stream, [...model.slice(85, 86), ...Array.from({ length: 40 }, (_, i) => 5000 + i)]);
  });

  it('drops the last positions after a reserve (an append reserved, then its write failed)', () => {
    for (const [count, extra] of [
      [0, 3],
      [0, 100],
      [1, 1],
      [3, FEW_POSITIONS],
      [FEW_POSITIONS, 1],
      [50, 5],
    ] as const) {
      const { stream, model } = filled(count);
      stream.reserve(extra);
      expectSame(stream, model);
      for (let i = 0; i < extra; i++) stream.push(100_000 + i);
      stream.dropLast(extra);
      expectSame(stream, model);
      stream.push(200_000);
      expectSame(stream, [...model, 200_000]);
    }
  });

  it('ignores drops of zero or fewer positions, and drops of more than there are empty it', () => {
    const { stream, model } = filled(5);
    stream.dropFirst(0);
    stream.dropFirst(-3);
    stream.dropLast(0);
    stream.dropLast(-3);
    expectSame(stream, model);
    stream.dropLast(9);
    expectSame(stream, []);
    const many = filled(40).stream;
    many.dropLast(41);
    expectSame(many, []);
  });

  it('slices within bounds only', () => {
    for (const count of [0, 1, 3, 40]) {
      const { stream, model } = filled(count);
      for (const [from, to] of [
        [0, 0],
        [0, 1],
        [1, 3],
        [-2, 2],
        [2, 1],
        [0, count + 5],
        [count, count + 1],
        [count + 3, count + 9],
      ] as const) {
        expect(stream.slice(from, to)).toEqual(model.slice(Math.max(0, from), Math.max(Math.max(0, from), Math.min(to, count))));
      }
    }
  });

  it('keeps positions above 2^32 exactly, as one, a few and many', () => {
    for (const count of [1, 3, FEW_POSITIONS + 1, 300]) {
      const first = 2 ** 32 + 17;
      const { stream, model } = filled(count, first);
      stream.push(2 ** 52 + 1);
      model.push(2 ** 52 + 1);
      expectSame(stream, model);
      expect(stream.lowerBound(first + 1)).toBe(1);
      stream.dropFirst(count - 1);
      expectSame(stream, model.slice(count - 1));
    }
  });

  it('behaves as a plain array through a long run of random operations', () => {
    const rng = new Rng(20261129);
    const stream = new StreamIndex('heartbeat-1');
    let model: number[] = [];
    let next = 2 ** 31 - 40 * 64;
    const sizes = new Set<string>();
    for (let step = 0; step < 8_000; step++) {
      const op = rng.int(10);
      if (op < 5) {
        const count = rng.chance(0.1) ? 1 + rng.int(60) : 1;
        for (let i = 0; i < count; i++) {
          stream.push(next);
          model.push(next);
          next += 1 + rng.int(100);
        }
      } else if (op === 5) stream.reserve(rng.int(80));
      else if (op === 6 || op === 7) {
        const count = rng.int(model.length + 2);
        stream.dropFirst(count);
        model = model.slice(count);
      } else if (op === 8) {
        const count = rng.int(Math.min(model.length, 20) + 2);
        stream.dropLast(count);
        model = model.slice(0, Math.max(0, model.length - count));
      } else {
        const from = rng.int(model.length + 3) - 1;
        const to = rng.int(model.length + 3) - 1;
        expect(stream.slice(from, to)).toEqual(model.slice(Math.max(0, from), Math.max(0, from, Math.min(to, model.length))));
        const value = model.length === 0 ? next : (model[rng.int(model.length)] as number) + rng.int(3) - 1;
        expect(stream.lowerBound(value)).toBe(model.filter((position) => position < value).length);
      }
      expect(stream.length).toBe(model.length);
      sizes.add(model.length === 0 ? 'none' : model.length === 1 ? 'one' : model.length <= FEW_POSITIONS ? 'few' : 'many');
      const at = rng.int(model.length + 2) - 1;
      expect(stream.at(at)).toBe(model[at]);
    }
    expectSame(stream, model);
    expect([...sizes].sort()).toEqual(['few', 'many', 'none', 'one']);
  });
});

/** A table as loaded from a checkpoint: records (name, revision, position) in log order. */
function tableOf(base: number, records: ReadonlyArray<readonly [string, number, number]>): SegmentTable {
  const table = new SegmentTable(base, 64);
  for (const [name, revision, position] of records) table.add(name, revision, position, 1_700_000_000_000);
  return table;
}

describe('LogIndex built from segment tables', () => {
  it('lands a stream of 100,000 events and many one-event streams, across tables, in order', () => {
    const sealed: Array<[string, number, number]> = [];
    const active: Array<[string, number, number]> = [];
    let position = 64;
    for (let revision = 0; revision < 100_000; revision++) {
      (revision < 60_000 ? sealed : active).push(['heartbeat-long', revision, (position += 100)]);
      if (revision % 50 === 0) (revision < 60_000 ? sealed : active).push([`device-${revision}`, 0, (position += 100)]);
    }
    const index = new LogIndex();
    index.applyTables([
      { table: tableOf(0, sealed), file: 'events.log' },
      { table: tableOf(0, active), file: 'events-1.log' },
    ]);

    const long = index.streams.get('heartbeat-long') as StreamIndex;
    expect([long.length, long.durableCount, long.firstRevision]).toEqual([100_000, 100_000, 0]);
    const expected = [...sealed, ...active].filter(([name]) => name === 'heartbeat-long').map(([, , at]) => at);
    expect(long.slice(0, 100_000)).toEqual(expected);
    expect(index.streams.size).toBe(1 + 2000);
    const device = index.streams.get('device-99950') as StreamIndex;
    expect([device.length, device.durableCount, device.at(0)]).toEqual([1, 1, active.find(([name]) => name === 'device-99950')?.[2]]);
  });

  it("drops what comes before a heartbeat stream's gap (earlier versions' reclamation), and takes the rest", () => {
    const records: Array<[string, number, number]> = [];
    for (let revision = 0; revision < 30; revision++) records.push(['heartbeat-1', revision, 100 + revision * 100]);
    for (let revision = 40; revision < 45; revision++) records.push(['heartbeat-1', revision, 100 + revision * 100]);
    const index = new LogIndex();
    index.applyTables([{ table: tableOf(0, records), file: 'events.log' }]);

    const stream = index.streams.get('heartbeat-1') as StreamIndex;
    expect([stream.firstRevision, stream.length, stream.durableCount]).toEqual([40, 5, 5]);
    expect(stream.slice(0, 5)).toEqual([4100, 4200, 4300, 4400, 4500]);
    stream.push(9000);
    expect(stream.at(5)).toBe(9000);
  });

  it('takes many events after such a gap too, and the next table after them', () => {
    const records: Array<[string, number, number]> = [];
    for (let revision = 0; revision < 30; revision++) records.push(['heartbeat-1', revision, 100 + revision * 10]);
    for (let revision = 100; revision < 1100; revision++) records.push(['heartbeat-1', revision, 100 + revision * 10]);
    const index = new LogIndex();
    index.applyTables([
      { table: tableOf(0, records), file: 'events.log' },
      { table: tableOf(20_000, [['heartbeat-1', 1100, 20_100]]), file: 'events-20000.log' },
    ]);

    const stream = index.streams.get('heartbeat-1') as StreamIndex;
    expect([stream.firstRevision, stream.length, stream.durableCount]).toEqual([100, 1001, 1001]);
    expect(stream.slice(0, 1001)).toEqual([...Array.from({ length: 1000 }, (_, i) => 100 + (100 + i) * 10), 20_100]);
  });

  it('reclaims the oldest events of a stream down to its newest, whatever its size', () => {
    for (const count of [1, 2, FEW_POSITIONS + 1, 500]) {
      const index = new LogIndex();
      const records = Array.from({ length: count }, (_, revision) => ['heartbeat-1', revision, 100 + revision * 100] as const);
      index.applyTables([{ table: tableOf(0, records), file: 'events.log' }]);
      index.reclaimThrough('heartbeat-1', count - 2);
      const stream = index.streams.get('heartbeat-1') as StreamIndex;
      expect([stream.firstRevision, stream.durableCount, stream.slice(0, 9)]).toEqual([count - 1, 1, [100 + (count - 1) * 100]]);
      // Never beyond what is durable.
      stream.push(1e9);
      index.reclaimThrough('heartbeat-1', count + 5);
      expect([stream.firstRevision, stream.durableCount, stream.length, stream.at(0)]).toEqual([count, 0, 1, 1e9]);
    }
  });

  it("keeps the active table finding its streams by name once it holds the index's copies of the names", () => {
    const active = tableOf(1000, [
      ['device-1', 0, 1100],
      ['device-2', 1, 1200],
    ]);
    const index = new LogIndex();
    index.applyTables([
      { table: tableOf(0, [['device-2', 0, 100]]), file: 'events.log' },
      { table: active, file: 'events-1000.log' },
    ]);

    active.add(index.stream('device-2').name, 2, 1300, 1_700_000_000_001);
    active.add('device-3', 0, 1400, 1_700_000_000_002);
    active.add('device-1', 1, 1500, 1_700_000_000_003);
    expect(active.names).toEqual(['device-1', 'device-2', 'device-3']);
    expect(Array.from(active.refs.subarray(0, active.count))).toEqual([0, 1, 1, 2, 0]);
    expect(index.stream('device-2').slice(0, 9)).toEqual([100, 1200]);
  });

  it('keeps a $maxAge set before the stream has events once the stream starts', () => {
    const index = new LogIndex();
    index.applyMaxAge('heartbeat-1', 60);
    index.applyMaxAge('heartbeat-2', 30);
    index.stream('heartbeat-1').push(100);
    expect([...index.maxAgeSeconds].sort()).toEqual([
      ['heartbeat-1', 60],
      ['heartbeat-2', 30],
    ]);
    index.applyMaxAge('heartbeat-1', null);
    expect([...index.maxAgeSeconds]).toEqual([['heartbeat-2', 30]]);
  });
});

describe('the embedded log with streams of each size', () => {
  const DIR = '/sim/data';

  async function simStore(fs: SimFs, options: EmbeddedEventStoreOptions = {}): Promise<EmbeddedEventStore> {
    await fs.mkdir(DIR).catch(() => undefined);
    return openEmbeddedEventStore(DIR, { io: fs, lock: async () => async () => undefined, reclaimIntervalMs: 0, log: () => undefined, onTornTail: () => undefined, ...options });
  }

  const types = async (store: EmbeddedEventStore, stream: string): Promise<string[]> => (await readAll(store.readStream(stream))).map((event) => event.type);

  it('gives back the positions of a failed write, whether the stream held one, a few or many, and a crash after it loses nothing acknowledged', async () => {
    const fs = new SimFs(new Rng(7));
    const store = await simStore(fs);
    const sizes = [1, FEW_POSITIONS - 1, FEW_POSITIONS, 40];
    for (const size of sizes) await store.append(`device-${size}`, Array.from({ length: size }, (_, i) => newEvent(`E${i}`)), 'no_stream');

    fs.faults = { ...NO_FAULTS, syncEio: 1 };
    const failed = sizes.map((size) => store.append(`device-${size}`, Array.from({ length: 3 }, () => newEvent('Failed')), BigInt(size - 1)));
    for (const append of failed) await expect(append).rejects.toBeInstanceOf(EventStoreUnavailableError);
    fs.faults = { ...NO_FAULTS };
    for (const size of sizes) {
      const result = await store.append(`device-${size}`, [newEvent('After')], BigInt(size - 1));
      expect(result.nextExpectedRevision).toBe(BigInt(size));
    }
    fs.crash();

    const reopened = await simStore(fs);
    for (const size of sizes) {
      expect(await types(reopened, `device-${size}`)).toEqual([...Array.from({ length: size }, (_, i) => `E${i}`), 'After']);
      expect(reopened.streamEnd(`device-${size}`)).toBe(size + 1);
    }
    await reopened.close();
  });

  it("reclaims a heartbeat stream's oldest events, to a few and then to its newest, reads it the same, takes appends, and opens again", async () => {
    const fs = new SimFs(new Rng(8));
    const clock = { now: Date.UTC(2030, 0, 1) };
    const options = { now: () => clock.now, segmentBytes: 2000 };
    const store = await simStore(fs, options);
    await store.setStreamMaxAge('heartbeat-1', 60);
    for (let i = 0; i < 100; i++) {
      await store.append('heartbeat-1', [newEvent(`H${i}`)], 'any');
      await store.append('device-1', [newEvent(`D${i}`)], 'any');
      clock.now += 10_000;
    }
    const visible = await types(store, 'heartbeat-1');
    expect(visible).toEqual(['H94', 'H95', 'H96', 'H97', 'H98', 'H99']);

    // Down to a few: what is still visible, or in the active segment.
    expect((await store.reclaimExpired()).eventsReclaimed).toBeGreaterThan(80);
    expect(await types(store, 'heartbeat-1')).toEqual(visible);
    expect((await readAll(store.readStream('heartbeat-1', { direction: 'backwards', maxCount: 2 }))).map((event) => event.type)).toEqual(['H99', 'H98']);
    await store.append('heartbeat-1', [newEvent('H100')], 99n);
    expect(await types(store, 'heartbeat-1')).toEqual([...visible, 'H100']);

    // Down to the newest, an hour later (which reads hide: older than its $maxAge).
    clock.now += 3_600_000;
    await store.append('device-1', [newEvent('Fill')], 'any');
    for (let i = 0; i < 20; i++) await store.append('device-2', [newEvent(`F${i}`)], 'any');
    await store.reclaimExpired();
    expect(await types(store, 'heartbeat-1')).toEqual([]);
    expect(store.streamEnd('heartbeat-1')).toBe(101);
    await store.append('heartbeat-1', [newEvent('H101')], 100n);
    expect(await types(store, 'heartbeat-1')).toEqual(['H101']);
    expect(await types(store, 'device-1')).toEqual([...Array.from({ length: 100 }, (_, i) => `D${i}`), 'Fill']);
    await store.close();
    fs.processExit();

    const reopened = await simStore(fs, options);
    expect(reopened.streamEnd('heartbeat-1')).toBe(102);
    expect(await types(reopened, 'heartbeat-1')).toEqual(['H101']);
    await reopened.append('heartbeat-1', [newEvent('H102')], 101n);
    expect(await types(reopened, 'heartbeat-1')).toEqual(['H101', 'H102']);
    await reopened.close();
  });

  it('opens a log with a stream of 100,000 events, and reads and appends it at both ends', async () => {
    const fs = new SimFs(new Rng(9));
    const store = await simStore(fs);
    const start = Date.UTC(2030, 0, 1);
    for (let from = 0; from < 100_000; from += 5000) {
      await store.appendHistory(Array.from({ length: 5000 }, (_, i) => ({ streamName: 'heartbeat-long', events: [newEvent(`H${from + i}`)], writtenAt: start + from + i })));
    }
    await store.append('device-1', [newEvent('Only')], 'no_stream');
    await store.close();
    fs.processExit();

    const reopened = await simStore(fs, { now: () => start + 200_000 });
    expect(reopened.streamEnd('heartbeat-long')).toBe(100_000);
    const first = await readAll(reopened.readStream('heartbeat-long', { maxCount: 2 }));
    const last = await readAll(reopened.readStream('heartbeat-long', { direction: 'backwards', maxCount: 2 }));
    expect([...first, ...last].map((event) => event.type)).toEqual(['H0', 'H1', 'H99999', 'H99998']);
    await reopened.append('heartbeat-long', [newEvent('H100000')], 99_999n);
    expect((await readAll(reopened.readStream('heartbeat-long', { fromRevision: 99_999n }))).map((event) => event.type)).toEqual(['H99999', 'H100000']);
    expect(await types(reopened, 'device-1')).toEqual(['Only']);
    await reopened.close();
  }, 60_000);
});
