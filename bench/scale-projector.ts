/**
 * Part 2 of `npm run bench:scale`: projector throughput under a simulated network. The live
 * projector (`startProjector`, every read model) runs over a recorded history
 * (bench/workload.ts, appended to an embedded log in a temporary directory) into the memory
 * read store wrapped so that every call waits a given round-trip time first, as a call to
 * MongoDB across a network would. Calls in flight at once overlap, as on a connection pool.
 *
 * BENCH_SCALE_EVENTS (20,000) events; BENCH_RTTS (0,0.2,0.5,1) milliseconds.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { openEmbeddedEventStore } from '../src/infra/eventstore/embedded';
import type { EventStore } from '../src/infra/eventstore/port';
import { createMemoryReadStore } from '../src/infra/readstore/memory';
import type { CheckpointGuard, ReadCollection, ReadDoc, ReadStore } from '../src/infra/readstore/port';
import { allProjections } from '../src/projections';
import { startProjector } from '../src/projections/projector';
import { generateWorkload } from './workload';

export interface ProjectorRun {
  readonly rttMs: number;
  readonly events: number;
  readonly seconds: number;
  readonly eventsPerSecond: number;
  /** Calls to the read store per projected event (each one a round trip on a real network). */
  readonly callsPerEvent: number;
}

/** Waits `ms` without blocking the event loop: timers cannot wait less than a millisecond. */
function networkDelay(ms: number): Promise<void> {
  if (ms <= 0) return Promise.resolve();
  const until = performance.now() + ms;
  return new Promise((resolve) => {
    const check = (): void => {
      if (performance.now() >= until) resolve();
      else setImmediate(check);
    };
    check();
  });
}

/** Every method of the store, after one round trip. */
function overNetwork(inner: ReadStore, rttMs: number, calls: { count: number }): ReadStore {
  const remote =
    <A extends unknown[], R>(call: (...args: A) => Promise<R>): ((...args: A) => Promise<R>) =>
    async (...args: A): Promise<R> => {
      calls.count++;
      await networkDelay(rttMs);
      return call(...args);
    };
  return {
    collection: <T extends ReadDoc>(name: string): ReadCollection<T> => {
      const c = inner.collection<T>(name);
      return {
        get: remote((id) => c.get(id)),
        getGuard: remote((id) => c.getGuard(id)),
        getMany: remote((ids) => c.getMany(ids)),
        writeMany: remote((changes) => c.writeMany(changes)),
        find: remote((query) => c.find(query)),
        count: remote((where) => c.count(where)),
        put: remote((doc, guard) => c.put(doc, guard)),
        remove: remote((id, guard) => c.remove(id, guard)),
        load: remote((entries) => c.load(entries)),
        ensureIndex: remote((fields, options) => c.ensureIndex(fields, options)),
        clear: remote(() => c.clear()),
      };
    },
    getCheckpoint: remote((name: string) => inner.getCheckpoint(name)),
    setCheckpoint: remote((name: string, value: string) => inner.setCheckpoint(name, value)),
    advanceCheckpoint: remote((name: string, value: string, guard: CheckpointGuard) => inner.advanceCheckpoint(name, value, guard)),
    ping: () => inner.ping(),
    close: () => inner.close(),
  };
}

async function runOnce(eventStore: EventStore, rttMs: number): Promise<ProjectorRun> {
  const calls = { count: 0 };
  const store = overNetwork(createMemoryReadStore(), rttMs, calls);
  const started = performance.now();
  const projector = await startProjector(eventStore, store, allProjections());
  await projector.caughtUp;
  const seconds = (performance.now() - started) / 1000;
  await projector.stop();
  const events = projector.progress().eventsApplied;
  return { rttMs, events, seconds, eventsPerSecond: Math.round(events / seconds), callsPerEvent: calls.count / events };
}

export async function measureProjector(): Promise<ProjectorRun[]> {
  const targetEvents = Number(process.env.BENCH_SCALE_EVENTS ?? 20_000);
  const rtts = (process.env.BENCH_RTTS ?? '0,0.2,0.5,1').split(',').map(Number);
  const dir = mkdtempSync(join(tmpdir(), 'hhc-bench-scale-'));
  const eventStore = await openEmbeddedEventStore(dir);
  try {
    await generateWorkload(eventStore, { targetEvents });
    // One run unmeasured: the first run of a process pays for the JIT.
    await runOnce(eventStore, 0);
    const runs: ProjectorRun[] = [];
    for (const rtt of rtts) runs.push(await runOnce(eventStore, rtt));
    return runs;
  } finally {
    await eventStore.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

export function projectorTable(runs: readonly ProjectorRun[]): string {
  const lines = ['| simulated round trip | events | seconds | events/s | store calls per event |', '| ---: | ---: | ---: | ---: | ---: |'];
  for (const r of runs) {
    lines.push(`| ${r.rttMs} ms | ${r.events.toLocaleString('en-US')} | ${r.seconds.toFixed(2)} | **${r.eventsPerSecond.toLocaleString('en-US')}** | ${r.callsPerEvent.toFixed(3)} |`);
  }
  return lines.join('\n');
}
