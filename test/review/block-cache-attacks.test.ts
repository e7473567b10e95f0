/**
 * Attacks on the blocks of segment files kept for reads of single records (block-cache.ts):
 * what a read hands out must be exactly what was written and acknowledged, whatever failed,
 * was compacted, rewritten or erased meanwhile; nothing of a replaced segment stays reachable.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openEmbeddedEventStore, type EmbeddedEventStore, type EmbeddedEventStoreOptions } from '../../src/infra/eventstore/embedded';
import { BLOCK_READ_MAX, BLOCK_SIZE, BlockCache, type BlockSource } from '../../src/infra/eventstore/embedded/block-cache';
import type { HandlePool } from '../../src/infra/eventstore/embedded/segment';
import type { NewEvent, RecordedEvent } from '../../src/infra/eventstore/port';
import { newEvent, readAll } from '../contract/eventstore.contract';
import { Rng } from '../sim/rng';
import { NO_FAULTS, SimFs } from '../sim/sim-fs';
import { FakeSegment } from '../support/fake-segment';

const meta = { occurredAt: '2026-11-27T10:00:00.000Z', actor: { type: 'system' as const, id: 'review' }, requestId: 'r', causationId: 'c', correlationId: 'r' };

/** The blocks a store's cache holds now, with the segment each belongs to. */
function heldBlocks(store: EmbeddedEventStore): Array<{ segment: BlockSource; bytes: Buffer }> {
  return (store as unknown as { pool: HandlePool }).pool.blocks.held();
}

/** Every byte a held block keeps reachable: the whole memory it is a view of. */
function reachable(bytes: Buffer): Buffer {
  return Buffer.from(bytes.buffer, 0, bytes.buffer.byteLength);
}

