import { randomUUID } from 'node:crypto';
import { createStateCache, handleCommand, newCommandContext, type Clock } from '../../src/commands/handler';
import { createDeviceSnapshots, DEVICE_SNAPSHOT_EVENT, deviceSnapshotStream } from '../../src/commands/snapshots';
import { deviceDecider, type DeviceCommand, type DeviceState } from '../../src/domain/device';
import { deviceStream, heartbeatStream } from '../../src/domain/events';
import type { CredentialStore } from '../../src/infra/credentials/port';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import { comparePositions, type GlobalPosition } from '../../src/infra/eventstore/port';
import { createMemoryReadStore } from '../../src/infra/readstore/memory';
import { derivePrivacyKeys } from '../../src/privacy/crypto';
import { createPrivateEventStore } from '../../src/privacy/event-store';
import { createKeyring } from '../../src/privacy/keyring';
import { allProjections } from '../../src/projections';
import { DEVICES_COLLECTION, type DeviceDoc } from '../../src/projections/devices';
import { startProjector } from '../../src/projections/projector';
import { privateEventStoreEachTest } from '../support/private-event-store';

/**
 * Nothing but folds reads `snapshot-device-<uuid>`. The projector subscribes to every stream
 * (its position passes events no projection reads) and drops snapshots; it must not open them
 * on the way: opening a snapshot needs its device's data key, which a projector does not hold
 * during a storm of presence changes (they seal nothing), so each snapshot would cost it a key
 * store round trip (MongoDB, distributed) in its one pipeline, for an event it throws away.
 */

const fixture = privateEventStoreEachTest('hhc-review-snap-proj-', (dir) => openEmbeddedEventStore(dir));
const KEK = derivePrivacyKeys('k'.repeat(40)).keyEncryptionKey;

test('the projector passes a storm of presence changes and their snapshots without a data key lookup, and builds the same device', async () => {
  // The projector's process: a keyring of its own, over the same key store, whose lookups are counted.
  let lookups = 0;
  const counted: CredentialStore = {
    ...fixture.credentials,
    getDataKey: (subject) => {
      lookups++;
      return fixture.credentials.getDataKey(subject);
    },
    putDataKey: (s, k) => fixture.credentials.putDataKey(s, k),
    forget: (what) => fixture.credentials.forget(what),
    put: (u, v, h) => fixture.credentials.put(u, v, h),
    get: (u, v) => fixture.credentials.get(u, v),
    ping: () => fixture.credentials.ping(),
    close: async () => undefined,
  };
  let projectorNow = Date.parse('2026-11-28T08:00:00.000Z');
  const projectorStore = createPrivateEventStore(fixture.raw, { keyring: createKeyring(counted, KEK, () => projectorNow) });
  const readStore = createMemoryReadStore();
  let reached: GlobalPosition | null = null;
  let waiting: { position: GlobalPosition; resolve: () => void } | null = null;
  const projector = await startProjector(projectorStore, readStore, allProjections(), {
    onApplied: (position) => {
      reached = position;
      if (waiting !== null && comparePositions(position, waiting.position) >= 0) waiting.resolve();
    },
  });
  const applied = async (): Promise<void> => {
    const head = await fixture.raw.headPosition();
    if (head === null || (reached !== null && comparePositions(reached, head) >= 0)) return;
    await new Promise<void>((resolve) => (waiting = { position: head, resolve }));
  };

  try {
    let now = Date.parse('2026-11-28T08:00:00.000Z');
    const clock: Clock = { now: () => new Date(now) };
    const at = (): string => new Date((now += 1000)).toISOString();
    const uuid = randomUUID();
    const owner = randomUUID();
    const cache = createStateCache<DeviceState>(10);
    const snapshots = createDeviceSnapshots(fixture.store, 4, fixture.keyring);
    const run = async (command: DeviceCommand): Promise<void> => {
      await handleCommand(fixture.store, deviceDecider, deviceStream(uuid), command, newCommandContext({ type: 'user', id: owner }, randomUUID()), clock, { cache, snapshots });
    };
    await run({
      type: 'RegisterDevice',
      data: { id: randomUUID(), uuid, deviceId: 'HUB-PROJ', name: 'Projected hub', ipAddress: '10.3.3.3', metadata: { a: 1 }, actorUserId: owner, linkId: randomUUID(), ownedDeviceCount: 0, maxDevicesPerUser: 10, now: at() },
    });
    await applied();
    // Long after: the projector's key cache has let the device key go.
    projectorNow += 10 * 60_000;
    lookups = 0;

    // A storm: the hub drops off and comes back, again and again.
    for (let i = 0; i < 12; i++) {
      const beatAt = at();
      await fixture.store.append(heartbeatStream(uuid), [{ id: randomUUID(), type: 'HeartbeatReceived', data: { uuid, receivedAt: beatAt }, metadata: { occurredAt: beatAt, actor: { type: 'device', id: uuid }, requestId: 'r', causationId: 'c', correlationId: 'r' } }], 'any');
      await run({ type: 'RecordHeartbeat', data: { uuid, tokenGen: 0, now: beatAt } });
      now += 301_000;
      await run({ type: 'MarkOffline', data: { uuid, lastHeartbeatAt: beatAt, offlineAfterSeconds: 300, now: at() } });
    }
    let written = 0;
    for await (const event of fixture.store.readStream(deviceSnapshotStream(uuid))) if (event.type === DEVICE_SNAPSHOT_EVENT) written++;
    expect(written).toBeGreaterThanOrEqual(5);
    await applied();
    expect(lookups).toBe(0);
    const doc = await readStore.collection<DeviceDoc>(DEVICES_COLLECTION).get(uuid);
    expect(doc).toMatchObject({ name: 'Projected hub', isOnline: false });
  } finally {
    await projector.stop();
  }
});
