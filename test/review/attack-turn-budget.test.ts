import { createTurns } from '../../src/runtime/turns';
import { nextTurn } from '../support/event-loop';
import { turnCounter, untilTurns } from '../support/turn-counter';

/**
 * The turns' budget of time (src/runtime/turns.ts) from outside: jobs longer than the budget,
 * overdue jobs behind them, a clock of the test's own that runs back, jobs that run jobs, jobs
 * from microtasks, thousands of jobs. Every clock here is the test's: no figure depends on how
 * busy the machine is.
 */

const until = (check: () => boolean): Promise<void> => untilTurns(check, 20_000);

/** How many jobs ran in each turn that ran any, in order. */
function perTurn(turnOfEachJob: readonly number[]): number[] {
  const counts = new Map<number, number>();
  for (const turn of turnOfEachJob) counts.set(turn, (counts.get(turn) ?? 0) + 1);
  return [...counts.values()];
}

test('jobs longer than the budget, one a turn, do not grow the count: the overdue ones behind them are not let go hundreds at once', async () => {
  const counter = turnCounter();
  let clock = 0;
  // The tunnel's settings: turns aimed at 40 ms, a budget of 10, overdue at 5 s.
  const turns = createTurns({ targetTurnMs: 40, maxWaitMs: 5000, now: () => clock });
  const ran: number[] = [];
  // Each job takes 20 ms of the clock: twice the budget, half the target turn.
  const job = (): void => {
    clock += 20;
    ran.push(counter.current());
  };
  try {
    for (let i = 0; i < 600; i++) turns.run(job);
    expect(ran).toHaveLength(1);
    await until(() => ran.length === 600);
    const counts = perTurn(ran);
    // One a turn while none is overdue (the budget ends each turn after its first job)...
    expect(counts.slice(0, 200)).toEqual(Array(200).fill(1));
    // ...and the overdue ones go at most as many again as the count, which those turns of one
    // job each (the budget's doing, not the count's) gave no reason to raise: 32 at the start.
    expect(Math.max(...counts)).toBeLessThanOrEqual(1 + 32);
    expect(turns.stats().overdue).toBeGreaterThan(0);
  } finally {
    counter.stop();
  }
});

test('every job still runs, first in first out, when each takes longer than the budget; overdue ones go at maxWaitMs', async () => {
  let clock = 0;
  const turns = createTurns({ initialPerTurn: 4, minPerTurn: 4, targetTurnMs: 40, budgetMs: 10, maxWaitMs: 1000, now: () => clock });
  const ran: number[] = [];
  for (let i = 0; i < 100; i++)
    turns.run(() => {
      clock += 15;
      ran.push(i);
    });
  expect(ran).toEqual([0]);
  // 99 waiting since 15 ms: a turn each, and from 1,015 ms on the overdue besides.
  await until(() => ran.length === 100);
  expect(ran).toEqual([...Array(100).keys()]);
  expect(turns.stats()).toMatchObject({ waiting: 0, waited: 99 });
  expect(turns.stats().overdue).toBeGreaterThan(0);
});

test('a clock that runs back during a job gives the turn no extra budget', async () => {
  let clock = 1000;
  const turns = createTurns({ initialPerTurn: 100, maxPerTurn: 100, targetTurnMs: 60_000, budgetMs: 10, now: () => clock });
  let ran = 0;
  // The first job takes 4 ms, then the clock is set back 500 ms (an injected clock stepped back).
  turns.run(() => {
    clock += 4;
    ran++;
    clock -= 500;
  });
  // Then jobs of 4 ms each: the first counted as nothing, the budget of 10 lets three more run in
  // this turn (4, 8, 12), not the 500 ms the clock went back.
  for (let i = 0; i < 50; i++)
    turns.run(() => {
      clock += 4;
      ran++;
    });
  expect(ran).toBe(4);
  await until(() => ran === 51);
});