describe('the block cache alone', () => {
  test('reads at and around every block boundary and at the durable end hand out the file bytes, single reads and across two blocks', async () => {
    const size = 3 * BLOCK_SIZE + 777;
    const segment = new FakeSegment(randomBytes(4 * BLOCK_SIZE), size);
    const cache = new BlockCache();
    const offsets = [0, 1, BLOCK_SIZE - BLOCK_READ_MAX, BLOCK_SIZE - 4096, BLOCK_SIZE - 1, BLOCK_SIZE, BLOCK_SIZE + 1, 2 * BLOCK_SIZE - 1, 3 * BLOCK_SIZE - 5, 3 * BLOCK_SIZE, size - 4096, size - 1];
    const lengths = [1, 2, 7, 4096, BLOCK_READ_MAX - 1, BLOCK_READ_MAX];
    for (let round = 0; round < 2; round++) {
      for (const offset of offsets) {
        for (const length of lengths) {
          if (offset + length > size) continue;
          const got = await cache.read(segment, offset, length);
          expect(got.length).toBe(length);
          expect(got.equals(segment.bytes.subarray(offset, offset + length))).toBe(true);
        }
      }
    }
    // Nothing past the durable size was read into a block.
    for (const { offset, length } of segment.reads) if (length <= BLOCK_SIZE) expect(offset + length).toBeLessThanOrEqual(size);
  });

  test('a zero-length read gives no bytes and keeps no block', async () => {
    const segment = new FakeSegment(randomBytes(2 * BLOCK_SIZE), BLOCK_SIZE);
    const cache = new BlockCache();
    expect((await cache.read(segment, BLOCK_SIZE, 0)).length).toBe(0);
    expect((await cache.read(segment, 10, 0)).length).toBe(0);
    expect(cache.size).toBe(0);
  });

  test('bytes cut back and written again past the old size are never served from a block fetched before', async () => {
    const bytes = randomBytes(BLOCK_SIZE);
    const segment = new FakeSegment(bytes, 2000);
    const cache = new BlockCache();
    expect((await cache.read(segment, 1000, 1000)).equals(bytes.subarray(1000, 2000))).toBe(true);
    // A failed append left bytes past 2000 (never durable), cut back, written again with others, now durable.
    bytes.fill(1, 2000, 6000);
    bytes.fill(2, 2000, 6000);
    segment.size = 6000;
    expect((await cache.read(segment, 1500, 4000)).equals(Buffer.concat([bytes.subarray(1500, 2000), Buffer.alloc(3500, 2)]))).toBe(true);
  });

  test('a read started before a segment grows, joined by one that needs more, gives both their bytes', async () => {
    const bytes = randomBytes(BLOCK_SIZE);
    const segment = new FakeSegment(bytes, 3000);
    const cache = new BlockCache();
    segment.hold();
    const early = cache.read(segment, 0, 3000);
    segment.size = 9000;
    const late = cache.read(segment, 5000, 4000);
    segment.release();
    expect((await early).equals(bytes.subarray(0, 3000))).toBe(true);
    // The second fetch, made once the first ended, is not held.
    expect((await late).equals(bytes.subarray(5000, 9000))).toBe(true);
  });

  test('a fetch under way when its segment is retired is not kept, and the retired segment cannot fetch again', async () => {
    const segment = new FakeSegment(randomBytes(2 * BLOCK_SIZE), 2 * BLOCK_SIZE);
    const cache = new BlockCache();
    segment.hold();
    const underWay = [cache.read(segment, 100, 100), cache.read(segment, BLOCK_SIZE - 50, 100)];
    segment.retired = true;
    cache.forget(segment);
    segment.release();
    await Promise.all(underWay);
    expect(cache.size).toBe(0);
  });

  test('a failed read (EIO) is not kept, and the reads sharing it fail with it, then read the file again', async () => {
    const segment = new FakeSegment(randomBytes(BLOCK_SIZE), BLOCK_SIZE);
    const cache = new BlockCache();
    segment.failNext = Object.assign(new Error('EIO: i/o error, read'), { code: 'EIO' });
    const shared = await Promise.allSettled(Array.from({ length: 32 }, (_, i) => cache.read(segment, i * 1000, 500)));
    expect(shared.every((result) => result.status === 'rejected')).toBe(true);
    expect(cache.size).toBe(0);
    const again = await Promise.all(Array.from({ length: 32 }, (_, i) => cache.read(segment, i * 1000, 500)));
    again.forEach((got, i) => expect(got.equals(segment.bytes.subarray(i * 1000, i * 1000 + 500))).toBe(true));
    expect(segment.reads).toHaveLength(2);
  });

  test('a short read of the file (fewer bytes than the durable size says) is not kept', async () => {
    const segment = new FakeSegment(randomBytes(1000), 5000);
    const cache = new BlockCache();
    expect((await cache.read(segment, 0, 100)).length).toBe(100);
    expect(cache.size).toBe(0);
  });

  test('blocks of many segments: at most the capacity, each served from its own segment', async () => {
    const segments = Array.from({ length: 40 }, () => new FakeSegment(randomBytes(2 * BLOCK_SIZE), 2 * BLOCK_SIZE));
    const cache = new BlockCache(16);
    for (let round = 0; round < 3; round++) {
      await Promise.all(
        segments.map(async (segment, i) => {
          const offset = (i * 7919 + round * 104729) % (2 * BLOCK_SIZE - 4096);
          expect((await cache.read(segment, offset, 4096)).equals(segment.bytes.subarray(offset, offset + 4096))).toBe(true);
        }),
      );
      expect(cache.size).toBeLessThanOrEqual(16);
    }
  });
});

