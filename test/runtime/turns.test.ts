import { createTurns } from '../../src/runtime/turns';
import { nextTurn } from '../support/event-loop';
import { turnCounter, untilTurns as until } from '../support/turn-counter';


describe('createTurns', () => {
  test('with nothing waiting a job runs at once, in the caller', () => {
    const turns = createTurns();
    let ran = false;
    turns.run(() => (ran = true));
    expect(ran).toBe(true);
    expect(turns.stats()).toMatchObject({ waiting: 0, waited: 0 });
  });

  test('a burst runs a few a turn, first in first out, every job once', async () => {
    const counter = turnCounter();
    const turns = createTurns({ initialPerTurn: 4, minPerTurn: 4, targetTurnMs: 60_000 });
    const ran: Array<{ job: number; turn: number }> = [];
    for (let i = 0; i < 100; i++) turns.run(() => ran.push({ job: i, turn: counter.current() }));
    try {
      // The first four in the caller's turn, the rest later.
      expect(ran.map((r) => r.job)).toEqual([0, 1, 2, 3]);
      expect(turns.stats().waiting).toBe(96);
      await until(() => ran.length === 100);
      expect(ran.map((r) => r.job)).toEqual([...Array(100).keys()]);
      const perTurn = new Map<number, number>();
      for (const r of ran) perTurn.set(r.turn, (perTurn.get(r.turn) ?? 0) + 1);
      // Four in the caller's turn and four in the first turn after it; then each short turn adds a sixteenth (at least one).
      expect([...perTurn.values()].slice(0, 6)).toEqual([4, 4, 5, 6, 7, 8]);
      expect(turns.stats()).toMatchObject({ waiting: 0, waited: 96, overdue: 0 });
    } finally {
      counter.stop();
    }
  });

  test('after a turn longer than the target the count goes down by a quarter, never below the least', async () => {
    const turns = createTurns({ initialPerTurn: 64, minPerTurn: 8, targetTurnMs: 5, budgetMs: Infinity });
    let ran = 0;
    // Each job is 1 ms of work: 64 of them make a 64 ms turn.
    const job = (): void => {
      const until = performance.now() + 1;
      while (performance.now() < until) {
        /* a handshake's work */
      }
      ran++;
    };
    for (let i = 0; i < 300; i++) turns.run(job);
    const seen: number[] = [];
    while (ran < 300) {
      await nextTurn();
      seen.push(turns.stats().perTurn);
    }
    expect(seen[1]).toBe(48);
    expect(seen[2]).toBe(36);
    expect(Math.min(...seen)).toBe(8);
  });

  test('a turn runs no more jobs once they took budgetMs, whatever the count: at once and from the queue', async () => {
    const counter = turnCounter();
    // Each job takes 1 ms of a clock of the test's own (no other process's load in the figures).
    let clock = 0;
    // A count that allows a thousand a turn (grown over a quiet spell), a budget of 5 ms.
    const turns = createTurns({ initialPerTurn: 1000, maxPerTurn: 1000, targetTurnMs: 60_000, budgetMs: 5, now: () => clock });
    const ran: number[] = [];
    const job = (): void => {
      clock += 1;
      ran.push(counter.current());
    };
    try {
      // A crowd read in one poll: the first five run in the caller's turn, the others wait.
      for (let i = 0; i < 60; i++) turns.run(job);
      expect(ran).toHaveLength(5);
      expect(turns.stats().waiting).toBe(55);
      await until(() => ran.length === 60);
      const perTurn = new Map<number, number>();
      for (const turn of ran) perTurn.set(turn, (perTurn.get(turn) ?? 0) + 1);
      expect([...perTurn.values()]).toEqual(Array(12).fill(5));
      // At least one a turn, whatever one job takes.
      const slow = createTurns({ budgetMs: 0.5, now: () => clock });
      let slowRan = 0;
      for (let i = 0; i < 3; i++)
        slow.run(() => {
          clock += 1;
          slowRan++;
        });
      expect(slowRan).toBe(1);
      await nextTurn();
      expect(slowRan).toBe(2);
      await until(() => slowRan === 3);
    } finally {
      counter.stop();
    }
  });

  test('a job that throws still counts its time, and the turns go on', async () => {
    let clock = 0;
    const turns = createTurns({ initialPerTurn: 100, targetTurnMs: 60_000, budgetMs: 10, now: () => clock });
    expect(() =>
      turns.run(() => {
        clock += 20;
        throw new Error('a bad job');
      }),
    ).toThrow('a bad job');
    // The budget is spent: the next job waits for the next turn.
    let ran = false;
    turns.run(() => (ran = true));
    expect(ran).toBe(false);
    await until(() => ran);
  });

  test('a job that has waited maxWaitMs runs at the next turn besides the count, as many again at most', async () => {
    let clock = 0;
    const turns = createTurns({ initialPerTurn: 2, minPerTurn: 2, maxPerTurn: 2, targetTurnMs: 60_000, maxWaitMs: 1000, now: () => clock });
    let ran = 0;
    for (let i = 0; i < 40; i++) turns.run(() => ran++);
    expect(ran).toBe(2);
    await nextTurn();
    expect(ran).toBe(4);
    clock += 1000;
    await nextTurn();
    // Two in their turn, and two of those overdue.
    expect(ran).toBe(8);
    expect(turns.stats().overdue).toBe(2);
    await until(() => ran === 40);
    expect(turns.stats().waiting).toBe(0);
  });
});
