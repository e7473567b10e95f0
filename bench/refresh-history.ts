/**
 * A refresh-token family's cost as it ages (`npm run bench:refresh-history`): one family
 * rotated BENCH_ROTATIONS times (3,000) through the session commands on an embedded log;
 * the time of a rotation (median of 20) around each checkpoint, and, at the end, the fold of
 * the whole family (its events already read) one event at a time (`evolveSession`, what every
 * refresh did) against `evolveSessionAll`, medians of 5, in the same run.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { newCommandContext, systemClock } from '../src/commands/handler';
import { createSessionCommands } from '../src/commands/sessions';
import { sessionStream } from '../src/domain/events';
import { evolveSession, evolveSessionAll, initialSessionState, type SessionEvent } from '../src/domain/session';
import { openEmbeddedEventStore } from '../src/infra/eventstore/embedded';
import { createMemoryReadStore } from '../src/infra/readstore/memory';
import type { Watermark } from '../src/projections/watermark';

const ROTATIONS = Number(process.env.BENCH_ROTATIONS ?? 3000);
const CHECKPOINTS = [100, 500, 1000, 2000, 3000, 5000, 10000].filter((n) => n <= ROTATIONS);
const noWait: Watermark = { advance: () => undefined, waitFor: async () => true, current: () => null, close: async () => undefined };
const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? NaN;

async function main(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'hhc-refresh-history-'));
  const store = await openEmbeddedEventStore(dir);
  try {
    const sessions = createSessionCommands({ eventStore: store, readStore: createMemoryReadStore(), watermark: noWait, clock: systemClock, readYourWritesTimeoutMs: 1 });
    const ctx = (): ReturnType<typeof newCommandContext> => newCommandContext({ type: 'user', id: 'bench-user' }, randomUUID());
    const client = { ip: null, userAgent: null };
    const opened = await sessions.open('bench-user', client, ctx());
    const familyId = opened.familyId;
    let jti = opened.jti;
    const rows: string[] = [];
    const around = new Map<number, number[]>();
    for (let i = 1; i <= ROTATIONS; i++) {
      const t = performance.now();
      jti = (await sessions.rotate({ familyId, jti }, client, ctx())).jti;
      const ms = performance.now() - t;
      const checkpoint = CHECKPOINTS.find((c) => i > c - 20 && i <= c);
      if (checkpoint !== undefined) around.set(checkpoint, [...(around.get(checkpoint) ?? []), ms]);
    }
    for (const c of CHECKPOINTS) rows.push(`| ${c.toLocaleString('en')} | ${median(around.get(c) ?? []).toFixed(2)} ms |`);

    const events: SessionEvent[] = [];
    for await (const e of store.readStream(sessionStream(familyId))) events.push({ type: e.type, data: e.data } as SessionEvent);
    const time = (fold: () => unknown): number => {
      const runs: number[] = [];
      for (let r = 0; r < 5; r++) {
        const t = performance.now();
        fold();
        runs.push(performance.now() - t);
      }
      return median(runs);
    };
    const oneByOne = time(() => events.reduce(evolveSession, initialSessionState()));
    const all = time(() => evolveSessionAll(initialSessionState(), events));
    console.log(`\n${ROTATIONS} rotations of one family (${events.length} events)\n`);
    console.log('| rotations so far | a rotation (median of the 20 before) |\n| ---: | ---: |');
    console.log(rows.join('\n'));
    console.log(`\n| fold of the whole family | ms |\n| --- | ---: |`);
    console.log(`| one event at a time (evolveSession) | ${oneByOne.toFixed(1)} |`);
    console.log(`| at once (evolveSessionAll) | ${all.toFixed(2)} |`);
    console.log(`| ratio | ${(oneByOne / all).toFixed(0)}× |`);
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

void main();
