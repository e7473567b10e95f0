/**
 * npm run simulate:store -- --seed N [--ops M] [--seeds K] [--quiet]
 *
 * Runs the deterministic simulation of the embedded event store (store-sim.ts) for seed N
 * (and the K − 1 seeds after it with --seeds), M operations each (default: about a
 * minute's worth for one seed). On a violation it prints the seed, the violation and the
 * shortest history found that still shows it, and exits with status 1.
 */
import { generateOps, runSimulation, shrink, type SimResult } from './store-sim';

const DEFAULT_OPS = 20_000;

function argument(name: string): string | undefined {
  const at = process.argv.indexOf(`--${name}`);
  return at === -1 ? undefined : process.argv[at + 1];
}

function integer(name: string, fallback: number): number {
  const text = argument(name);
  if (text === undefined) return fallback;
  const value = Number(text);
  if (!Number.isSafeInteger(value) || value < 0) throw new Error(`--${name} must be a non-negative integer, got ${text}`);
  return value;
}

function summary(result: SimResult): string {
  const faults = [...result.faults].map(([kind, n]) => `${kind} ${n}`).join(', ');
  return (
    `seed ${result.seed}: ${result.ops} ops, ${result.crashes} crashes, ${result.reopens} opens, ` +
    `${result.appendsAcknowledged} appends acknowledged, ${result.appendsFailed} failed, ${result.eventsReclaimed} events reclaimed, ` +
    `${result.fullDiskStopsRefused} damaged records refused after a clean stop on a full disk; ` +
    `faults: ${faults || 'none'}`
  );
}

async function main(): Promise<void> {
  const seed = integer('seed', Math.floor(Math.random() * 2 ** 31));
  const ops = integer('ops', DEFAULT_OPS);
  const seeds = integer('seeds', 1);
  const quiet = process.argv.includes('--quiet');
  const started = Date.now();
  const totals = { ops: 0, crashes: 0, appends: 0, fullDiskStops: 0, violations: 0 };
  for (let s = seed; s < seed + seeds; s++) {
    const result = await runSimulation({ seed: s, ops });
    totals.ops += result.ops;
    totals.crashes += result.crashes;
    totals.appends += result.appendsAcknowledged;
    totals.fullDiskStops += result.fullDiskStopsRefused;
    if (!quiet || result.violation !== null) console.log(summary(result));
    else if ((s - seed + 1) % 10 === 0) {
      console.log(`progress: seeds ${seed}..${s}, ${totals.ops} ops, ${totals.crashes} crashes, ${totals.appends} appends, ${((Date.now() - started) / 1000).toFixed(0)} s`);
    }
    if (result.violation === null) continue;
    totals.violations++;
    console.log(`VIOLATION (seed ${s}, step ${result.violation.step}): ${result.violation.message}`);
    const shrunk = await shrink(s, generateOps(s, ops));
    console.log(`shortest history found (${shrunk.ops.length} ops; replay: seed ${s}):`);
    for (const line of shrunk.result.history) console.log(`  ${line}`);
    console.log(`  → ${shrunk.result.violation?.message ?? '?'}`);
    break;
  }
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  console.log(`total: seeds ${seed}..${seed + seeds - 1}, ${totals.ops} ops, ${totals.crashes} crashes, ${totals.appends} appends acknowledged, ${totals.fullDiskStops} damaged records refused after a clean stop on a full disk, ${totals.violations} violations, ${seconds} s`);
  process.exitCode = totals.violations > 0 ? 1 : 0;
}

void main();
