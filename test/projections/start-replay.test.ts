import { generateWorkload } from '../../bench/workload';
import { formatPosition, type RecordedEvent } from '../../src/infra/eventstore/port';
import { createMemoryReadStore } from '../../src/infra/readstore/memory';
import type { ReadStore } from '../../src/infra/readstore/port';
import { allProjections } from '../../src/projections';
import { relevantAccessRevocations } from '../../src/projections/access-revocations';
import {
  countOwnedDevices,
  DEVICE_SORT_FIELDS,
  DEVICES_COLLECTION,
  deviceSummariesForUser,
  findDeviceByInternalId,
  listDevicesForUser,
  listOnlineDevices,
  type DeviceDoc,
} from '../../src/projections/devices';
import { CHECKPOINT_NAME } from '../../src/projections/projector';
import { openMemoryReadModels } from '../../src/projections/read-models';
import { activeFamilyIds } from '../../src/projections/sessions';
import { findUserByEmail, USERS_COLLECTION, type UserDoc } from '../../src/projections/users';
import { projectedHistory } from '../support/projected-history';
import { openEventStore } from '../support/adapters';
import { snapshotReadModels } from '../support/snapshot';

/**
 * A start's replay (embedded mode, src/projections/read-models.ts) leaves the memory store's
 * indexes for later and indexes each document once, when the projector has caught up. Every
 * read model then answers what read models kept up one event at a time (as a live service
 * applies them) answer: each query the API asks, for every user and device.
 */

/** Each event on its own, as live appends arrive one at a time, into a store that indexes at each write. */
async function appliedOneByOne(events: readonly RecordedEvent[]): Promise<ReturnType<typeof createMemoryReadStore>> {
  const store = createMemoryReadStore();
  const projections = allProjections();
  for (const projection of projections) await projection.init(store);
  for (const event of events) {
    for (const projection of projections) {
      if (projection.streamPrefixes.some((prefix) => event.streamName.startsWith(prefix))) await projection.applyBatch([event], store);
    }
  }
  const last = events[events.length - 1];
  if (last !== undefined) await store.setCheckpoint(CHECKPOINT_NAME, formatPosition(last.position));
  return store;
}

/** What the API reads from the read models, for every user and device the live models hold. */
async function answers(store: ReadStore, live: ReadStore): Promise<unknown[]> {
  const users = await live.collection<UserDoc>(USERS_COLLECTION).find({});
  const devices = await live.collection<DeviceDoc>(DEVICES_COLLECTION).find({});
  const found: unknown[] = [await listOnlineDevices(store), await relevantAccessRevocations(store, new Date('2026-01-01T00:00:00.000Z'))];
  for (const user of users) {
    found.push(await findUserByEmail(store, user.email), await countOwnedDevices(store, user.id), await deviceSummariesForUser(store, user.id), await activeFamilyIds(store, user.id));
    for (const sort of DEVICE_SORT_FIELDS) {
      for (const order of ['asc', 'desc'] as const) {
        for (const online of [undefined, true, false]) {
          for (const page of [1, 2]) found.push(await listDevicesForUser(store, { userId: user.id, page, limit: 4, sort, order, online }));
        }
        found.push(await listDevicesForUser(store, { userId: user.id, page: 1, limit: 10, sort, order, roles: ['editor', 'viewer'] }));
      }
    }
  }
  for (const device of devices) found.push(await findDeviceByInternalId(store, device.internalId));
  return found;
}

describe('a start replaying the log answers as read models kept up one event at a time', () => {
  let source: Awaited<ReturnType<typeof openEventStore>>;
  let events: RecordedEvent[];
  let live: ReturnType<typeof createMemoryReadStore>;
  let expected: unknown[];

  beforeAll(async () => {
    source = await openEventStore('embedded');
    await generateWorkload(source.value, { targetEvents: 2500, seed: 11 });
    events = await projectedHistory(source.value);
    live = await appliedOneByOne(events);
    expected = await answers(live, live);
  }, 120_000);
  afterAll(async () => {
    await source.cleanup();
  });

  test('the workload touches devices in many batches (heartbeats, links, renames, deletions)', async () => {
    expect([...new Set(events.map((e) => e.type))]).toEqual(expect.arrayContaining(['DeviceRegistered', 'UserLinked', 'UserUnlinked', 'DeviceUpdated', 'DeviceDeleted', 'HeartbeatReceived']));
    expect((await listOnlineDevices(live)).length).toBeGreaterThan(0);
    expect(expected.filter((answer) => typeof answer === 'object' && answer !== null && 'total' in answer && (answer as { total: number }).total > 4).length).toBeGreaterThan(0);
  });

  test.each([
    ['the whole log', 0],
    ['the events after a start snapshot', 0.5],
  ])('replaying %s in small batches', async (_what, snapshotAt) => {
    const covered = Math.floor(events.length * snapshotAt);
    const initial = covered === 0 ? undefined : (await appliedOneByOne(events.slice(0, covered))).exportState();
    const readModels = await openMemoryReadModels(source.value, initial);
    try {
      // Small batches: a device's events fall in many of them, each a write of the device.
      const projector = await readModels.startProjector(allProjections(), { batchLimits: { maxEvents: 25, maxBytes: 4 * 1024 * 1024 } });
      await projector.caughtUp;
      expect(projector.progress().eventsApplied).toBe(events.length - covered);
      expect(await answers(readModels.readStore, live)).toEqual(expected);
      expect(await snapshotReadModels(readModels.readStore)).toEqual(await snapshotReadModels(live));
      await projector.stop();
    } finally {
      await readModels.close();
    }
  }, 120_000);
});
