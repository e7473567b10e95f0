import { RETRY_AFTER_FAILURE_MS, type ExpiryHandler, type ExpiryScheduler } from './scheduler';

/**
 * The in-process expiry scheduler (embedded mode): jobs in a min-heap by due time, one
 * timer armed for the earliest, at most `concurrency` handlers running at once. Jobs live
 * only as long as the process: at start the expiry role schedules again every device the
 * event log says is online.
 */

/** The clock and timer the scheduler runs on: real ones in the service, a manual one in tests. */
export interface Timers {
  now(): number;
  /** Calls `fire` after `ms`; returns a function that cancels it. */
  after(ms: number, fire: () => void): () => void;
}

export const realTimers: Timers = {
  now: () => Date.now(),
  after(ms, fire) {
    const timer = setTimeout(fire, ms);
    // Pending expiries never keep a process alive on their own.
    timer.unref();
    return () => clearTimeout(timer);
  },
};

export interface TimerSchedulerOptions {
  readonly timers?: Timers;
  /** Handlers running at once (each one reads two streams and may append). */
  readonly concurrency?: number;
  /** Told of a handler's failure (the job fires again after a pause). */
  readonly onError?: (key: string, error: unknown) => void;
}

/** Longest delay a Node timer takes; later jobs are re-checked when it fires. */
const MAX_TIMER_MS = 2 ** 31 - 1;

interface Job {
  state: 'pending' | 'ready' | 'running';
  at: number;
  /** Bumped whenever the job gets a new due time: heap entries of an older one are stale. */
  seq: number;
  /** A schedule() that arrived while the handler ran: fire again at this time if the run ends the job. */
  again: number | null;
}

interface HeapEntry {
  readonly at: number;
  readonly key: string;
  readonly seq: number;
  /** Insertion order: jobs due at the same time fire first come, first served. */
  readonly order: number;
}

const before = (a: HeapEntry, b: HeapEntry): boolean => a.at < b.at || (a.at === b.at && a.order < b.order);

/** A binary min-heap by due time, then insertion order. */
class DueHeap {
  private readonly items: HeapEntry[] = [];

  get length(): number {
    return this.items.length;
  }

  peek(): HeapEntry | undefined {
    return this.items[0];
  }

  push(entry: HeapEntry): void {
    const items = this.items;
    items.push(entry);
    let i = items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const p = items[parent] as HeapEntry;
      if (!before(entry, p)) break;
      items[i] = p;
      i = parent;
    }
    items[i] = entry;
  }

  pop(): HeapEntry | undefined {
    const items = this.items;
    const top = items[0];
    const last = items.pop();
    if (top === undefined || last === undefined || items.length === 0) return top;
    let i = 0;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= items.length) break;
      const right = left + 1;
      const child = right < items.length && before(items[right] as HeapEntry, items[left] as HeapEntry) ? right : left;
      const c = items[child] as HeapEntry;
      if (!before(c, last)) break;
      items[i] = c;
      i = child;
    }
    items[i] = last;
    return top;
  }
}

/** The in-process scheduler, which can also say what it holds. */
export interface TimerExpiryScheduler extends ExpiryScheduler {
  /**
   * Every job with its due time (epoch ms), by key. These are not kept in a start snapshot:
   * the expiry role derives them from the devices read model, which the snapshot restores.
   */
  deadlines(): ReadonlyMap<string, number>;
}

export function createTimerExpiryScheduler(options: TimerSchedulerOptions = {}): TimerExpiryScheduler {
  const timers = options.timers ?? realTimers;
  const concurrency = options.concurrency ?? 64;
  const jobs = new Map<string, Job>();
  const heap = new DueHeap();
  const ready: string[] = [];
  const running = new Set<Promise<void>>();
  let handler: ExpiryHandler | null = null;
  let closed = false;
  let cancelTimer: (() => void) | null = null;
  let armedAt: number | null = null;
  let order = 0;

  const isCurrent = (entry: HeapEntry): boolean => {
    const job = jobs.get(entry.key);
    return job !== undefined && job.state === 'pending' && job.seq === entry.seq;
  };

  const disarm = (): void => {
    cancelTimer?.();
    cancelTimer = null;
    armedAt = null;
  };

  const arm = (): void => {
    while (heap.length > 0 && !isCurrent(heap.peek() as HeapEntry)) heap.pop();
    const next = heap.peek();
    if (closed || handler === null || next === undefined) {
      disarm();
      return;
    }
    if (armedAt === next.at) return;
    disarm();
    armedAt = next.at;
    cancelTimer = timers.after(Math.min(MAX_TIMER_MS, Math.max(0, next.at - timers.now())), wake);
  };

  const enqueue = (key: string, job: Job, at: number): void => {
    job.state = 'pending';
    job.at = at;
    job.seq++;
    heap.push({ at, key, seq: job.seq, order: order++ });
  };

  function wake(): void {
    cancelTimer = null;
    armedAt = null;
    const now = timers.now();
    for (let top = heap.peek(); top !== undefined && top.at <= now; top = heap.peek()) {
      heap.pop();
      if (!isCurrent(top)) continue;
      (jobs.get(top.key) as Job).state = 'ready';
      ready.push(top.key);
    }
    pump();
    arm();
  }

  function pump(): void {
    while (!closed && handler !== null && running.size < concurrency && ready.length > 0) {
      const key = ready.shift() as string;
      const job = jobs.get(key);
      if (job === undefined || job.state !== 'ready') continue;
      const run = fire(handler, key, job);
      running.add(run);
      void run.finally(() => {
        running.delete(run);
        pump();
      });
    }
  }

  async function fire(handle: ExpiryHandler, key: string, job: Job): Promise<void> {
    job.state = 'running';
    job.again = null;
    let next: number | null;
    try {
      next = await handle(key);
    } catch (error) {
      options.onError?.(key, error);
      next = timers.now() + RETRY_AFTER_FAILURE_MS;
    }
    if (closed) return;
    const at = next ?? job.again;
    if (at === null) jobs.delete(key);
    else enqueue(key, job, at);
    arm();
  }

  return {
    async schedule(key, at) {
      if (closed) throw new Error('The expiry scheduler is closed');
      const job = jobs.get(key);
      if (job === undefined) {
        const created: Job = { state: 'pending', at, seq: 0, again: null };
        jobs.set(key, created);
        enqueue(key, created, at);
        arm();
      } else if (job.state === 'running') {
        job.again = job.again === null ? at : Math.min(job.again, at);
      }
    },
    async start(h) {
      if (handler !== null) throw new Error('The expiry scheduler is already started');
      handler = h;
      wake();
    },
    async size() {
      return jobs.size;
    },
    deadlines: () => new Map([...jobs].map(([key, job]) => [key, job.at])),
    async close() {
      closed = true;
      disarm();
      await Promise.allSettled([...running]);
    },
  };
}
