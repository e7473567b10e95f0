import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { foldStream, newCommandContext, toNewEvents, type Fold, type FoldedStream } from '../../src/commands/handler';
import type { SnapshotStore } from '../../src/commands/snapshots';
import type { DomainEvent } from '../../src/domain/messages';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import type { EventStore } from '../../src/infra/eventstore/port';
import { countingReads } from '../support/stream-reads';

/**
 * Review of `foldStream`'s two ways of folding: a decider with `evolveAll` (folded in batches)
 * and one without (one event at a time, as the device decider, which has snapshots) read the
 * same events and give the same fold, with snapshots or without: a stream shorter than their
 * interval, a newest snapshot ahead of the first read, one behind it, none at all.
 */

type Numbered = DomainEvent<'Numbered', { readonly n: number }>;
type Seen = readonly number[];

const oneAtATime: Fold<Seen, Numbered> = { initialState: () => [], evolve: (state, event) => [...state, event.data.n] };
const batches: number[] = [];
const inBatches: Fold<Seen, Numbered> = {
  ...oneAtATime,
  evolveAll: (state, events) => {
    batches.push(events.length);
    return [...state, ...events.map((e) => e.data.n)];
  },
};

/** Snapshots every 8 events; the newest one is whatever the test put there (its state marked, to tell it was used). */
function snapshotsOf(newest: FoldedStream<Seen> | null): SnapshotStore<Seen> {
  return { every: 8, load: async () => newest, save: async () => undefined };
}

describe('foldStream with and without evolveAll, with and without snapshots', () => {
  let dir: string;
  let store: EventStore;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'hhc-fold-ways-'));
    store = await openEmbeddedEventStore(dir);
  });
  afterAll(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const streamOf = async (length: number): Promise<string> => {
    const stream = `review-${randomUUID()}`;
    const ctx = newCommandContext({ type: 'system', id: 'review' }, randomUUID());
    const events: Numbered[] = Array.from({ length }, (_, n) => ({ type: 'Numbered', data: { n } }));
    for (let i = 0; i < length; i += 250) {
      await store.append(stream, toNewEvents(events.slice(i, i + 250), ctx, new Date().toISOString()), i === 0 ? 'no_stream' : BigInt(i - 1));
    }
    return stream;
  };
  /** The fold of a snapshot at `revision`: marked with -1 first, so a fold that used it shows it. */
  const snapshotAt = (revision: number): FoldedStream<Seen> => ({ state: [-1, ...Array.from({ length: revision + 1 }, (_, n) => n)], revision: BigInt(revision) });

  test.each([
    { length: 0, snapshot: null },
    { length: 5, snapshot: null },
    { length: 8, snapshot: null },
    { length: 8, snapshot: 7 },
    { length: 1_100, snapshot: null },
    { length: 1_100, snapshot: 3 },
    { length: 1_100, snapshot: 7 },
    { length: 1_100, snapshot: 1_095 },
    { length: 1_100, snapshot: 1_099 },
  ])('$length events, newest snapshot at $snapshot', async ({ length, snapshot }) => {
    const stream = await streamOf(length);
    const snapshots = snapshotsOf(snapshot === null ? null : snapshotAt(snapshot));
    // A store that knows the stream's length goes to any snapshot of a long stream; one that
    // does not reads the first 8 events first, and uses only a snapshot ahead of them.
    for (const knowsLength of [false, true]) {
      const used = snapshot !== null && length >= 8 && (knowsLength || snapshot >= 8);
      await foldBothWays(stream, length, snapshots, knowsLength, used ? [...snapshotAt(snapshot).state, ...Array.from({ length: length - snapshot - 1 }, (_, i) => snapshot + 1 + i)] : Array.from({ length }, (_, n) => n));
    }
  });

  async function foldBothWays(stream: string, length: number, snapshots: SnapshotStore<Seen>, knowsLength: boolean, expected: readonly number[]): Promise<void> {
    const results = [];
    for (const fold of [oneAtATime, inBatches]) {
      for (const options of [{ snapshots }, {}]) {
        const counted = countingReads(store, knowsLength);
        batches.length = 0;
        const folded = await foldStream(counted.store, fold, stream, options);
        results.push({ state: folded.state, revision: folded.revision, read: counted.read.get(stream) ?? 0 });
        if (fold === inBatches) expect(batches.every((size) => size >= 1 && size <= 512)).toBe(true);
      }
    }
    const [withSnapshots, whole] = results;
    expect(results).toEqual([withSnapshots, whole, withSnapshots, whole]);
    expect(withSnapshots?.state).toEqual(expected);
    expect(whole).toEqual({ state: Array.from({ length }, (_, n) => n), revision: BigInt(length - 1), read: length });
  }
});
