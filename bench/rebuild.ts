/**
 * `npm run bench:rebuild`: events per second of a full read-model rebuild (decisions §9),
 * over a synthetic history of BENCH_EVENTS events (200,000) written by the real deciders
 * (bench/workload.ts: users, sessions, devices with links, renames, token issues, presence
 * changes, heartbeats, deletions).
 *
 * The history is appended to an embedded log in a temporary directory; both runs read it
 * from there, so they differ only in where the read models go:
 * - embedded: memory read models, the rebuild a running embedded service does
 *   (POST /admin/read-models/rebuild) and every start does;
 * - MongoDB: jongodb (test/support/jongodb.ts), the rebuild `npm run replay -- rebuild`
 *   does in distributed mode: project into memory, bulk-load the documents into a fresh
 *   generation, catch up, switch. jongodb is a test stand-in whose every write costs time
 *   in proportion to the collection's size; the figure describes it, not a MongoDB server.
 *
 * BENCH_RUNS (3) runs per target; the median is reported. BENCH_MODES=embedded,mongodb.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openEmbeddedEventStore } from '../src/infra/eventstore/embedded';
import { allProjections } from '../src/projections';
import { openMemoryReadModels, openMongoReadModels, type RebuildReport } from '../src/projections/read-models';
import { startJongodb } from '../test/support/jongodb';
import { generateWorkload } from './workload';
import { median } from './stats';

const EVENTS = Number(process.env.BENCH_EVENTS ?? 200_000);
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const MODES = (process.env.BENCH_MODES ?? 'embedded,mongodb').split(',').map((m) => m.trim());

function rate(report: RebuildReport): number {
  return Math.round((report.events / report.durationMs) * 1000);
}

function summary(label: string, reports: readonly RebuildReport[]): void {
  const rates = reports.map(rate);
  // The run whose rate is nearest the median (it is one of them for an odd count).
  const best = reports.reduce<RebuildReport | undefined>(
    (nearest, r) => (nearest === undefined || Math.abs(rate(r) - median(rates)) < Math.abs(rate(nearest) - median(rates)) ? r : nearest),
    undefined,
  );
  if (best === undefined) return;
  const docs = Object.values(best.collections).reduce((a, b) => a + b, 0);
  console.log(
    `${label.padEnd(9)} ${String(best.events).padStart(8)} events  ${String(median(rates)).padStart(7)} events/s (median of ${reports.length}; runs: ${rates.join(', ')})  ` +
      `${docs} documents  phases ms: project ${best.phases.projectMs}, load ${best.phases.loadMs}, catch-up ${best.phases.catchUpMs}, switch ${best.phases.switchMs}`,
  );
}

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'hhc-bench-rebuild-'));
  const eventStore = await openEmbeddedEventStore(dir);
  try {
    const started = Date.now();
    const workload = await generateWorkload(eventStore, { targetEvents: EVENTS });
    console.log(
      `history: ${workload.events} events (${workload.users} users, ${workload.devices} devices) written in ${((Date.now() - started) / 1000).toFixed(1)} s`,
    );

    if (MODES.includes('embedded')) {
      const reports: RebuildReport[] = [];
      for (let run = 0; run < RUNS; run++) {
        const readModels = await openMemoryReadModels(eventStore);
        reports.push(await readModels.rebuild(allProjections()));
        await readModels.close();
      }
      summary('embedded', reports);
    }

    if (MODES.includes('mongodb')) {
      const reports: RebuildReport[] = [];
      for (let run = 0; run < RUNS; run++) {
        // A fresh server per run: jongodb keeps everything in memory and slows with size.
        const jongodb = await startJongodb();
        try {
          const readModels = await openMongoReadModels(jongodb.uri, eventStore, { dbName: 'bench', isProjectorRunning: async () => false });
          reports.push(await readModels.rebuild(allProjections()));
          await readModels.close();
        } finally {
          await jongodb.stop();
        }
      }
      summary('mongodb', reports);
    }
  } finally {
    await eventStore.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
