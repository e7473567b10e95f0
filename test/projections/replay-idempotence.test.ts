import { generateWorkload } from '../../bench/workload';
import type { RecordedEvent } from '../../src/infra/eventstore/port';
import type { ReadStore } from '../../src/infra/readstore/port';
import { allProjections } from '../../src/projections';
import { projectedHistory } from '../support/projected-history';
import { openEventStore, openReadStore, type ReadStoreKind } from '../support/adapters';
import { snapshotReadModels } from '../support/snapshot';

/**
 * Every read model, given a whole history written by the real deciders (users, sessions,
 * devices with links, unlinks, renames, token issues, heartbeats, expiries, deletions):
 * applying any event twice, or the whole history again, changes nothing.
 */

async function apply(store: ReadStore, events: readonly RecordedEvent[], times: number): Promise<void> {
  const projections = allProjections();
  for (const projection of projections) await projection.init(store);
  for (const event of events) {
    for (const projection of projections) {
      if (!projection.streamPrefixes.some((prefix) => event.streamName.startsWith(prefix))) continue;
      for (let i = 0; i < times; i++) await projection.applyBatch([event], store);
    }
  }
}

/** The history in batches of `size` (each projection given a batch's events of its streams), as the projector applies it. */
async function applyInBatches(store: ReadStore, events: readonly RecordedEvent[], size: number): Promise<void> {
  const projections = allProjections();
  for (const projection of projections) await projection.init(store);
  for (let i = 0; i < events.length; i += size) {
    const batch = events.slice(i, i + size);
    for (const projection of projections) {
      const mine = batch.filter((event) => projection.streamPrefixes.some((prefix) => event.streamName.startsWith(prefix)));
      if (mine.length > 0) await projection.applyBatch(mine, store);
    }
  }
}

describe.each<[ReadStoreKind, number]>([
  ['memory', 3000],
  ['mongodb', 400],
])('replaying into %s read models', (kind, size) => {
  let events: RecordedEvent[];
  const cleanups: Array<() => Promise<void>> = [];

  beforeAll(async () => {
    const source = await openEventStore('embedded');
    cleanups.push(source.cleanup);
    await generateWorkload(source.value, { targetEvents: size, seed: 7 });
    events = await projectedHistory(source.value);
  }, 30_000);
  afterAll(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup();
  });

  const fresh = async (): Promise<ReadStore> => {
    const opened = await openReadStore(kind);
    cleanups.push(opened.cleanup);
    return opened.value;
  };

  test('each event applied twice, or the whole history applied again, gives the same documents and guards', async () => {
    expect([...new Set(events.map((e) => e.type))]).toEqual(
      expect.arrayContaining(['DeviceRegistered', 'UserLinked', 'UserUnlinked', 'DeviceUpdated', 'DeviceWentOffline', 'DeviceDeleted', 'HeartbeatReceived']),
    );
    const once = await fresh();
    await apply(once, events, 1);
    const expected = await snapshotReadModels(once);
    expect(expected.devices?.length).toBeGreaterThan(0);

    const twice = await fresh();
    await apply(twice, events, 2);
    expect(await snapshotReadModels(twice)).toEqual(expected);

    // A crash before the first checkpoint: the whole history comes again over what is there.
    await apply(once, events, 1);
    expect(await snapshotReadModels(once)).toEqual(expected);
  }, 60_000);

  test('applied in batches of any size, and a batch applied again over part of itself, it gives the same documents and guards as one event at a time', async () => {
    const once = await fresh();
    await apply(once, events, 1);
    const expected = await snapshotReadModels(once);
    for (const size of [7, 100, events.length]) {
      const batched = await fresh();
      await applyInBatches(batched, events, size);
      expect(await snapshotReadModels(batched)).toEqual(expected);
    }
    // A crash after part of a batch was written: the first half one at a time, then the whole batch again.
    const crashed = await fresh();
    const half = Math.floor(events.length / 2);
    await apply(crashed, events.slice(0, half), 1);
    await applyInBatches(crashed, events, events.length);
    expect(await snapshotReadModels(crashed)).toEqual(expected);
  }, 120_000);
});
