import { createLagTracker } from '../../src/projections/lag';

const at = (commit: number) => ({ commit: BigInt(commit), prepare: BigInt(commit) });

describe('projector lag as one process sees it', () => {
  test('appended events count until the projections pass them; the age is the oldest waiting', () => {
    const lag = createLagTracker();
    expect(lag.lag(null, 1000)).toEqual({ events: 0, ms: 0 });
    lag.appended(at(10), 2, 1000);
    lag.appended(at(20), 1, 1500);
    lag.appended(at(30), 3, 1600);
    expect(lag.lag(null, 2000)).toEqual({ events: 6, ms: 1000 });
    expect(lag.lag(at(9), 2000)).toEqual({ events: 6, ms: 1000 });
    expect(lag.lag(at(10), 2000)).toEqual({ events: 4, ms: 500 });
    expect(lag.lag(at(25), 2100)).toEqual({ events: 3, ms: 500 });
    expect(lag.lag(at(30), 2100)).toEqual({ events: 0, ms: 0 });
  });

  test('an append acknowledged out of order counts until the later one is applied', () => {
    const lag = createLagTracker();
    lag.appended(at(20), 1, 1000);
    lag.appended(at(10), 1, 1100);
    expect(lag.lag(at(10), 1200)).toEqual({ events: 2, ms: 200 });
    expect(lag.lag(at(20), 1200)).toEqual({ events: 0, ms: 0 });
  });

  test('an append the projections already passed is no lag', () => {
    const lag = createLagTracker();
    lag.appended(at(5), 1, 1000);
    expect(lag.lag(at(7), 1000)).toEqual({ events: 0, ms: 0 });
  });

  test('a long outage: counts stay exact past the cap on entries', () => {
    const lag = createLagTracker();
    for (let i = 1; i <= 150_000; i++) lag.appended(at(i), 1, i);
    expect(lag.lag(null, 200_000).events).toBe(150_000);
    expect(lag.lag(at(50_000), 200_000)).toEqual({ events: 100_000, ms: 200_000 - 50_001 });
    expect(lag.lag(at(150_000), 200_000)).toEqual({ events: 0, ms: 0 });
  });
});
