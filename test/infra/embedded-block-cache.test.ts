import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import { BLOCK_READ_MAX, BLOCK_SIZE, BlockCache } from '../../src/infra/eventstore/embedded/block-cache';
import { nodeIo, type StoreFile, type StoreIo } from '../../src/infra/eventstore/embedded/io';
import type { EventStore, RecordedEvent } from '../../src/infra/eventstore/port';
import { FakeSegment } from '../support/fake-segment';

/**
 * The blocks of segment files kept for reads of single records (block-cache.ts): the bytes
 * handed out are the file's, only durable bytes are kept, a retired segment's are dropped.
 */

const file = (size: number): Buffer => randomBytes(size);

test('reads of records near each other cost one read of the file, and hand out its bytes', async () => {
  const segment = new FakeSegment(file(3 * BLOCK_SIZE), 3 * BLOCK_SIZE);
  const cache = new BlockCache();
  for (const [offset, length] of [[100, 300], [4096, 4096], [20_000, 1_000], [BLOCK_SIZE - 400, 400]] as const) {
    expect((await cache.read(segment, offset, length)).equals(segment.bytes.subarray(offset, offset + length))).toBe(true);
  }
  expect(segment.reads).toEqual([{ offset: 0, length: BLOCK_SIZE }]);
});

test('a read across two blocks is served from both, joined', async () => {
  const segment = new FakeSegment(file(2 * BLOCK_SIZE), 2 * BLOCK_SIZE);
  const cache = new BlockCache();
  for (let round = 0; round < 2; round++) {
    expect((await cache.read(segment, BLOCK_SIZE - 1000, 4096)).equals(segment.bytes.subarray(BLOCK_SIZE - 1000, BLOCK_SIZE + 3096))).toBe(true);
  }
  expect(segment.reads).toEqual([
    { offset: 0, length: BLOCK_SIZE },
    { offset: BLOCK_SIZE, length: BLOCK_SIZE },
  ]);
});

test('a long read, or one past the durable bytes, goes to the file every time', async () => {
  const segment = new FakeSegment(file(3 * BLOCK_SIZE), 2 * BLOCK_SIZE + 1000);
  const cache = new BlockCache();
  const asks: Array<[number, number]> = [
    [0, BLOCK_READ_MAX + 1], // long
    [2 * BLOCK_SIZE + 900, 200], // past size
  ];
  for (let round = 0; round < 2; round++) {
    for (const [offset, length] of asks) {
      expect((await cache.read(segment, offset, length)).equals(segment.bytes.subarray(offset, offset + length))).toBe(true);
    }
  }
  expect(segment.reads).toEqual([...asks, ...asks].map(([offset, length]) => ({ offset, length })));
  expect(cache.size).toBe(0);
});

test('only durable bytes are kept: the block at the head is read again once the segment has grown past it', async () => {
  const bytes = file(BLOCK_SIZE);
  const segment = new FakeSegment(bytes, 1000);
  const cache = new BlockCache();
  expect((await cache.read(segment, 0, 500)).equals(bytes.subarray(0, 500))).toBe(true);
  // Never more than the durable size was read.
  expect(segment.reads).toEqual([{ offset: 0, length: 1000 }]);
  // Bytes past the old size change (a torn append cut back, then written again), then become durable.
  bytes.fill(7, 1000, 5000);
  segment.size = 5000;
  expect((await cache.read(segment, 1200, 300)).equals(Buffer.alloc(300, 7))).toBe(true);
  expect(segment.reads).toEqual([
    { offset: 0, length: 1000 },
    { offset: 0, length: 5000 },
  ]);
  // And what was below the old size is served from the new block.
  expect((await cache.read(segment, 0, 500)).equals(bytes.subarray(0, 500))).toBe(true);
  expect(segment.reads).toHaveLength(2);
});

test('reads of one block at the same time share one read of the file', async () => {
  const segment = new FakeSegment(file(BLOCK_SIZE), BLOCK_SIZE);
  const cache = new BlockCache();
  const offsets = Array.from({ length: 32 }, (_, i) => i * 1000);
  const read = await Promise.all(offsets.map((offset) => cache.read(segment, offset, 500)));
  read.forEach((bytes, i) => expect(bytes.equals(segment.bytes.subarray(offsets[i], (offsets[i] ?? 0) + 500))).toBe(true));
  expect(segment.reads).toHaveLength(1);
});

test('a failed read of the file is not kept: the next read tries the file again', async () => {
  const segment = new FakeSegment(file(BLOCK_SIZE), BLOCK_SIZE);
  const cache = new BlockCache();
  segment.failNext = new Error('EIO');
  await expect(cache.read(segment, 0, 100)).rejects.toThrow('EIO');
  expect((await cache.read(segment, 0, 100)).equals(segment.bytes.subarray(0, 100))).toBe(true);
  expect(segment.reads).toHaveLength(2);
});

