import { createStateCache, loadAggregate } from '../../src/commands/handler';
import { deviceDecider, type DeviceState } from '../../src/domain/device';
import { deviceStream } from '../../src/domain/events';
import type { EventStore, ReadStreamOptions } from '../../src/infra/eventstore/port';
import { createDeviceAccess } from '../../src/tunnel/access';
import { deviceStreamStore } from '../support/device-stream-store';

/**
 * The tunnel's device folds and the heartbeat path's are the same objects
 * (src/tunnel/access.ts, `shared`): a hub's device is folded once, not twice, and the tunnel
 * still sees what is newer than the shared fold.
 */

const { store: openStore, run, registered, lastEvent } = deviceStreamStore('hhc-access-shared-');

test('a fold of the shared cache is taken as it is, and an event it already covers keeps it', async () => {
  const store = openStore();
  const { uuid, owner, now } = await registered();
  const shared = createStateCache<DeviceState>(10);
  const fold = async () => loadAggregate(store, deviceDecider.evolve, deviceDecider.initialState, deviceStream(uuid));
  shared.set(deviceStream(uuid), await fold());
  const access = createDeviceAccess(store, { maxEntries: 10, now: () => Date.now(), shared });

  // Nothing newer in the stream: the shared fold itself.
  const first = await access.fresh(uuid);
  expect(first).toBe(shared.get(deviceStream(uuid)));
  expect(access.peek(uuid)).toBe(first);

  // A new token: the heartbeat path folded it already; the live feed's event keeps that fold.
  await run(uuid, owner, { type: 'IssueDeviceToken', data: { uuid, actorUserId: owner, now } });
  const issued = await lastEvent(uuid);
  const afterIssue = await fold();
  shared.set(deviceStream(uuid), afterIssue);
  access.apply(issued);
  expect(access.peek(uuid)).toBe(afterIssue);

  // Another one the shared cache has not seen: folded here, and newer than the shared fold.
  await run(uuid, owner, { type: 'IssueDeviceToken', data: { uuid, actorUserId: owner, now } });
  access.apply(await lastEvent(uuid));
  const own = access.peek(uuid);
  expect(own).not.toBe(shared.get(deviceStream(uuid)));
  expect(own?.state).toMatchObject({ status: 'active', gen: 2 });
  // And a fresh read starts from the newer of the two.
  expect((await access.fresh(uuid)).revision).toBe(own?.revision);
});

test('a fold the tunnel read is handed to the heartbeat path; one read behind the live feed is not', async () => {
  const store = openStore();
  const { uuid, owner, now } = await registered();
  const shared = createStateCache<DeviceState>(10);
  const access = createDeviceAccess(store, { maxEntries: 10, now: () => Date.now(), shared });

  // The handshake comes first (after a restart): its read is the heartbeat path's fold too.
  const first = await access.fresh(uuid);
  expect(shared.get(deviceStream(uuid))).toBe(first);

  // A new token is appended while a read is under way, and the feed hands it over before the
  // read is done: that read (which began before the append, so it ends before the new event) is
  // done again, and neither the tunnel nor the heartbeat path is left with the older fold.
  await run(uuid, owner, { type: 'IssueDeviceToken', data: { uuid, actorUserId: owner, now } });
  const issued = await lastEvent(uuid);
  let reads = 0;
  const behind: EventStore = Object.assign(Object.create(store) as EventStore, {
    readStream: (name: string, options?: ReadStreamOptions) => {
      reads++;
      if (reads > 1) return store.readStream(name, options);
      // The first read: what the stream held before the append.
      return (async function* () {
        for await (const event of store.readStream(name, options)) if (event.revision < issued.revision) yield event;
        access2.apply(issued);
      })();
    },
  });
  const cold = createStateCache<DeviceState>(10);
  const access2 = createDeviceAccess(behind, { maxEntries: 10, now: () => Date.now(), shared: cold });
  const read = await access2.fresh(uuid);
  expect(reads).toBe(2);
  expect(read.revision).toBe(issued.revision);
  expect(read.state).toMatchObject({ status: 'active', gen: 1 });
  expect(cold.get(deviceStream(uuid))).toBe(read);
});
