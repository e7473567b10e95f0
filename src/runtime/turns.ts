/**
 * Work taken a few pieces a turn of the event loop, so that what else is waiting (a person's
 * request) is read between them.
 *
 * Node serves, in each turn of its event loop, every socket that has something to read, in the
 * order they became readable: up to 48 batches of 1,024 before timers and `setImmediate`
 * callbacks get their turn. When thousands of hubs come back at once, each sends its tunnel
 * handshake as soon as its WebSocket is open, and every one of them is authenticated, folded and
 * answered (or refused) in the same turn, ahead of a person's request that became readable after
 * them. The storm bench measured that wait (bench/README.md, "Handshakes in turns"): an app's
 * `GET /devices` answered 1.9–2.5 s after it was sent by a process that took under 30 ms to
 * serve it once read, in turns of the loop that ran 5.6–6.9 s without a timer.
 *
 * `run(job)` runs the job at once when nothing is waiting and fewer than `perTurn` jobs ran in
 * this turn; else it waits its turn, first in first out, and the next turns (`setImmediate`:
 * after the sockets read in this one) run up to `perTurn` of them each. `perTurn` follows how
 * long the turns take: down a quarter after a turn longer than `targetTurnMs`, up a sixteenth
 * after a shorter one (not one that `budgetMs` ended: its length says nothing of the count), so
 * a fast machine runs more of them a turn and a busy one fewer. A job that has waited
 * `maxWaitMs` runs at the next turn besides the count (as many again as the count at most:
 * behind a longer backlog of them, it waits longer).
 *
 * And a turn's jobs stop at `budgetMs` of their own time (each one timed, its synchronous part),
 * whatever the count: the count follows the turns after the fact, and after a quiet spell it
 * has grown, so a crowd that comes back at once (a wave of upgrades read in one poll) would
 * all run in the turn it arrived in.
 */

export interface TurnsOptions {
  /** Jobs run in the first turn of a burst (default 32). */
  readonly initialPerTurn?: number;
  /** Never fewer than this a turn (default 8): the work waiting always moves on. */
  readonly minPerTurn?: number;
  /** Never more than this a turn (default 1,024). */
  readonly maxPerTurn?: number;
  /** A turn of the event loop longer than this takes the count down by a quarter (default 80 ms). */
  readonly targetTurnMs?: number;
  /** A job that has waited this long runs at the next turn, besides the count (default 10 s; as many again as the count, at most). */
  readonly maxWaitMs?: number;
  /** A turn runs no more jobs once they took this long in it (default a quarter of `targetTurnMs`); at least one a turn. */
  readonly budgetMs?: number;
  /** The clock, ms (default `performance.now()`). */
  readonly now?: () => number;
}

export interface TurnsStats {
  /** Jobs waiting for their turn now. */
  readonly waiting: number;
  /** Jobs that may run in a turn now. */
  readonly perTurn: number;
  /** Jobs that waited for a later turn, since the start. */
  readonly waited: number;
  /** Of those, run because they had waited `maxWaitMs`. */
  readonly overdue: number;
}

export interface Turns {
  readonly run: (job: () => void) => void;
  readonly stats: () => TurnsStats;
}

interface Waiting {
  readonly job: () => void;
  readonly since: number;
}

/** A first-in first-out queue without `Array.shift`'s copying. */
class Queue {
  private items: Array<Waiting | undefined> = [];
  private head = 0;

  get length(): number {
    return this.items.length - this.head;
  }

  push(item: Waiting): void {
    this.items.push(item);
  }

  peek(): Waiting | undefined {
    return this.items[this.head];
  }

  shift(): Waiting | undefined {
    const item = this.items[this.head];
    this.items[this.head] = undefined;
    this.head++;
    if (this.head >= 1024 && this.head * 2 >= this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return item;
  }
}

export function createTurns(options: TurnsOptions = {}): Turns {
  const now = options.now ?? (() => performance.now());
  // At least one a turn: a count of none would never run a job again, and spin a turn each time.
  const maxPerTurn = Math.max(1, options.maxPerTurn ?? 1024);
  const minPerTurn = Math.max(1, Math.min(maxPerTurn, options.minPerTurn ?? 8));
  const targetTurnMs = options.targetTurnMs ?? 80;
  const maxWaitMs = options.maxWaitMs ?? 10_000;
  const budgetMs = options.budgetMs ?? targetTurnMs / 4;
  let perTurn = Math.max(minPerTurn, Math.min(maxPerTurn, options.initialPerTurn ?? 32));
  let ranThisTurn = 0;
  // The time this turn's jobs took (their synchronous part).
  let spentThisTurn = 0;
  // Whether the last turn stopped at the budget with jobs left below the count: its length says nothing of the count.
  let stoppedByBudget = false;
  // Jobs running now, one within another (a job's `run` at once): only the outermost is timed.
  let running = 0;
  // When the last turn with jobs waiting began: the next one measures the turn between them.
  let turnStartedAt: number | null = null;
  let scheduled = false;
  let waited = 0;
  let overdue = 0;
  const queue = new Queue();

  const turn = (): void => {
    scheduled = false;
    const t = now();
    // A job that throws ends this turn as any callback's exception would; the next still comes.
    if (queue.length > 0) schedule();
    if (turnStartedAt !== null) {
      if (t - turnStartedAt > targetTurnMs) perTurn = Math.max(minPerTurn, Math.floor(perTurn * 0.75));
      // Not up after a turn the budget ended: else the overdue jobs, as many as the count, would all go in one turn.
      else if (!stoppedByBudget) perTurn = Math.min(maxPerTurn, perTurn + Math.ceil(perTurn / 16));
    }
    ranThisTurn = 0;
    spentThisTurn = 0;
    stoppedByBudget = false;
    while (queue.length > 0 && ranThisTurn < perTurn && (ranThisTurn === 0 || spentThisTurn < budgetMs)) {
      ranThisTurn++;
      timed((queue.shift() as Waiting).job);
    }
    stoppedByBudget = queue.length > 0 && ranThisTurn < perTurn;
    // Those that have waited too long, as many again at most: a backlog is not let go at once.
    for (let head = queue.peek(), extra = 0; head !== undefined && extra < perTurn && t - head.since >= maxWaitMs; head = queue.peek(), extra++) {
      overdue++;
      (queue.shift() as Waiting).job();
    }
    if (queue.length > 0) {
      turnStartedAt = t;
    } else {
      // The burst is over: the next one starts from the count this one reached.
      turnStartedAt = null;
    }
  };

  const timed = (job: () => void): void => {
    if (running > 0) {
      job();
      return;
    }
    const start = now();
    running++;
    try {
      job();
    } finally {
      running--;
      // A clock that ran back (an injected one) counts nothing.
      spentThisTurn += Math.max(0, now() - start);
    }
  };

  const schedule = (): void => {
    if (scheduled) return;
    scheduled = true;
    setImmediate(turn);
  };

  return {
    run(job) {
      if (queue.length === 0 && ranThisTurn < perTurn && spentThisTurn < budgetMs) {
        ranThisTurn++;
        // The count and the budget are per turn: the next turn starts them again.
        schedule();
        timed(job);
        return;
      }
      waited++;
      queue.push({ job, since: now() });
      schedule();
    },
    stats: () => ({ waiting: queue.length, perTurn, waited, overdue }),
  };
}
