import type { Timers } from '../../clients/hub/src/timers';

/**
 * Timers for the client tests: real timers on a clock that runs `factor` times faster than
 * the wall clock (a minute of the client's time passes in 60 / factor seconds), and a record
 * of every delay the client asked for, in the client's own milliseconds.
 */
export class ScaledTimers implements Timers {
  readonly asked: number[] = [];
  private readonly t0 = Date.now();
  private readonly handles = new Set<NodeJS.Timeout>();

  constructor(private readonly factor = 1) {}

  now(): number {
    return this.t0 + (Date.now() - this.t0) * this.factor;
  }

  after(ms: number, fire: () => void): () => void {
    this.asked.push(ms);
    const handle = setTimeout(() => {
      this.handles.delete(handle);
      fire();
    }, Math.max(0, ms / this.factor));
    this.handles.add(handle);
    return () => {
      clearTimeout(handle);
      this.handles.delete(handle);
    };
  }

  /** Cancels whatever is still armed (after a test). */
  clear(): void {
    for (const handle of this.handles) clearTimeout(handle);
    this.handles.clear();
  }
}

/** A fixed sequence of "random" numbers, repeated. */
export function sequence(...values: number[]): () => number {
  let i = 0;
  return () => values[i++ % values.length] ?? 0.5;
}

/** Resolves with the first value `check` accepts, polling every 20 ms up to `timeoutMs`. */
export async function eventually<T>(check: () => T | undefined | false, timeoutMs = 10_000, what = 'condition'): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const value = check();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > until) throw new Error(`${what} did not hold within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
