import type { DeviceEvent, HeartbeatEvent } from '../../src/domain/device';
import { deviceStream, heartbeatStream } from '../../src/domain/events';
import type { RecordedEvent } from '../../src/infra/eventstore/port';
import { createMemoryReadStore } from '../../src/infra/readstore/memory';
import type { ReadStore } from '../../src/infra/readstore/port';
import {
  DEVICES_COLLECTION,
  countOwnedDevices,
  deviceSummariesForUser,
  devicesProjection,
  findDevice,
  listDevicesForUser,
  type DeviceDoc,
} from '../../src/projections/devices';

const uuid = '3f2b8c1e-9d4a-4e6b-8f1a-2c3d4e5f6a7b';
const T0 = '2025-03-01T08:00:00.000Z';
const T1 = '2025-03-01T08:01:00.000Z';
const T2 = '2025-03-01T08:02:00.000Z';
const T3 = '2025-03-01T08:03:00.000Z';

let position = 0n;
function recorded(event: DeviceEvent | HeartbeatEvent, stream = event.type === 'HeartbeatReceived' ? heartbeatStream(uuid) : deviceStream(uuid)): RecordedEvent {
  position += 7n; // positions grow with gaps
  return {
    id: `e-${position}`,
    streamName: stream,
    revision: 0n,
    position: { commit: position, prepare: position },
    type: event.type,
    data: event.data,
    metadata: { occurredAt: T0, actor: { type: 'system', id: 't' }, requestId: 'r', causationId: 'c', correlationId: 'c' },
  };
}

const registered = (id = 'id-1', at = T0, device = uuid): DeviceEvent => ({
  type: 'DeviceRegistered',
  data: { id, uuid: device, deviceId: 'HUB-1', name: 'Hub', ipAddress: null, port: '8123', metadata: null, gen: 0, registeredAt: at },
});
const linked = (userId: string, role: 'owner' | 'editor' | 'viewer', at = T0, device = uuid): DeviceEvent => ({
  type: 'UserLinked',
  data: { uuid: device, linkId: `link-${userId}`, userId, role, reactivated: false, createdAt: at, linkedAt: at },
});
const beat = (at: string): HeartbeatEvent => ({ type: 'HeartbeatReceived', data: { uuid, receivedAt: at } });

async function applyAll(store: ReadStore, events: readonly RecordedEvent[]): Promise<void> {
  for (const event of events) await devicesProjection.applyBatch([event], store);
}

async function allDocs(store: ReadStore): Promise<DeviceDoc[]> {
  return store.collection<DeviceDoc>(DEVICES_COLLECTION).find();
}

