/**
 * The rate-limit counters of embedded mode: one fixed window per tier and key, in a Map.
 *
 * A window starts at a key's first point and lasts the tier's duration; the points in it are
 * counted, and the next past the limit is refused until the window ends. (The same rule as the
 * Redis counters of distributed mode, `rate-limiter-flexible`'s, so both modes answer alike.)
 *
 * Why not `rate-limiter-flexible`'s memory store: it gives every key a record and a timer of
 * its own (`setTimeout` per window, to delete it) under a key string it builds from the tier's
 * prefix. Every connected hub has a heartbeat window open at all times, so that was about
 * 400 bytes and a timer per hub (bench/README.md, "memory per idle hub"). Here a window is one
 * small object under the caller's own key, and ended windows go in one sweep a few seconds
 * apart (or when their key is next counted).
 *
 * Windows run on a monotonic clock: a wall clock stepped back does not stretch them.
 */

/**
 * A key's window: its points so far, and when it ends (whole ms on the monotonic clock after the
 * windows' `base`: a small integer, kept in the window itself, where a fractional time would be a
 * number object of its own for every key).
 */
class Window {
  constructor(
    public points: number,
    public endsAt: number,
  ) {}
}

export interface Counted {
  /** The points in the window, this one included. */
  readonly points: number;
  /** Milliseconds until the window ends. */
  readonly msLeft: number;
}

/** How often ended windows are let go (at most: a sweep runs only while there are windows). */
export const SWEEP_EVERY_MS = 10_000;

export type MonotonicClock = () => number;

const monotonic: MonotonicClock = () => performance.now();

/** Past this many ms after `base`, the windows' times move to a later base (they stay small integers). */
export const REBASE_AFTER_MS = 2 ** 30;

export class MemoryWindows {
  private readonly windows = new Map<string, Window>();
  private sweeper: NodeJS.Timeout | null = null;
  private base: number;

  constructor(
    private readonly durationMs: number,
    private readonly clock: MonotonicClock = monotonic,
    private readonly rebaseAfterMs = REBASE_AFTER_MS,
  ) {
    this.base = Math.floor(clock());
  }

  /** Whole ms after `base` (the clock's fraction of a millisecond dropped). */
  private now(): number {
    const now = Math.floor(this.clock()) - this.base;
    if (now < this.rebaseAfterMs) return now;
    this.base += now;
    for (const window of this.windows.values()) window.endsAt -= now;
    return 0;
  }

  /** Counts one point of `key`. */
  consume(key: string): Counted {
    const now = this.now();
    let window = this.windows.get(key);
    if (window === undefined || window.endsAt <= now) {
      window = new Window(1, now + this.durationMs);
      this.windows.set(key, window);
      this.sweepLater();
    } else {
      window.points += 1;
    }
    return { points: window.points, msLeft: window.endsAt - now };
  }

  /** Gives one point of `key`'s window back; nothing when it has no window open (nothing was counted). */
  refund(key: string): void {
    const window = this.windows.get(key);
    if (window === undefined || window.endsAt <= this.now()) return;
    if (window.points > 0) window.points -= 1;
  }

  /** Open and ended windows not yet let go (for tests and the memory bench). */
  get size(): number {
    return this.windows.size;
  }

  /** Lets every ended window go. */
  sweep(): void {
    const now = this.now();
    for (const [key, window] of this.windows) if (window.endsAt <= now) this.windows.delete(key);
  }

  /** One timer for every window, while there are any: it does not keep the process alive. */
  private sweepLater(): void {
    if (this.sweeper !== null) return;
    this.sweeper = setTimeout(() => {
      this.sweeper = null;
      this.sweep();
      if (this.windows.size > 0) this.sweepLater();
    }, SWEEP_EVERY_MS);
    this.sweeper.unref();
  }

  /** Stops the sweep (the windows stay). */
  close(): void {
    if (this.sweeper !== null) clearTimeout(this.sweeper);
    this.sweeper = null;
  }
}
