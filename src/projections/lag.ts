import type { GlobalPosition } from '../infra/eventstore/port';
import { comparePositions } from '../infra/eventstore/port';

/**
 * Projector lag as this process sees it (decisions §8): the events it appended that the
 * projections have not applied yet, and how long the oldest of them has waited. Each API
 * process counts its own appends, so the sum over processes is the whole lag, and a
 * process that appends nothing reports none.
 */
export interface LagTracker {
  /** An append of `count` events ending at `position`, acknowledged at `at` (ms). */
  appended(position: GlobalPosition, count: number, at?: number): void;
  /** The lag now. */
  lag(now?: number): { readonly events: number; readonly ms: number };
}

interface Pending {
  position: GlobalPosition;
  count: number;
  readonly at: number;
}

/**
 * Beyond this many pending appends (the projections stopped for long), new ones are merged
 * into the last entry: counts stay exact, only the age of merged appends is the oldest's.
 */
const MAX_PENDING = 100_000;

/** `applied`: the position the projections have reached (null: none yet). */
export function createLagTracker(applied: () => GlobalPosition | null): LagTracker {
  // Ordered by position: appends are acknowledged in position order, or close to it.
  const pending: Pending[] = [];
  let head = 0;
  let events = 0;

  // Called on every append too, so that only unapplied appends are ever held.
  const dropApplied = (): void => {
    const reached = applied();
    if (reached === null) return;
    while (head < pending.length) {
      const first = pending[head] as Pending;
      if (comparePositions(first.position, reached) > 0) break;
      events -= first.count;
      head++;
    }
    // Compact once the consumed prefix is most of the array.
    if (head > 1024 && head * 2 > pending.length) {
      pending.splice(0, head);
      head = 0;
    }
  };

  return {
    appended(position, count, at = Date.now()) {
      dropApplied();
      events += count;
      const last = pending.length > head ? (pending[pending.length - 1] as Pending) : null;
      if (last !== null && (pending.length - head >= MAX_PENDING || comparePositions(position, last.position) < 0)) {
        // Out of order (concurrent appends acknowledged late) or over the cap: count it with the last.
        if (comparePositions(position, last.position) > 0) last.position = position;
        last.count += count;
        return;
      }
      pending.push({ position, count, at });
    },
    lag(now = Date.now()) {
      dropApplied();
      const oldest = pending[head];
      return { events, ms: oldest === undefined ? 0 : Math.max(0, now - oldest.at) };
    },
  };
}
