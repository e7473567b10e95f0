import { ownBytes } from '../../src/infra/eventstore/embedded/own-bytes';
import { RecentCommits } from '../../src/infra/eventstore/embedded/recent-commits';

/**
 * The log's caches keep bytes in buffers of their own (src/infra/eventstore/embedded/own-bytes.ts):
 * a small buffer made by `Buffer.from` is a view into Node's shared 8 KB pool, and kept as it
 * was it would keep the whole slab.
 */

describe('ownBytes', () => {
  test('a view into the shared pool is copied into a buffer of exactly its size', () => {
    const pooled = Buffer.from('a record of a few bytes');
    expect(pooled.buffer.byteLength).toBeGreaterThan(pooled.length);
    const own = ownBytes(pooled);
    expect(own).toEqual(pooled);
    expect(own.buffer.byteLength).toBe(pooled.length);
    expect(own.byteOffset).toBe(0);
    // A copy: the view's slab is not written through.
    pooled[0] = 0x41;
    expect(own[0]).toBe(0x61);
  });

  test('a view into a larger buffer (a read\'s) is copied too', () => {
    const read = Buffer.alloc(64 * 1024, 7);
    const record = read.subarray(100, 400);
    expect(ownBytes(record).buffer.byteLength).toBe(300);
  });

  test('a buffer that is all of its own bytes is kept as it is', () => {
    const whole = Buffer.allocUnsafeSlow(16).fill(3);
    expect(ownBytes(whole)).toBe(whole);
  });
});

describe('RecentCommits', () => {
  test('keeps a commit written from a pooled buffer in bytes of its own', async () => {
    const recent = new RecentCommits();
    const written = Buffer.from('commit bytes, small enough for the pool');
    expect(written.buffer.byteLength).toBeGreaterThan(written.length);
    recent.remember(1000, written);
    const read = (await recent.read(1000, written.length, 1000 + written.length)) as Buffer;
    expect(read).toEqual(written);
    expect(read.buffer.byteLength).toBe(written.length);
  });
});
