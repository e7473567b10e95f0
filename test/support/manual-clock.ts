import type { Clock } from '../../src/commands/handler';

/** A command clock the test moves: `advance` steps it and answers the new time (ISO). */
export function manualClock(start: number): Clock & { advance(seconds: number): string } {
  let now = start;
  return {
    now: () => new Date(now),
    advance(seconds) {
      now += seconds * 1000;
      return new Date(now).toISOString();
    },
  };
}