test('a job run at once from within another is timed once: the turn\'s budget is what the jobs took', () => {
  let clock = 0;
  const turns = createTurns({ initialPerTurn: 100, targetTurnMs: 60_000, budgetMs: 6, now: () => clock });
  const ran: string[] = [];
  // A takes 2 ms of its own and runs B (3 ms) at once, from within it: 5 ms in all.
  turns.run(() => {
    clock += 2;
    ran.push('a');
    turns.run(() => {
      clock += 3;
      ran.push('b');
    });
  });
  expect(ran).toEqual(['a', 'b']);
  // 5 ms of the 6 spent: C still runs at once.
  turns.run(() => ran.push('c'));
  expect(ran).toEqual(['a', 'b', 'c']);
});

test('thousands of jobs of mixed lengths: each once, in order, no turn past the budget by more than its last job', async () => {
  const counter = turnCounter();
  let clock = 0;
  const turns = createTurns({ targetTurnMs: 40, maxWaitMs: 1e9, now: () => clock });
  const ran: Array<{ job: number; turn: number; took: number }> = [];
  try {
    for (let i = 0; i < 5000; i++) {
      // 0 to 3 ms each, deterministically.
      const took = (i * 7) % 4;
      turns.run(() => {
        clock += took;
        ran.push({ job: i, turn: counter.current(), took });
      });
    }
    await until(() => ran.length === 5000);
    expect(ran.map((r) => r.job)).toEqual([...Array(5000).keys()]);
    const spent = new Map<number, number[]>();
    for (const r of ran) spent.set(r.turn, [...(spent.get(r.turn) ?? []), r.took]);
    for (const took of spent.values()) {
      const before = took.slice(0, -1).reduce((a, b) => a + b, 0);
      // The budget (10 ms) was not spent before the turn's last job began.
      expect(before).toBeLessThan(10);
    }
  } finally {
    counter.stop();
  }
});

test('jobs queued from microtasks of running jobs all run, in the order they were queued', async () => {
  let clock = 0;
  const turns = createTurns({ initialPerTurn: 8, minPerTurn: 8, targetTurnMs: 40, now: () => clock });
  const ran: string[] = [];
  for (let i = 0; i < 30; i++)
    turns.run(() => {
      clock += 1;
      ran.push(`job ${i}`);
      void Promise.resolve().then(() =>
        turns.run(() => {
          clock += 1;
          ran.push(`follow ${i}`);
        }),
      );
    });
  await until(() => ran.length === 60);
  const jobs = ran.filter((r) => r.startsWith('job'));
  const follows = ran.filter((r) => r.startsWith('follow'));
  expect(jobs).toEqual([...Array(30).keys()].map((i) => `job ${i}`));
  expect(follows).toEqual([...Array(30).keys()].map((i) => `follow ${i}`));
  expect(turns.stats().waiting).toBe(0);
});

test('after a long quiet spell a burst is held to the budget in its first turn, however high the count grew', async () => {
  let clock = 0;
  const turns = createTurns({ initialPerTurn: 1024, maxPerTurn: 1024, targetTurnMs: 40, now: () => clock });
  clock += 3_600_000;
  let ran = 0;
  for (let i = 0; i < 500; i++)
    turns.run(() => {
      clock += 1;
      ran++;
    });
  // A quarter of 40 ms: ten jobs of 1 ms, in the caller's turn.
  expect(ran).toBe(10);
  await nextTurn();
  expect(ran).toBe(20);
  await until(() => ran === 500);
});

test('two Turns share no budget: one spent does not hold the other, and neither starves', async () => {
  let clock = 0;
  const hubs = createTurns({ targetTurnMs: 40, now: () => clock });
  const upgrades = createTurns({ targetTurnMs: 40, now: () => clock });
  const order: string[] = [];
  for (let i = 0; i < 200; i++)
    hubs.run(() => {
      clock += 1;
      order.push('hub');
    });
  let upgraded = false;
  upgrades.run(() => {
    clock += 1;
    upgraded = true;
  });
  // The upgrade ran at once although the other's budget was spent.
  expect(upgraded).toBe(true);
  for (let i = 0; i < 200; i++)
    upgrades.run(() => {
      clock += 1;
      order.push('upgrade');
    });
  await until(() => order.length === 400);
  // Interleaved turn by turn: the last hub job is not after every upgrade, nor the reverse.
  expect(order.lastIndexOf('hub')).toBeGreaterThan(order.indexOf('upgrade'));
  expect(order.lastIndexOf('upgrade')).toBeGreaterThan(order.indexOf('hub'));
});
