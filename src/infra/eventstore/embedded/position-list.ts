/**
 * A growable list of numbers in one Float64Array: the positions of a stream with many
 * events (stream-index.ts keeps a few in a plain array). Millions of them load from a
 * segment index as plain copies, without boxing, and dropping reclaimed events from the
 * front costs nothing.
 */
export class PositionList {
  private items: Float64Array;
  private start = 0;
  private end = 0;

  constructor(capacity = 4) {
    this.items = new Float64Array(capacity);
  }

  get length(): number {
    return this.end - this.start;
  }

  at(index: number): number | undefined {
    return index >= 0 && index < this.length ? this.items[this.start + index] : undefined;
  }

  push(value: number): void {
    if (this.end === this.items.length) this.grow(1);
    this.items[this.end++] = value;
  }

  /** Makes room for `extra` more items, so that pushing them never grows the array. */
  reserve(extra: number): void {
    if (this.end + extra > this.items.length) this.grow(extra);
  }

  /** Drops the first `count` items. */
  dropFirst(count: number): void {
    this.start = Math.min(this.end, this.start + count);
    if (this.start === this.end) this.start = this.end = 0;
  }

  /** Drops the last `count` items (an append that was reserved but failed). */
  dropLast(count: number): void {
    this.end = Math.max(this.start, this.end - count);
  }

  slice(from: number, to: number): number[] {
    return Array.from(this.items.subarray(this.start + from, this.start + Math.min(to, this.length)));
  }

  /** Index of the first item >= value (items are ascending). */
  lowerBound(value: number): number {
    let low = 0;
    let high = this.length;
    while (low < high) {
      const middle = (low + high) >> 1;
      if ((this.items[this.start + middle] ?? 0) < value) low = middle + 1;
      else high = middle;
    }
    return low;
  }

  private grow(extra: number): void {
    const live = this.items.subarray(this.start, this.end);
    const next = new Float64Array(Math.max(8, live.length * 2, live.length + extra));
    next.set(live);
    this.items = next;
    this.end = live.length;
    this.start = 0;
  }
}
