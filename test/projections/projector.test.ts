import { randomUUID } from 'node:crypto';
import type { EventStore, GlobalPosition, NewEvent, RecordedEvent } from '../../src/infra/eventstore/port';
import { comparePositions, formatPosition, parsePosition } from '../../src/infra/eventstore/port';
import type { ReadStore } from '../../src/infra/readstore/port';
import { startProjector, CHECKPOINT_NAME } from '../../src/projections/projector';
import { stallOf } from '../../src/runtime/projector';
import { documentProjection, type Projection } from '../../src/projections/projection';
import { openEventStore, openReadStore, unique, type EventStoreKind, type ReadStoreKind } from '../support/adapters';
import { counted, newCalls } from '../support/counting-store';

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

/** Records every value in the order applied, for the batch tests: a double apply or a lost event shows. */
function batchTally(collection: string, prefix: string): Projection {
  return documentProjection<TallyDoc>({
    name: collection,
    collection,
    streamPrefixes: [prefix],
    ids: (event) => [event.streamName],
    evolve: (doc, event, id) => ({ id, values: [...(doc?.values ?? []), (event.data as { value: number }).value] }),
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
    for (const e of recorded) await projection.applyBatch([e], reads);
    const tally = reads.collection<TallyDoc>(`tally_${prefix.replace(/[^a-z0-9]/gi, '')}`);
    const once = await tally.get(stream);
    for (const e of recorded) await projection.applyBatch([e], reads);
    expect(await tally.get(stream)).toEqual(once);
    expect(once?.values).toEqual([5, 6]);
  });

  /** `streams` streams of `perStream` events each, appended in rounds so streams interleave in the log. */
  async function appendRounds(prefix: string, streams: number, perStream: number, from = 0): Promise<void> {
    for (let round = 0; round < perStream; round++) {
      await Promise.all(Array.from({ length: streams }, (_, s) => events.append(`${prefix}${s}`, [added(from + round)], 'any')));
    }
  }

  test('under load, a batch reads and writes each collection once and checkpoints once: ≤ 0.05 store calls per event', async () => {
    const prefix = unique('load-');
    const collection = `c_${prefix.replace(/[^a-z0-9]/gi, '')}`;
    await appendRounds(prefix, 20, 25);
    const calls = newCalls();
    const applied: GlobalPosition[] = [];
    const projector = await startProjector(events, counted(reads, calls), [batchTally(collection, prefix)], { onApplied: (p) => applied.push(p) });
    await projector.caughtUp;
    await projector.stop();
    const eventsApplied = projector.progress().eventsApplied;
    expect(eventsApplied).toBeGreaterThanOrEqual(500);
    const docs = await reads.collection<TallyDoc>(collection).find({ sort: [{ field: 'id', order: 'asc' }] });
    expect(docs).toHaveLength(20);
    for (const doc of docs) expect(doc.values).toEqual(Array.from({ length: 25 }, (_, i) => i));
    // Once per batch, not per event: the watermark hears of each batch once, and a batch reads
    // the collection's documents with one call and writes them with one bulk write. How many
    // events a batch holds depends on what the subscription has ready (over gRPC, its chunks).
    expect(applied.length).toBeLessThanOrEqual(eventsApplied / 20);
    expect(calls.getMany).toBeLessThanOrEqual(applied.length);
    expect(calls.writeMany).toBeLessThanOrEqual(applied.length);
    expect((calls.getMany + calls.writeMany + calls.checkpoints) / eventsApplied).toBeLessThanOrEqual(0.05);
  }, 60_000);

  test('a single event arriving alone is applied at once, in a batch of its own', async () => {
    const prefix = unique('alone-');
    const collection = `c_${prefix.replace(/[^a-z0-9]/gi, '')}`;
    const calls = newCalls();
    const applied: GlobalPosition[] = [];
    const projector = await startProjector(events, counted(reads, calls), [batchTally(collection, prefix)], { onApplied: (p) => applied.push(p) });
    await projector.caughtUp;
    const result = await events.append(`${prefix}x`, [added(7)], 'no_stream');
    // Nothing else is appended: a projector waiting for its batch to fill would never apply it.
    await waitUntil(async () => applied.some((p) => formatPosition(p) === formatPosition(result.position)));
    expect((await reads.collection<TallyDoc>(collection).get(`${prefix}x`))?.values).toEqual([7]);
    expect(calls.batches).toEqual([1]);
    await projector.stop();
  }, 30_000);

  test('a crash in the middle of a batch (one collection half written, no checkpoint) is re-applied harmlessly', async () => {
    const prefix = unique('crash-');
    const first = `a_${prefix.replace(/[^a-z0-9]/gi, '')}`;
    const second = `b_${prefix.replace(/[^a-z0-9]/gi, '')}`;
    const projections = (): Projection[] => [batchTally(first, prefix), batchTally(second, prefix)];
    // A projector that has caught up with an empty history, so the next batch is the one that crashes.
    const warmup = await startProjector(events, reads, projections());
    await warmup.caughtUp;
    await warmup.stop();

    await appendRounds(prefix, 10, 5);
    const head = await events.headPosition();
    let crashed = false;
    const crashing = await startProjector(
      events,
      counted(reads, newCalls(), (name, changes) => {
        if (crashed || name !== second || changes.length < 2) return null;
        crashed = true;
        return Math.floor(changes.length / 2);
      }),
      projections(),
    );
    await expect(crashing.done).rejects.toThrow('crash in the middle of a batch');
    expect(crashed).toBe(true);
    await crashing.stop();
    // The crashed batch moved no checkpoint, and part of it is already written.
    const checkpoint = await reads.getCheckpoint(CHECKPOINT_NAME);
    expect(checkpoint === null || head === null || comparePositions(parsePosition(checkpoint), head) < 0).toBe(true);
    const partly = await reads.collection<TallyDoc>(second).find();
    expect(partly.length).toBeGreaterThan(0);

    await appendRounds(prefix, 10, 2, 5);
    const restarted = await startProjector(events, reads, projections());
    await restarted.caughtUp;
    await waitUntil(async () => (await reads.collection<TallyDoc>(second).find()).every((doc) => doc.values.length === 7));
    await restarted.stop();
    for (const name of [first, second]) {
      const docs = await reads.collection<TallyDoc>(name).find({ sort: [{ field: 'id', order: 'asc' }] });
      expect(docs.map((doc) => doc.id)).toEqual(Array.from({ length: 10 }, (_, s) => `${prefix}${s}`).sort());
      for (const doc of docs) expect(doc.values).toEqual([0, 1, 2, 3, 4, 5, 6]);
    }
  }, 60_000);
});

