import type { Timers } from '../../src/presence/timer-scheduler';

/** Lets pending promise callbacks (and what they start) run to their next real wait. */
export async function settle(rounds = 5): Promise<void> {
  for (let i = 0; i < rounds; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

interface Pending {
  readonly at: number;
  readonly fire: () => void;
  cancelled: boolean;
}

/** A clock that only moves when told to, firing its timers in time order on the way. */
export class ManualTimers implements Timers {
  private time: number;
  private pending: Pending[] = [];

  constructor(start = Date.parse('2026-11-21T12:00:00.000Z')) {
    this.time = start;
  }

  now(): number {
    return this.time;
  }

  after(ms: number, fire: () => void): () => void {
    const entry: Pending = { at: this.time + Math.max(0, ms), fire, cancelled: false };
    this.pending.push(entry);
    return () => {
      entry.cancelled = true;
    };
  }

  /** Timers armed now (not cancelled, not fired). */
  armed(): number {
    return this.pending.filter((p) => !p.cancelled).length;
  }

  /** Moves the clock `ms` forward, firing every timer that comes due (and those they arm) in order. */
  async advance(ms: number): Promise<void> {
    const target = this.time + ms;
    for (;;) {
      await settle();
      this.pending = this.pending.filter((p) => !p.cancelled);
      const due = this.pending.filter((p) => p.at <= target).sort((a, b) => a.at - b.at)[0];
      if (due === undefined) break;
      this.pending = this.pending.filter((p) => p !== due);
      this.time = Math.max(this.time, due.at);
      due.fire();
    }
    this.time = target;
    await settle();
  }
}
