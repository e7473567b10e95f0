import { nextTurn } from './event-loop';

/** Turns of the event loop, counted by a `setImmediate` chain started before the jobs. */
export function turnCounter(): { readonly current: () => number; readonly stop: () => void } {
  let turns = 0;
  let running = true;
  const tick = (): void => {
    turns++;
    if (running) setImmediate(tick);
  };
  setImmediate(tick);
  return { current: () => turns, stop: () => (running = false) };
}

/** Waits turn after turn until `check` holds, `turns` at most, then asserts it. */
export async function untilTurns(check: () => boolean, turns = 10_000): Promise<void> {
  for (let i = 0; i < turns && !check(); i++) await nextTurn();
  expect(check()).toBe(true);
}