describe('the embedded log with it', () => {
  let dir: string;
  beforeEach(() => (dir = mkdtempSync(join(tmpdir(), 'hhc-block-attacks-'))));
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  const open = (options: EmbeddedEventStoreOptions = {}): Promise<EmbeddedEventStore> => openEmbeddedEventStore(dir, { reclaimIntervalMs: 0, ...options });

  const v1User = (userId: string, email: string): NewEvent => ({
    id: randomUUID(),
    type: 'UserSynced',
    data: { userId, created: true, syncId: 5, email, firstName: 'Vera', lastName: 'Old', syncedAt: meta.occurredAt },
    metadata: meta,
  });
  const redact = (stream: string) => (name: string, event: { id: string; type: string; data: unknown; metadata: never }) =>
    name === stream ? { ...event, data: { ...(event.data as Record<string, unknown>), email: '[erased]', firstName: '[erased]', lastName: '[erased]' } } : null;

  test("after an erasure's rewrite, no block the cache holds keeps the person's old plaintext reachable", async () => {
    const userId = randomUUID();
    const email = `${userId}@example.org`;
    const stream = `user-${userId}`;
    // Small segments: every block of their files is shorter than 4 KiB.
    const writer = await open({ segmentBytes: 700 });
    for (let i = 0; i < 6; i++) await writer.append(`device-${i}`, [newEvent('Thing', { i })], 'any');
    await writer.append(stream, [v1User(userId, email)], 'no_stream');
    for (let i = 6; i < 12; i++) await writer.append(`device-${i}`, [newEvent('Thing', { i })], 'any');
    await writer.close();

    const store = await open({ segmentBytes: 700 });
    try {
      // Reads after the restart come from the files, interleaved as a busy service's are.
      for (let i = 0; i < 12; i++) {
        if (i === 6) expect((await readAll(store.readStream(stream))).map((e) => (e.data as { email: string }).email)).toEqual([email]);
        expect(await readAll(store.readStream(`device-${i}`))).toHaveLength(1);
      }
      await store.rewriteStreams([stream], redact(stream) as never);
      for (let i = 0; i < 12; i++) {
        if (i === 3) expect((await readAll(store.readStream(stream))).map((e) => (e.data as { email: string }).email)).toEqual(['[erased]']);
        expect(await readAll(store.readStream(`device-${i}`))).toHaveLength(1);
      }
      const blocks = heldBlocks(store);
      expect(blocks.length).toBeGreaterThan(0);
      const exposing = blocks.filter(({ bytes }) => reachable(bytes).includes(email)).map(({ segment }) => (segment as unknown as { base: number }).base);
      expect(exposing).toEqual([]);
    } finally {
      await store.close();
    }
  });

  test('every block the cache holds has memory of its own (a small one is not a view into a shared slab)', async () => {
    const writer = await open({ segmentBytes: 900 });
    for (let i = 0; i < 20; i++) await writer.append(`device-${i}`, [newEvent('Thing', { i })], 'any');
    await writer.close();
    const store = await open({ segmentBytes: 900 });
    try {
      for (let i = 0; i < 20; i++) expect((await readAll(store.readStream(`device-${i}`))).map((e) => e.data)).toEqual([{ i }]);
      const blocks = heldBlocks(store);
      expect(blocks.length).toBeGreaterThan(0);
      expect(blocks.filter(({ bytes }) => bytes.buffer.byteLength !== bytes.length).map(({ bytes }) => `${bytes.length} of ${bytes.buffer.byteLength}`)).toEqual([]);
    } finally {
      await store.close();
    }
  });

  test('records of 1 byte to 200 KiB, around 16 KiB and 64 KiB, read back exactly after a restart, one at a time and 32 at once', async () => {
    const sizes = [1, 100, 4000, 4090, 4100, 16 * 1024 - 200, 16 * 1024, 16 * 1024 + 200, 40_000, 64 * 1024 - 300, 64 * 1024, 64 * 1024 + 300, 200_000];
    const writer = await open();
    const written: Array<{ stream: string; pad: string }> = [];
    for (let round = 0; round < 3; round++) {
      for (const [i, size] of sizes.entries()) {
        const pad = randomBytes(Math.ceil(size / 2)).toString('hex').slice(0, size);
        const stream = `device-${round}-${i}`;
        await writer.append(stream, [newEvent('Blob', { pad })], 'no_stream');
        written.push({ stream, pad });
      }
    }
    await writer.close();
    const store = await open();
    try {
      for (const { stream, pad } of written) expect((await readAll(store.readStream(stream))).map((e) => (e.data as { pad: string }).pad)).toEqual([pad]);
      const reread = await Promise.all(written.map(async ({ stream }) => (await readAll(store.readStream(stream))).map((e) => (e.data as { pad: string }).pad)));
      expect(reread).toEqual(written.map(({ pad }) => [pad]));
    } finally {
      await store.close();
    }
  });

  test("a read racing an erasure's rewrite gives the old or the new event, and afterwards only the new one; no block of the old segment is kept", async () => {
    const userId = randomUUID();
    const email = `${userId}@example.org`;
    const stream = `user-${userId}`;
    const writer = await open({ segmentBytes: 64 * 1024 });
    for (let i = 0; i < 200; i++) await writer.append(`device-${i}`, [newEvent('Thing', { i, pad: 'x'.repeat(300) })], 'any');
    await writer.append(stream, [v1User(userId, email)], 'no_stream');
    for (let i = 200; i < 400; i++) await writer.append(`device-${i}`, [newEvent('Thing', { i, pad: 'x'.repeat(300) })], 'any');
    await writer.close();
    const store = await open({ segmentBytes: 64 * 1024 });
    try {
      const racing = Array.from({ length: 32 }, (_, i) => readAll(store.readStream(i % 2 === 0 ? stream : `device-${i * 11}`)));
      const rewrite = store.rewriteStreams([stream], redact(stream) as never);
      const more = Array.from({ length: 32 }, (_, i) => readAll(store.readStream(i % 2 === 0 ? stream : `device-${i * 7 + 1}`)));
      const [raced, done, after] = await Promise.all([Promise.all(racing), rewrite, Promise.all(more)]);
      expect(done.eventsRewritten).toBe(1);
      for (const events of [...raced, ...after]) {
        expect(events).toHaveLength(1);
        const data = (events[0] as RecordedEvent).data as { email?: string; i?: number };
        if (data.email !== undefined) expect([email, '[erased]']).toContain(data.email);
      }
      expect((await readAll(store.readStream(stream))).map((e) => (e.data as { email: string }).email)).toEqual(['[erased]']);
      const segments = (store as unknown as { segments: BlockSource[] }).segments;
      for (const { segment, bytes } of heldBlocks(store)) {
        expect(segments).toContain(segment);
        expect(segment.retired).toBe(false);
        expect(reachable(bytes).includes(email)).toBe(false);
      }
    } finally {
      await store.close();
    }
  });

  test('reads racing reclamation of expired heartbeats give exactly the events kept, and no block of a compacted-away segment stays', async () => {
    let now = Date.UTC(2030, 0, 1);
    const options = { segmentBytes: 16 * 1024, now: () => now };
    const writer = await open(options);
    for (let i = 0; i < 8; i++) await writer.setStreamMaxAge(`heartbeat-${i}`, 60);
    const devices = new Map<string, number[]>();
    for (let round = 0; round < 40; round++) {
      for (let i = 0; i < 8; i++) await writer.append(`heartbeat-${i}`, [newEvent('Heartbeat', { round, pad: 'h'.repeat(200) })], 'any');
      const device = `device-${round % 5}`;
      await writer.append(device, [newEvent('Thing', { round, pad: 'd'.repeat(150) })], 'any');
      devices.set(device, [...(devices.get(device) ?? []), round]);
      now += 1000;
    }
    await writer.close();
    now += 3_600_000;
    const store = await open(options);
    try {
      const readDevices = (): Promise<number[][]> => Promise.all([...devices.keys()].map(async (device) => (await readAll(store.readStream(device))).map((e) => (e.data as { round: number }).round)));
      const expected = [...devices.values()];
      expect(await readDevices()).toEqual(expected);
      const racing = Array.from({ length: 8 }, () => readDevices());
      const reclaimed = store.reclaimExpired();
      const heartbeats = Array.from({ length: 8 }, (_, i) => readAll(store.readStream(`heartbeat-${i}`)));
      const [result, raced] = await Promise.all([reclaimed, Promise.all(racing), Promise.all(heartbeats)]);
      expect(result.eventsReclaimed).toBeGreaterThan(0);
      for (const read of raced) expect(read).toEqual(expected);
      expect(await readDevices()).toEqual(expected);
      // All older than their $maxAge: hidden from reads, reclaimed on disk but for the newest.
      for (let i = 0; i < 8; i++) expect(await readAll(store.readStream(`heartbeat-${i}`))).toEqual([]);
      const segments = (store as unknown as { segments: BlockSource[] }).segments;
      for (const { segment } of heldBlocks(store)) expect(segments).toContain(segment);
    } finally {
      await store.close();
    }
  });

  test('a subscription from the start across many rolled-over segments, after a restart, gives every event in order, as a read by stream does', async () => {
    const writer = await open({ segmentBytes: 5000 });
    const written: string[] = [];
    for (let i = 0; i < 300; i++) {
      const type = `T${i}-${'z'.repeat((i * 37) % 900)}`;
      await writer.append(`device-${i % 7}`, [newEvent(type)], 'any');
      written.push(type);
    }
    await writer.close();
    const store = await open({ segmentBytes: 5000 });
    try {
      // Reads by stream first fill blocks; the subscription then meets them at every segment's end.
      for (let d = 0; d < 7; d++) expect((await readAll(store.readStream(`device-${d}`))).map((e) => e.type)).toEqual(written.filter((_, i) => i % 7 === d));
      const seen: string[] = [];
      const subscription = store.subscribe();
      for await (const item of subscription) {
        if (item.kind === 'caught-up') break;
        seen.push(item.event.type);
      }
      await subscription.close();
      expect(seen).toEqual(written);
    } finally {
      await store.close();
    }
  });

  test('a store closed keeps no block; one opened again in the same process reads what was appended after, not what an earlier store kept', async () => {
    const first = await open();
    await first.append('device-1', [newEvent('One')], 'no_stream');
    await first.close();
    const second = await open();
    expect((await readAll(second.readStream('device-1'))).map((e) => e.type)).toEqual(['One']);
    expect(heldBlocks(second).length).toBeGreaterThan(0);
    await second.append('device-1', [newEvent('Two')], 0n);
    await second.close();
    expect(heldBlocks(second)).toEqual([]);
    const third = await open();
    try {
      expect((await readAll(third.readStream('device-1'))).map((e) => e.type)).toEqual(['One', 'Two']);
    } finally {
      await third.close();
    }
  });
});

