import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PositionList } from '../../src/infra/eventstore/embedded/position-list';
import { indexFileOf, loadSegmentIndex, writeSegmentIndex } from '../../src/infra/eventstore/embedded/segment-index-file';
import { SegmentTable } from '../../src/infra/eventstore/embedded/segment-table';

/** The pieces of the in-memory index: position lists, segment tables and their checkpoint files. */

describe('PositionList', () => {
  it('grows, drops from the front and the back, and finds positions', () => {
    const list = new PositionList(2);
    for (let i = 0; i < 100; i++) list.push(1000 + i * 10);

    list.dropFirst(30);
    list.dropLast(10);

    expect(list.length).toBe(60);
    expect(list.at(0)).toBe(1300);
    expect(list.at(59)).toBe(1890);
    expect(list.at(60)).toBeUndefined();
    expect(list.slice(1, 3)).toEqual([1310, 1320]);
    expect(list.lowerBound(1305)).toBe(1);
    expect(list.lowerBound(5000)).toBe(60);
    list.push(2000);
    expect(list.at(60)).toBe(2000);
    list.dropFirst(1000);
    expect(list.length).toBe(0);
  });
});

describe('segment index checkpoints', () => {
  let dir: string;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'hhc-segment-index-'));
  });

  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  function table(base: number, withFileOffsets: boolean): SegmentTable {
    const t = new SegmentTable(base, 16);
    for (let i = 0; i < 1000; i++) {
      t.add(`stream-${i % 7}`, Math.floor(i / 7), base + 16 + i * 100, 1_700_000_000_000 + i, withFileOffsets ? 16 + i * 50 : undefined);
      t.coveredSize += 100;
    }
    t.add('$$heartbeat-x', 0, base + 16 + 1000 * 100, 1_700_000_001_000);
    t.maxAgeChanges.push({ target: 'heartbeat-x', maxAge: 60 }, { target: 'heartbeat-y', maxAge: null });
    t.coveredCrc = 12345;
    return t;
  }

  it.each([
    ['a segment that was never compacted', false],
    ['a compacted segment (with file offsets)', true],
  ])('reads back what it wrote for %s', async (_, compacted) => {
    const file = join(dir, 'events-0000000000001000.log');
    const written = table(1000, compacted);
    await writeSegmentIndex(file, { base: 1000, generation: compacted ? 3 : 0 }, written, compacted);

    const loaded = await loadSegmentIndex(file, { base: 1000, generation: compacted ? 3 : 0 }, written.coveredSize);

    if (!('table' in loaded)) throw new Error(loaded.problem);
    const t = loaded.table;
    expect([t.count, t.coveredSize, t.coveredCrc, t.firstWrittenAt, t.lastWrittenAt, t.lastUserPosition]).toEqual([
      1001,
      written.coveredSize,
      12345,
      1_700_000_000_000,
      1_700_000_001_000,
      1000 + 16 + 999 * 100,
    ]);
    expect(t.names).toEqual(written.names);
    expect(t.maxAgeChanges).toEqual(written.maxAgeChanges);
    expect(Array.from(t.refs.subarray(0, t.count))).toEqual(Array.from(written.refs.subarray(0, written.count)));
    expect(Array.from(t.revisions.subarray(0, t.count))).toEqual(Array.from(written.revisions.subarray(0, written.count)));
    expect(Array.from({ length: t.count }, (_, i) => t.positionAt(i))).toEqual(Array.from({ length: written.count }, (_, i) => written.positionAt(i)));
    expect(Array.from(t.fileOffsets.subarray(0, compacted ? t.count : 0))).toEqual(Array.from(written.fileOffsets.subarray(0, compacted ? written.count : 0)));
  });

  it('keeps positions and file offsets beyond 4 GiB (a single-file log of an earlier version can be that long)', async () => {
    const file = join(dir, 'events.log');
    const big = new SegmentTable(0, 16);
    big.add('stream-1', 0, 5_000_000_016, 1_700_000_000_000, 6_000_000_000);
    big.coveredSize = 6_000_000_200;
    await writeSegmentIndex(file, { base: 0, generation: 1 }, big, true);

    const loaded = await loadSegmentIndex(file, { base: 0, generation: 1 }, big.coveredSize);

    if (!('table' in loaded)) throw new Error(loaded.problem);
    expect([loaded.table.positionAt(0), loaded.table.fileOffsets[0]]).toEqual([5_000_000_016, 6_000_000_000]);
  });

  it('says why a checkpoint cannot be used', async () => {
    const file = join(dir, 'events.log');
    const written = table(0, false);
    const load = async (base: number, generation: number, size: number): Promise<string> => {
      const loaded = await loadSegmentIndex(file, { base, generation }, size);
      return 'problem' in loaded ? loaded.problem : 'usable';
    };

    expect(await load(0, 0, written.coveredSize)).toBe('missing');
    await writeSegmentIndex(file, { base: 0, generation: 0 }, written, false);
    expect(await load(0, 0, written.coveredSize)).toBe('usable');
    expect(await load(0, 1, written.coveredSize)).toBe('stale (the segment was compacted since)');
    expect(await load(16, 0, written.coveredSize)).toBe('stale (written for another segment)');
    expect(await load(0, 0, written.coveredSize - 1)).toBe('stale (the segment is shorter than it covers)');
    const bytes = await readFile(indexFileOf(file));
    bytes[200] = (bytes[200] ?? 0) ^ 1;
    await writeFile(indexFileOf(file), bytes);
    expect(await load(0, 0, written.coveredSize)).toBe('checksum mismatch');
  });
});
