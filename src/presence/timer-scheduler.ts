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
  /** The bound of the queueing order's numbers (`ORDER_BELOW`; lower in tests, to see them numbered again). */
  readonly orderBelow?: number;
}

/** Longest delay a Node timer takes; later jobs are re-checked when it fires. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Jobs are numbered in the order they are queued, in small integers (held in the job itself;
 * a larger number would be an object of its own, in every job): past this, the pending ones are
 * numbered again from 0, in their order.
 */
const ORDER_BELOW = 2 ** 30;

/** One key's job, which is also its entry in the heap while it is pending (one object per online device). */
interface Job {
  readonly key: string;
  state: 'pending' | 'ready' | 'running';
  /** Due time, epoch ms. */
  at: number;
  /** When it was (re)queued, in order: jobs due at the same time fire first come, first served. */
  order: number;
  /** A schedule() that arrived while the handler ran: fire again at this time (epoch ms) if the run ends the job. */
  again: number | null;
}

const before = (a: Job, b: Job): boolean => a.at < b.at || (a.at === b.at && a.order < b.order);

/** A binary min-heap of the pending jobs by due time, then queueing order. */
class DueHeap {
  private readonly items: Job[] = [];

  get length(): number {
    return this.items.length;
  }

  peek(): Job | undefined {
    return this.items[0];
  }

  push(job: Job): void {
    const items = this.items;
    items.push(job);
    let i = items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const p = items[parent] as Job;
      if (!before(job, p)) break;
      items[i] = p;
      i = parent;
    }
    items[i] = job;
  }

  pop(): Job | undefined {
    const items = this.items;
    const top = items[0];
    const last = items.pop();
    if (top === undefined || last === undefined || items.length === 0) return top;
    let i = 0;
    for (;;) {
      const left = 2 * i + 1;
      if (left >= items.length) break;
      const right = left + 1;
      const child = right < items.length && before(items[right] as Job, items[left] as Job) ? right : left;
      const c = items[child] as Job;
      if (!before(c, last)) break;
      items[i] = c;
      i = child;
    }
    items[i] = last;
    return top;
  }

  /** Sorted, the heap is still a heap: numbers its jobs 0, 1, ... in their order and says how many. */
  renumber(): number {
    this.items.sort((a, b) => (before(a, b) ? -1 : before(b, a) ? 1 : 0));
    this.items.forEach((job, i) => (job.order = i));
    return this.items.length;
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
  const ready: Job[] = [];
  const running = new Set<Promise<void>>();
  let handler: ExpiryHandler | null = null;
  let closed = false;
  let cancelTimer: (() => void) | null = null;
  let armedAt: number | null = null;
  const orderBelow = options.orderBelow ?? ORDER_BELOW;
  let order = 0;

  const disarm = (): void => {
    cancelTimer?.();
    cancelTimer = null;
    armedAt = null;
  };

  const arm = (): void => {
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

  const enqueue = (job: Job, at: number): void => {
    if (order >= orderBelow) order = heap.renumber();
    job.state = 'pending';
    job.at = at;
    job.order = order++;
    heap.push(job);
  };

  function wake(): void {
    cancelTimer = null;
    armedAt = null;
    const now = timers.now();
    for (let top = heap.peek(); top !== undefined && top.at <= now; top = heap.peek()) {
      heap.pop();
      top.state = 'ready';
      ready.push(top);
    }
    pump();
    arm();
  }

  function pump(): void {
    while (!closed && handler !== null && running.size < concurrency && ready.length > 0) {
      const job = ready.shift() as Job;
      const run = fire(handler, job);
      running.add(run);
      void run.finally(() => {
        running.delete(run);
        pump();
      });
    }
  }

  async function fire(handle: ExpiryHandler, job: Job): Promise<void> {
    job.state = 'running';
    job.again = null;
    let next: number | null;
    try {
      next = await handle(job.key);
    } catch (error) {
      options.onError?.(job.key, error);
      next = timers.now() + RETRY_AFTER_FAILURE_MS;
    }
    if (closed) return;
    const at = next ?? job.again;
    job.again = null;
    if (at === null) jobs.delete(job.key);
    else enqueue(job, at);
    arm();
  }

  return {
    async schedule(key, at) {
      if (closed) throw new Error('The expiry scheduler is closed');
      const job = jobs.get(key);
      if (job === undefined) {
        const created: Job = { key, state: 'pending', at, order: 0, again: null };
        jobs.set(key, created);
        enqueue(created, at);
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
