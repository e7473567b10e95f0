/**
 * The embedded rate-limit counters (src/ratelimit/memory-windows.ts) against
 * `rate-limiter-flexible`'s memory store, which they replaced: time per `consume` and heap
 * per open window, on the same keys in the same run (rounds alternate the two).
 *
 *   npm run bench:limiter-memory            (BENCH_KEYS=20000 BENCH_ROUNDS=5)
 *
 * Heap per window needs `--expose-gc` (the script sets it for itself through NODE_OPTIONS).
 */
import { RateLimiterMemory } from 'rate-limiter-flexible';
import { createMemoryRateLimiter } from '../src/ratelimit/limiter';

const KEYS = Number(process.env.BENCH_KEYS ?? 20_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);

type Consume = (key: string) => Promise<unknown>;

const gc = (globalThis as { gc?: () => void }).gc;

function heapUsed(): number {
  gc?.();
  gc?.();
  return process.memoryUsage().heapUsed;
}

/** Microseconds per consume over every key, `passes` times. */
async function timeConsumes(consume: Consume, keys: readonly string[], passes: number): Promise<number> {
  const started = process.hrtime.bigint();
  for (let pass = 0; pass < passes; pass++) for (const key of keys) await consume(key);
  return Number(process.hrtime.bigint() - started) / 1000 / (keys.length * passes);
}

/** Heap bytes per key once every key has a window (a store of its own, the keys made beforehand). */
async function heapPerWindow(make: () => Consume, keys: readonly string[]): Promise<number> {
  const before = heapUsed();
  const consume = make();
  for (const key of keys) await consume(key);
  const after = heapUsed();
  // Kept alive until measured.
  await consume(keys[0] as string);
  return (after - before) / keys.length;
}

const makeFlexible = (): Consume => {
  const limiter = new RateLimiterMemory({ keyPrefix: 'heartbeat', points: 10, duration: 60 });
  return (key) => limiter.consume(key, 1).catch(() => undefined);
};
const makeWindows = (): Consume => {
  const limiter = createMemoryRateLimiter();
  return (key) => limiter.consume('heartbeat', key);
};

async function main(): Promise<void> {
  if (gc === undefined) console.log('(no --expose-gc: heap figures include garbage)');
  const keys = Array.from({ length: KEYS }, (_, i) => `device:00000000-0000-4000-8000-${String(i).padStart(12, '0')}`);
  const flexible = makeFlexible();
  const windows = makeWindows();
  const times: { flexible: number[]; windows: number[] } = { flexible: [], windows: [] };
  for (let round = 0; round < ROUNDS; round++) {
    times.flexible.push(await timeConsumes(flexible, keys, 5));
    times.windows.push(await timeConsumes(windows, keys, 5));
  }
  const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
  const heapFlexible = await heapPerWindow(makeFlexible, keys);
  const heapWindows = await heapPerWindow(makeWindows, keys);
  const result = {
    keys: KEYS,
    rounds: ROUNDS,
    consumeMicros: { rateLimiterFlexible: median(times.flexible), memoryWindows: median(times.windows) },
    consumeRatio: median(times.windows) / median(times.flexible),
    heapBytesPerWindow: { rateLimiterFlexible: Math.round(heapFlexible), memoryWindows: Math.round(heapWindows) },
  };
  console.log(JSON.stringify(result, null, 2));
  process.exit(0);
}

void main();
