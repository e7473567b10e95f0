import type { GlobalPosition } from '../../src/infra/eventstore/port';
import { createLagTracker } from '../../src/projections/lag';

const at = (commit: number): GlobalPosition => ({ commit: BigInt(commit), prepare: BigInt(commit) });

/** A tracker and the projections' position it reads, set by the test. */
function tracker(): { lag: ReturnType<typeof createLagTracker>; applyUpTo: (position: GlobalPosition | null) => void } {
  let applied: GlobalPosition | null = null;
  return {
    lag: createLagTracker(() => applied),
    applyUpTo: (position) => {
      applied = position;
    },
  };
}

describe('projector lag as one process sees it', () => {
  test('appended events count until the projections pass them; the age is the oldest waiting', () => {
    const { lag, applyUpTo } = tracker();
    expect(lag.lag(1000)).toEqual({ events: 0, ms: 0 });
    lag.appended(at(10), 2, 1000);
    lag.appended(at(20), 1, 1500);
    lag.appended(at(30), 3, 1600);
    expect(lag.lag(2000)).toEqual({ events: 6, ms: 1000 });
    applyUpTo(at(9));
    expect(lag.lag(2000)).toEqual({ events: 6, ms: 1000 });
    applyUpTo(at(10));
    expect(lag.lag(2000)).toEqual({ events: 4, ms: 500 });
    applyUpTo(at(25));
    expect(lag.lag(2100)).toEqual({ events: 3, ms: 500 });
    applyUpTo(at(30));
    expect(lag.lag(2100)).toEqual({ events: 0, ms: 0 });
  });

  test('an append acknowledged out of order counts until the later one is applied', () => {
    const { lag, applyUpTo } = tracker();
    lag.appended(at(20), 1, 1000);
    lag.appended(at(10), 1, 1100);
    applyUpTo(at(10));
    expect(lag.lag(1200)).toEqual({ events: 2, ms: 200 });
    applyUpTo(at(20));
    expect(lag.lag(1200)).toEqual({ events: 0, ms: 0 });
  });

  test('an append the projections already passed is no lag', () => {
    const { lag, applyUpTo } = tracker();
    applyUpTo(at(7));
    lag.appended(at(5), 1, 1000);
    expect(lag.lag(1000)).toEqual({ events: 0, ms: 0 });
  });

  test('appends are dropped as the projections pass them, between two readings too', () => {
    const { lag, applyUpTo } = tracker();
    for (let i = 1; i <= 1000; i++) {
      lag.appended(at(i), 1, i);
      applyUpTo(at(i));
    }
    lag.appended(at(1001), 1, 5000);
    expect(lag.lag(6000)).toEqual({ events: 1, ms: 1000 });
  });

  test('a long outage: counts stay exact past the cap on entries', () => {
    const { lag, applyUpTo } = tracker();
    for (let i = 1; i <= 150_000; i++) lag.appended(at(i), 1, i);
    expect(lag.lag(200_000).events).toBe(150_000);
    applyUpTo(at(50_000));
    expect(lag.lag(200_000)).toEqual({ events: 100_000, ms: 200_000 - 50_001 });
    applyUpTo(at(150_000));
    expect(lag.lag(200_000)).toEqual({ events: 0, ms: 0 });
  });
});