describe('devices projection', () => {
  let store: ReadStore;
  beforeEach(async () => {
    store = createMemoryReadStore();
    await devicesProjection.init(store);
  });

  test('given the life of a device, then one document with its active links and newest heartbeat', async () => {
    await applyAll(store, [
      recorded(registered()),
      recorded(linked('owner', 'owner')),
      recorded(linked('friend', 'viewer')),
      recorded(linked('gone', 'editor')),
      recorded({ type: 'UserRoleChanged', data: { uuid, linkId: 'link-friend', userId: 'friend', role: 'editor', previousRole: 'viewer', changedAt: T1 } }),
      recorded({ type: 'UserUnlinked', data: { uuid, linkId: 'link-gone', userId: 'gone', unlinkedAt: T1 } }),
      recorded({ type: 'DeviceWentOnline', data: { uuid, lastSeenAt: T1 } }),
      recorded(beat(T1)),
      recorded({ type: 'DeviceUpdated', data: { uuid, changes: { ipAddress: '10.0.0.2' }, source: 'heartbeat', updatedAt: T2 } }),
      recorded(beat(T2)),
      recorded({ type: 'DeviceTokenIssued', data: { uuid, gen: 1, issuedAt: T2 } }),
    ]);
    expect(await allDocs(store)).toEqual([
      {
        id: uuid,
        internalId: 'id-1',
        uuid,
        deviceId: 'HUB-1',
        name: 'Hub',
        ipAddress: '10.0.0.2',
        port: '8123',
        metadata: null,
        isOnline: true,
        lastSeenAt: T2,
        createdAt: T0,
        updatedAt: T2,
        users: [
          { userId: 'owner', role: 'owner', linkId: 'link-owner', createdAt: T0 },
          { userId: 'friend', role: 'editor', linkId: 'link-friend', createdAt: T0 },
        ],
        access: ['owner:owner', 'friend:editor'],
      },
    ]);
    expect(await countOwnedDevices(store, 'owner')).toBe(1);
    expect(await countOwnedDevices(store, 'friend')).toBe(0);
    expect(await deviceSummariesForUser(store, 'friend')).toEqual([{ id: 'id-1', name: 'Hub', role: 'editor', isOnline: true }]);
    expect(await deviceSummariesForUser(store, 'gone')).toEqual([]);
    expect((await findDevice(store, 'id-1'))?.uuid).toBe(uuid);
    expect((await findDevice(store, uuid))?.internalId).toBe('id-1');
  });

  test('ports, roles and link times kept as one text each read the same, fields in the same order', async () => {
    await applyAll(store, [
      recorded(registered()),
      recorded(linked('owner', 'owner')),
      recorded(linked('friend', 'viewer', T1)),
      recorded({ type: 'UserRoleChanged', data: { uuid, linkId: 'link-friend', userId: 'friend', role: 'owner', previousRole: 'viewer', changedAt: T2 } }),
      recorded({ type: 'DeviceUpdated', data: { uuid, changes: { port: '9000', name: 'Den' }, source: 'user', updatedAt: T2 } }),
      recorded({ type: 'DeviceUpdated', data: { uuid, changes: { port: '8123' }, source: 'user', updatedAt: T3 } }),
    ]);
    const [doc] = await allDocs(store);
    expect(JSON.stringify(doc)).toBe(
      JSON.stringify({
        id: uuid,
        internalId: 'id-1',
        uuid,
        deviceId: 'HUB-1',
        name: 'Den',
        ipAddress: null,
        port: '8123',
        metadata: null,
        isOnline: false,
        lastSeenAt: null,
        createdAt: T0,
        updatedAt: T3,
        users: [
          { userId: 'owner', role: 'owner', linkId: 'link-owner', createdAt: T0 },
          { userId: 'friend', role: 'owner', linkId: 'link-friend', createdAt: T1 },
        ],
        access: ['owner:owner', 'friend:owner'],
      }),
    );
    expect(await countOwnedDevices(store, 'friend')).toBe(1);
    expect((await listDevicesForUser(store, { userId: 'friend', page: 1, limit: 10, sort: 'createdAt', order: 'asc', roles: ['owner'] })).total).toBe(1);
    expect((await listDevicesForUser(store, { userId: 'friend', page: 1, limit: 10, sort: 'createdAt', order: 'asc', roles: ['viewer'] })).total).toBe(0);
  });

  test('the same events applied twice give the same documents', async () => {
    const events = [recorded(registered()), recorded(linked('owner', 'owner')), recorded({ type: 'DeviceWentOnline', data: { uuid, lastSeenAt: T1 } }), recorded(beat(T2))];
    await applyAll(store, events);
    const once = await allDocs(store);
    await applyAll(store, events);
    await applyAll(store, events.slice(1));
    expect(await allDocs(store)).toEqual(once);
  });

  test('going offline keeps lastSeenAt; an older heartbeat never moves it back', async () => {
    await applyAll(store, [
      recorded(registered()),
      recorded({ type: 'DeviceWentOnline', data: { uuid, lastSeenAt: T2 } }),
      recorded(beat(T1)),
      recorded({ type: 'DeviceWentOffline', data: { uuid, reason: 'heartbeat-timeout', lastSeenAt: T2, wentOfflineAt: T3 } }),
    ]);
    expect(await allDocs(store)).toEqual([expect.objectContaining({ isOnline: false, lastSeenAt: T2 })]);
  });

  test('a rebuild that no longer sees aged-out heartbeats still ends at the last one: the offline event names it', async () => {
    await applyAll(store, [
      recorded(registered()),
      recorded({ type: 'DeviceWentOnline', data: { uuid, lastSeenAt: T1 } }),
      recorded({ type: 'DeviceWentOffline', data: { uuid, reason: 'heartbeat-timeout', lastSeenAt: T2, wentOfflineAt: T3 } }),
    ]);
    expect(await allDocs(store)).toEqual([expect.objectContaining({ isOnline: false, lastSeenAt: T2 })]);
  });

  test('deletion removes the document; a registration again starts afresh and ignores heartbeats of the earlier life', async () => {
    await applyAll(store, [
      recorded(registered('id-1', T0)),
      recorded(linked('owner', 'owner')),
      recorded({ type: 'DeviceDeleted', data: { uuid, id: 'id-1', deletedAt: T1 } }),
    ]);
    expect(await allDocs(store)).toEqual([]);
    // A heartbeat of the deleted device, landing late, creates nothing.
    await applyAll(store, [recorded(beat(T1))]);
    expect(await allDocs(store)).toEqual([]);

    await applyAll(store, [recorded(registered('id-2', T2)), recorded(linked('next', 'owner', T2)), recorded(beat(T1))]);
    expect(await allDocs(store)).toEqual([
      expect.objectContaining({ internalId: 'id-2', lastSeenAt: null, users: [expect.objectContaining({ userId: 'next' })], access: ['next:owner'] }),
    ]);
    expect(await countOwnedDevices(store, 'owner')).toBe(0);
  });

  test('the list query pages the devices of one user with their roles', async () => {
    const second = 'aaaaaaaa-0000-4000-8000-000000000000';
    await applyAll(store, [recorded(registered()), recorded(linked('u', 'viewer'))]);
    await applyAll(store, [
      recorded(registered('id-2', T1, second), deviceStream(second)),
      recorded(linked('u', 'owner', T1, second), deviceStream(second)),
    ]);
    const page = await listDevicesForUser(store, { userId: 'u', page: 1, limit: 1, sort: 'createdAt', order: 'desc' });
    expect(page.total).toBe(2);
    expect(page.items.map(({ device, role }) => [device.uuid, role])).toEqual([[second, 'owner']]);
    const viewers = await listDevicesForUser(store, { userId: 'u', page: 1, limit: 10, sort: 'name', order: 'asc', roles: ['viewer'] });
    expect(viewers.items.map(({ device }) => device.uuid)).toEqual([uuid]);
    const created = await listDevicesForUser(store, { userId: 'u', page: 1, limit: 10, sort: 'createdAt', order: 'asc', createdAfter: T1 });
    expect(created.items.map(({ device }) => device.uuid)).toEqual([second]);
  });
});