describe('the embedded log with it under faults (in-memory file system)', () => {
  const DIR = '/sim/data';
  const simStore = async (fs: SimFs, options: EmbeddedEventStoreOptions = {}): Promise<EmbeddedEventStore> => {
    await fs.mkdir(DIR);
    return openEmbeddedEventStore(DIR, { io: fs, lock: async () => async () => undefined, reclaimIntervalMs: 0, log: () => undefined, onTornTail: () => undefined, ...options });
  };

  test('failed appends (disk full, EIO on write and on fsync, short writes) cut back and written again: reads give exactly the acknowledged events, before and after a reopen', async () => {
    for (const seed of [1, 2, 3, 4, 5, 6]) {
      const rng = new Rng(seed);
      const fs = new SimFs(rng);
      let store = await simStore(fs, { segmentBytes: 8 * 1024 });
      const acknowledged = new Map<string, string[]>();
      const streams = Array.from({ length: 12 }, (_, i) => `device-${i}`);
      for (let step = 0; step < 400; step++) {
        const pick = rng.int(10);
        if (pick < 2) {
          const kind = rng.int(4);
          fs.faults = { ...NO_FAULTS, diskFull: kind === 0, writeEio: kind === 1 ? 0.5 : 0, syncEio: kind === 2 ? 0.5 : 0, shortWrite: kind === 3 ? 0.5 : 0 };
        } else if (pick < 4) {
          fs.faults = { ...NO_FAULTS };
        }
        const stream = streams[rng.int(streams.length)] as string;
        if (rng.int(3) > 0) {
          const type = `T${step}-${'y'.repeat(rng.int(3000))}`;
          try {
            await store.append(stream, [newEvent(type, { step })], 'any');
            acknowledged.set(stream, [...(acknowledged.get(stream) ?? []), type]);
          } catch {
            // Refused or failed: not acknowledged.
          }
        } else {
          const read = (await readAll(store.readStream(stream))).map((e) => e.type);
          expect(read).toEqual(acknowledged.get(stream) ?? []);
        }
        if (step % 100 === 99) {
          fs.faults = { ...NO_FAULTS };
          await store.close();
          fs.processExit();
          store = await simStore(fs, { segmentBytes: 8 * 1024 });
        }
      }
      fs.faults = { ...NO_FAULTS };
      for (const stream of streams) expect((await readAll(store.readStream(stream))).map((e) => e.type)).toEqual(acknowledged.get(stream) ?? []);
      await store.close();
    }
  });
});
