/**
 * One stream's entry in the in-memory index (log-index.ts): the positions of its events,
 * held in the entry itself in the smallest form that fits. Most streams have a few events
 * (a hub's device stream, a $maxAge metadata stream), and there are two or three per hub:
 *
 * - one position: the number itself, no array at all;
 * - up to FEW_POSITIONS: a plain array of exactly that length (V8 keeps it packed, 8 bytes
 *   an item; an append copies it, at most FEW_POSITIONS items);
 * - more: a PositionList, whose Float64Array grows by doubling, is sized once from a count
 *   (millions at open) and drops reclaimed events from the front for nothing. A stream that
 *   reclamation brings down to FEW_POSITIONS / 2 or fewer goes back to a plain array.
 *
 * Each stream had a PositionList of its own before: with its Float64Array and ArrayBuffer,
 * about 330 bytes for a stream of 1–4 events; this is 56 bytes for one position and 120–136
 * for 2–4 (besides the index Map's entry; bench/log-index-memory.ts).
 */
import { PositionList } from './position-list';

/** The most positions kept in a plain array. */
export const FEW_POSITIONS = 16;

/** No positions (never written to: every change makes a new array). */
const NONE: readonly number[] = [];

/** Zero, one or a few positions as this class keeps them. */
function few(positions: readonly number[]): number | readonly number[] {
  if (positions.length === 0) return NONE;
  return positions.length === 1 ? (positions[0] as number) : positions;
}

export class StreamIndex {
  /** Revision of the first position: above 0 once compaction reclaimed the stream's oldest events. */
  firstRevision = 0;
  /** How many of the positions are durable, hence visible to readers. */
  durableCount = 0;
  /** The positions (ascending), including appends reserved but not yet durable. */
  private positions: number | readonly number[] | PositionList = NONE;

  /** `name` is the one copy of the stream's name the index and the active segment's table share. */
  constructor(readonly name: string) {}

  /** The PositionList holding the positions when they are many, else null: an open pushes millions straight into it. */
  manyPositions(): PositionList | null {
    return this.positions instanceof PositionList ? this.positions : null;
  }

  /** How many positions (durable or reserved). */
  get length(): number {
    const positions = this.positions;
    return typeof positions === 'number' ? 1 : positions.length;
  }

  /** The `index`-th position (of revision firstRevision + index). */
  at(index: number): number | undefined {
    const positions = this.positions;
    if (positions instanceof PositionList) return positions.at(index);
    if (typeof positions === 'number') return index === 0 ? positions : undefined;
    return index >= 0 && index < positions.length ? positions[index] : undefined;
  }

  push(position: number): void {
    const positions = this.positions;
    if (positions instanceof PositionList) positions.push(position);
    else this.pushToFew(positions, position);
  }

  /** Makes room for `extra` more positions, so that pushing them never grows a list. */
  reserve(extra: number): void {
    const positions = this.positions;
    if (positions instanceof PositionList) positions.reserve(extra);
    else if (this.length + extra > FEW_POSITIONS) this.toList(this.length + extra);
  }

  /** Drops the first `count` positions (reclaimed, or older than a gap at open). */
  dropFirst(count: number): void {
    if (count <= 0) return;
    const positions = this.positions;
    if (positions instanceof PositionList) {
      positions.dropFirst(count);
      this.unlistIfFew(positions);
    } else if (typeof positions === 'number') this.positions = NONE;
    else this.positions = few(positions.slice(count));
  }

  /** Drops the last `count` positions (appends reserved whose write failed). */
  dropLast(count: number): void {
    if (count <= 0) return;
    const positions = this.positions;
    if (positions instanceof PositionList) {
      positions.dropLast(count);
      this.unlistIfFew(positions);
    } else if (typeof positions === 'number') this.positions = NONE;
    else this.positions = few(positions.slice(0, Math.max(0, positions.length - count)));
  }

  /** Positions `from` (included) to `to` (excluded), clamped to those there are. */
  slice(from: number, to: number): number[] {
    const start = Math.max(0, from);
    const end = Math.min(to, this.length);
    if (end <= start) return [];
    const positions = this.positions;
    if (positions instanceof PositionList) return positions.slice(start, end);
    return typeof positions === 'number' ? [positions] : positions.slice(start, end);
  }

  /** Index of the first position >= value. */
  lowerBound(value: number): number {
    const positions = this.positions;
    if (positions instanceof PositionList) return positions.lowerBound(value);
    if (typeof positions === 'number') return positions < value ? 1 : 0;
    let low = 0;
    while (low < positions.length && (positions[low] as number) < value) low++;
    return low;
  }

  private pushToFew(positions: number | readonly number[], position: number): void {
    if (typeof positions === 'number') this.positions = [positions, position];
    else if (positions.length === 0) this.positions = position;
    else if (positions.length < FEW_POSITIONS) this.positions = positions.concat(position);
    else this.toList(positions.length * 2).push(position);
  }

  /** Moves a few positions into a PositionList with room for `capacity`. */
  private toList(capacity: number): PositionList {
    const list = new PositionList(Math.max(capacity, FEW_POSITIONS * 2));
    const positions = this.positions;
    if (typeof positions === 'number') list.push(positions);
    else if (!(positions instanceof PositionList)) for (const position of positions) list.push(position);
    this.positions = list;
    return list;
  }

  private unlistIfFew(list: PositionList): void {
    // Array.from (in slice) leaves room to spare; a second slice copies them to exactly their length.
    if (list.length <= FEW_POSITIONS / 2) this.positions = few(list.slice(0, list.length).slice());
  }
}
