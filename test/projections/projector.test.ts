import { randomUUID } from 'node:crypto';
import type { EventStore, NewEvent, RecordedEvent } from '../../src/infra/eventstore/port';
import type { ReadStore } from '../../src/infra/readstore/port';
import { startProjector, CHECKPOINT_NAME } from '../../src/projections/projector';
import { documentProjection, type Projection } from '../../src/projections/projection';
import { openEventStore, openReadStore, unique, type EventStoreKind, type ReadStoreKind } from '../support/adapters';

interface TallyDoc {
  readonly id: string;
  readonly values: readonly number[];
}

const meta = { occurredAt: '2026-01-01T00:00:00.000Z', actor: { type: 'system', id: 't' }, requestId: 'r', causationId: 'c', correlationId: 'c' } as const;
const added = (value: number): NewEvent => ({ id: randomUUID(), type: 'Added', data: { value }, metadata: meta });

/** A projection that records the order it saw values in: any reordering or double apply shows. */
function tallyProjection(prefix: string, seen: RecordedEvent[]): Projection {
  return documentProjection<TallyDoc>({
    name: 'tally',
    collection: `tally_${prefix.replace(/[^a-z0-9]/gi, '')}`,
    streamPrefixes: [prefix],
    ids: (event) => [event.streamName],
    evolve: (doc, event, id) => {
      seen.push(event);
      const value = (event.data as { value: number }).value;
      return { id, values: [...(doc?.values ?? []), value] };
    },
  });
}

async function waitUntil(check: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe.each<[EventStoreKind, ReadStoreKind]>([
  ['embedded', 'memory'],
  ['esdb', 'mongodb'],
])('projector over %s events into %s read models', (esKind, rsKind) => {
  let events: EventStore;
  let reads: ReadStore;
  const cleanups: (() => Promise<void>)[] = [];

  beforeAll(async () => {
    const es = await openEventStore(esKind);
    const rs = await openReadStore(rsKind);
    events = es.value;
    reads = rs.value;
    cleanups.push(es.cleanup, rs.cleanup);
  }, 30_000);
  afterAll(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  test('applies history and live events in order, then checkpoints after the writes', async () => {
    const prefix = unique('tally-');
    const stream = `${prefix}a`;
    await events.append(stream, [added(1), added(2)], 'no_stream');
    await events.append(`${unique('other-')}x`, [added(99)], 'any');
    const seen: RecordedEvent[] = [];
    const projector = await startProjector(events, reads, [tallyProjection(prefix, seen)], { checkpointEveryMs: 10 });
    await projector.caughtUp;
    await events.append(stream, [added(3)], 1n);
    const tally = reads.collection<TallyDoc>(`tally_${prefix.replace(/[^a-z0-9]/gi, '')}`);
    await waitUntil(async () => (await tally.get(stream))?.values.length === 3);
    expect((await tally.get(stream))?.values).toEqual([1, 2, 3]);
    await projector.stop();
    const checkpoint = await reads.getCheckpoint(CHECKPOINT_NAME);
    const last = seen.at(-1);
    expect(checkpoint).toBe(`${last?.position.commit}/${last?.position.prepare}`);
  });

  test('a restarted projector continues from its checkpoint and never applies an event twice', async () => {
    const prefix = unique('tally-');
    const stream = `${prefix}b`;
    const seen: RecordedEvent[] = [];
    await events.append(stream, [added(1), added(2)], 'no_stream');
    const first = await startProjector(events, reads, [tallyProjection(prefix, seen)]);
    await first.caughtUp;
    await first.stop();
    const seenBefore = seen.filter((e) => e.streamName === stream).length;

    await events.append(stream, [added(3)], 1n);
    const second = await startProjector(events, reads, [tallyProjection(prefix, seen)]);
    await second.caughtUp;
    await second.stop();

    expect(seen.filter((e) => e.streamName === stream).map((e) => (e.data as { value: number }).value)).toEqual([1, 2, 3]);
    expect(seenBefore).toBe(2);
    const tally = reads.collection<TallyDoc>(`tally_${prefix.replace(/[^a-z0-9]/gi, '')}`);
    expect((await tally.get(stream))?.values).toEqual([1, 2, 3]);
  });

  test('applying an event a second time (a crash before the checkpoint) changes nothing', async () => {
    const prefix = unique('tally-');
    const stream = `${prefix}c`;
    await events.append(stream, [added(5), added(6)], 'no_stream');
    const recorded: RecordedEvent[] = [];
    for await (const e of events.readStream(stream)) recorded.push(e);
    const projection = tallyProjection(prefix, []);
    await projection.init(reads);
    for (const e of recorded) await projection.apply(e, reads);
    const tally = reads.collection<TallyDoc>(`tally_${prefix.replace(/[^a-z0-9]/gi, '')}`);
    const once = await tally.get(stream);
    for (const e of recorded) await projection.apply(e, reads);
    expect(await tally.get(stream)).toEqual(once);
    expect(once?.values).toEqual([5, 6]);
  });
});