test('a retired segment keeps no block, even one whose read was under way when it was retired', async () => {
  const segment = new FakeSegment(file(2 * BLOCK_SIZE), 2 * BLOCK_SIZE);
  const cache = new BlockCache();
  await cache.read(segment, 0, 100);
  expect(cache.size).toBe(1);
  const underWay = cache.read(segment, BLOCK_SIZE, 100);
  segment.retired = true;
  cache.forget(segment);
  expect(cache.size).toBe(0);
  await underWay;
  expect(cache.size).toBe(0);
});

test('at most `capacity` blocks are kept, the least recently read let go first', async () => {
  const segment = new FakeSegment(file(5 * BLOCK_SIZE), 5 * BLOCK_SIZE);
  const cache = new BlockCache(2);
  await cache.read(segment, 0, 10); // block 0
  await cache.read(segment, BLOCK_SIZE, 10); // block 1
  await cache.read(segment, 0, 10); // block 0 again: now the most recent
  await cache.read(segment, 2 * BLOCK_SIZE, 10); // block 2: block 1 goes
  expect(cache.size).toBe(2);
  const before = segment.reads.length;
  await cache.read(segment, 0, 10);
  await cache.read(segment, 2 * BLOCK_SIZE, 10);
  expect(segment.reads.length).toBe(before);
  await cache.read(segment, BLOCK_SIZE, 10);
  expect(segment.reads.length).toBe(before + 1);
});

test("a large record's head is not kept: its block goes when the record is read whole, unless other reads used it", async () => {
  const segment = new FakeSegment(file(4 * BLOCK_SIZE), 4 * BLOCK_SIZE);
  const cache = new BlockCache();
  // A record of 100 KiB at 1,000: read ahead 4 KiB (its head, through block 0), then whole.
  await cache.read(segment, 1000, 4096);
  expect(cache.size).toBe(1);
  expect((await cache.read(segment, 1000, 100 * 1024)).equals(segment.bytes.subarray(1000, 1000 + 100 * 1024))).toBe(true);
  expect(cache.size).toBe(0);
  // Block 3 holds small records read twice: a large record starting there does not take it away.
  await cache.read(segment, 3 * BLOCK_SIZE + 10, 300);
  await cache.read(segment, 3 * BLOCK_SIZE + 400, 300);
  await cache.read(segment, 3 * BLOCK_SIZE + 800, 20 * 1024);
  expect(cache.size).toBe(1);
});

describe('the embedded log with it', () => {
  let dir: string;
  beforeEach(() => (dir = mkdtempSync(join(tmpdir(), 'hhc-block-cache-'))));
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  /** The node file system, with every read of a segment file counted. */
  const counting = (): { io: StoreIo; reads: () => number } => {
    let reads = 0;
    const io: StoreIo = {
      ...nodeIo,
      open: async (path, mode) => {
        const opened = await nodeIo.open(path, mode);
        if (!path.endsWith('.log')) return opened;
        const counted: StoreFile = {
          read: (buffer, offset, length, position) => {
            reads += 1;
            return opened.read(buffer, offset, length, position);
          },
          write: (...args) => opened.write(...args),
          datasync: () => opened.datasync(),
          truncate: (length) => opened.truncate(length),
          stat: () => opened.stat(),
          close: () => opened.close(),
        };
        return counted;
      },
    };
    return { io, reads: () => reads };
  };

  const readAll = async (store: EventStore, stream: string): Promise<RecordedEvent[]> => {
    const events: RecordedEvent[] = [];
    for await (const event of store.readStream(stream)) events.push(event);
    return events;
  };
  const metadata = { occurredAt: new Date(0).toISOString(), actor: { type: 'system', id: 'test' }, requestId: 'r', causationId: 'c', correlationId: 'c' } as const;

  test('after a restart, 3,000 streams of 3 events read back with a few dozen reads of the files, every event as written', async () => {
    const first = await openEmbeddedEventStore(dir, { reclaimIntervalMs: 0 });
    const streams = 3000;
    for (let round = 0; round < 3; round++) {
      await Promise.all(
        Array.from({ length: streams }, (_, i) =>
          first.append(`device-${i}`, [{ id: `00000000-0000-4000-8000-${String(round * streams + i).padStart(12, '0')}`, type: 'Thing', data: { i, round, pad: 'x'.repeat(100) }, metadata }], 'any'),
        ),
      );
    }
    await first.close();
    const { io, reads } = counting();
    const store = await openEmbeddedEventStore(dir, { io, reclaimIntervalMs: 0 });
    try {
      const opened = reads();
      for (let i = 0; i < streams; i++) {
        expect((await readAll(store, `device-${i}`)).map((event) => event.data)).toEqual([0, 1, 2].map((round) => ({ i, round, pad: 'x'.repeat(100) })));
      }
      // 9,000 records of ~300 bytes: about 2.6 MiB, 42 blocks. One read per record before.
      expect(reads() - opened).toBeLessThan(100);
    } finally {
      await store.close();
    }
  });
});
