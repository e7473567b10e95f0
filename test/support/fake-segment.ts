import type { BlockSource } from '../../src/infra/eventstore/embedded/block-cache';

/** A segment file in memory: `size` durable bytes of `bytes`, reads counted, reads that are paused until released. */
export class FakeSegment implements BlockSource {
  retired = false;
  reads: Array<{ offset: number; length: number }> = [];
  failNext: Error | null = null;
  private held: Array<() => void> | null = null;
  constructor(
    public bytes: Buffer,
    public size: number,
  ) {}
  hold(): void {
    this.held = [];
  }
  release(): void {
    const held = this.held ?? [];
    this.held = null;
    for (const go of held) go();
  }
  readFile(offset: number, length: number): Promise<Buffer> {
    this.reads.push({ offset, length });
    if (this.failNext !== null) {
      const error = this.failNext;
      this.failNext = null;
      return Promise.reject(error);
    }
    // What the file holds when the read is made (a copy).
    const copy = Buffer.from(this.bytes.subarray(offset, Math.min(offset + length, this.bytes.length)));
    if (this.held === null) return Promise.resolve(copy);
    const held = this.held;
    return new Promise((resolve) => held.push(() => resolve(copy)));
  }
}
