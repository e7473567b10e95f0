import { restartDelayMs } from '../../src/runtime/projector';

/** A projector that failed starts again from its checkpoint after a wait that grows, bounded. */
test('the wait before a restart doubles with each failure in a row and stays within 15 s', () => {
  const waits = Array.from({ length: 10 }, (_, i) => restartDelayMs(i + 1));
  expect(waits.slice(0, 5)).toEqual([500, 1000, 2000, 4000, 8000]);
  expect(waits.slice(5)).toEqual([15_000, 15_000, 15_000, 15_000, 15_000]);
  expect(restartDelayMs(1000)).toBe(15_000);
});
