import { randomUUID } from 'node:crypto';
import { createStateCache } from '../../src/commands/handler';
import type { DeviceState } from '../../src/domain/device';
import { deviceStream } from '../../src/domain/events';
import type { EventStore, ReadStreamOptions } from '../../src/infra/eventstore/port';
import { createDeviceAccess } from '../../src/tunnel/access';
import { deviceStreamStore } from '../support/device-stream-store';

/**
 * The handshake's device read shared with the heartbeat path (src/tunnel/access.ts `shared`):
 * a change committed while handshakes' reads are under way, handed over by the live feed the
 * way src/tunnel/live-feed.ts does (`apply`, then the heartbeat path's fold forgotten), never
 * leaves either path with the fold from before it.
 */

const { store: openStore, run, lastEvent } = deviceStreamStore('hhc-storm-shared-');

test.each(['DeleteDevice', 'IssueDeviceToken'] as const)('%s committed while two handshakes of the hub are reading: both see it, and the heartbeat path keeps no fold from before it', async (change) => {
  const store = openStore();
  const uuid = randomUUID();
  const owner = randomUUID();
  const now = new Date().toISOString();
  await run(uuid, owner, { type: 'RegisterDevice', data: { id: randomUUID(), uuid, deviceId: 'HUB-1', name: 'Hub', actorUserId: owner, linkId: randomUUID(), ownedDeviceCount: 0, maxDevicesPerUser: 10, now } });
  await run(uuid, owner, { type: 'IssueDeviceToken', data: { uuid, actorUserId: owner, now } });
  const before = await lastEvent(uuid);

  // Reads wait at a gate; the first two see only what was there before the change.
  let release: () => void = () => undefined;
  const gate = new Promise<void>((resolve) => (release = resolve));
  let reads = 0;
  const gated: EventStore = Object.assign(Object.create(store) as EventStore, {
    readStream: (name: string, options?: ReadStreamOptions) => {
      const n = ++reads;
      return (async function* () {
        if (n <= 2) await gate;
        for await (const event of store.readStream(name, options)) if (n > 2 || event.revision <= before.revision) yield event;
      })();
    },
  });
  const shared = createStateCache<DeviceState>(10);
  const access = createDeviceAccess(gated, { maxEntries: 10, now: () => Date.now(), shared });
  const handshakes = [access.fresh(uuid), access.fresh(uuid)];

  await run(uuid, owner, change === 'DeleteDevice' ? { type: 'DeleteDevice', data: { uuid, actorUserId: owner, now } } : { type: 'IssueDeviceToken', data: { uuid, actorUserId: owner, now } });
  const changed = await lastEvent(uuid);
  // The live feed: the tunnel's fold first, then the heartbeat path's is forgotten.
  access.apply(changed);
  shared.forget(deviceStream(uuid));
  release();

  const folds = await Promise.all(handshakes);
  // Both gated reads came back behind the feed and were done again.
  expect(reads).toBeGreaterThan(2);
  expect(folds.map((f) => f.revision)).toEqual([changed.revision, changed.revision]);
  const kept = shared.get(deviceStream(uuid));
  expect(kept === undefined || kept.revision === changed.revision).toBe(true);
  if (change === 'DeleteDevice') expect(folds.map((f) => f.state.status)).toEqual(['deleted', 'deleted']);
  else expect(folds.map((f) => (f.state.status === 'active' ? f.state.gen : null))).toEqual([2, 2]);
});