/** The batch boundaries themselves, for the record: the log order survives any grouping. */
test('events keep their log order inside and across batches', async () => {
  const es = await openEventStore('embedded');
  const rs = await openReadStore('memory');
  try {
    const seen: RecordedEvent[] = [];
    const projection: Projection = {
      name: 'order',
      streamPrefixes: ['o-'],
      init: async () => undefined,
      applyBatch: async (batch) => void seen.push(...batch),
    };
    for (let i = 0; i < 30; i++) await es.value.append(`o-${i % 3}`, [added(i)], 'any');
    const projector = await startProjector(es.value, rs.value, [projection], { batchLimits: { maxEvents: 7, maxBytes: 1 << 20 } });
    await projector.caughtUp;
    await projector.stop();
    expect(seen.map((e) => (e.data as { value: number }).value)).toEqual(Array.from({ length: 30 }, (_, i) => i));
  } finally {
    await rs.cleanup();
    await es.cleanup();
  }
});

/** A store that stops answering (a silent network cut) shows as a call pending since then, and a stall once past a bound. */
test('a write the read store does not answer shows as pending since it began, and as a stall past the bound', async () => {
  const es = await openEventStore('embedded');
  const rs = await openReadStore('memory');
  let release: () => void = () => undefined;
  const cut = new Promise<void>((resolve) => (release = resolve));
  let hanging = false;
  const stallAbort = new AbortController();
  try {
    const inner = rs.value;
    const hangingStore = counted(inner, newCalls(), undefined, () => (hanging ? cut : Promise.resolve()));
    const projector = await startProjector(es.value, hangingStore, [batchTally('stall', 's-')]);
    await projector.caughtUp;
    expect(projector.progress().pendingSince).toBeNull();
    let stalledAt: number | null = null;
    void stallOf(() => projector.progress().pendingSince, 200, stallAbort.signal).then(() => (stalledAt = Date.now()));

    hanging = true;
    const before = Date.now();
    await es.value.append('s-1', [added(1)], 'any');
    await waitUntil(async () => projector.progress().pendingSince !== null);
    const since = projector.progress().pendingSince ?? 0;
    expect(since).toBeGreaterThanOrEqual(before);
    await waitUntil(async () => stalledAt !== null);
    expect((stalledAt ?? 0) - since).toBeGreaterThanOrEqual(200);

    release();
    await waitUntil(async () => (await inner.collection<TallyDoc>('stall').get('s-1'))?.values.length === 1);
    await waitUntil(async () => projector.progress().pendingSince === null);
    await projector.stop();
  } finally {
    stallAbort.abort();
    release();
    await rs.cleanup();
    await es.cleanup();
  }
});

/**
 * The checkpoint a quiet projector writes on its own (after the last event) can fail too: the
 * projector then stops with that error, as for a failed batch, so its owner restarts it from
 * the checkpoint stored and says so; it never reports a failure and goes on as if nothing were.
 */
test('a failed idle checkpoint fails the projector: done rejects, nothing goes on applying', async () => {
  const es = await openEventStore('embedded');
  const rs = await openReadStore('memory');
  try {
    const inner = rs.value;
    let failing = false;
    const flaky: ReadStore = {
      ...inner,
      advanceCheckpoint: async (...args) => {
        if (failing) throw new Error('connection 3 to 127.0.0.1:27017 closed');
        return inner.advanceCheckpoint(...args);
      },
    };
    const errors: unknown[] = [];
    const projector = await startProjector(es.value, flaky, [batchTally('idle', 'i-')], {
      checkpointEveryMs: 50,
      checkpointEveryEvents: 1000,
      onError: (error) => errors.push(error),
    });
    await projector.caughtUp;
    failing = true;
    await es.value.append('i-1', [added(1)], 'any');
    await expect(projector.done).rejects.toThrow('connection 3 to 127.0.0.1:27017 closed');
    expect(errors).toHaveLength(1);
    expect((await inner.collection<TallyDoc>('idle').get('i-1'))?.values).toEqual([1]);
    // Stopped: a later event is not applied by it.
    await es.value.append('i-2', [added(2)], 'any');
    await new Promise((r) => setTimeout(r, 200));
    expect(await inner.collection<TallyDoc>('idle').get('i-2')).toBeNull();
    failing = false;
    await projector.stop();
  } finally {
    await rs.cleanup();
    await es.cleanup();
  }
});
