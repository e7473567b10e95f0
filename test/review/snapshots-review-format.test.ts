import { DEVICE_SNAPSHOT_FORMAT } from '../../src/commands/snapshots';
import { deviceDecider, type DeviceEvent, type DeviceState } from '../../src/domain/device';

/**
 * A device snapshot holds a fold (DeviceState) made by the build that wrote it, and a cold fold
 * trusts it as the fold of the events up to its revision. A later build that folds differently
 * (a field added to DeviceState, an event folded otherwise) must bump DEVICE_SNAPSHOT_FORMAT, or
 * it goes on from states the old build made, and its folds differ from the folds of whole streams
 * (a token generation or a link kept that the new fold would not keep). This pins what format 1
 * folds: when it fails, bump the format and pin the new folds here.
 */

const U = '00000000-0000-4000-8000-00000000d001';
const A = '00000000-0000-4000-8000-0000000000a1';
const B = '00000000-0000-4000-8000-0000000000b2';

/** Every device event type, one registration and the start of another. */
const EVENTS: readonly DeviceEvent[] = [
  { type: 'DeviceRegistered', data: { id: 'id-1', uuid: U, deviceId: 'HUB-F', name: 'Hall', ipAddress: '10.0.0.1', port: '8080', metadata: { floor: 1 }, gen: 0, registeredAt: '2026-01-01T00:00:00.000Z' } },
  { type: 'UserLinked', data: { uuid: U, linkId: 'l-a', userId: A, role: 'owner', reactivated: false, createdAt: '2026-01-01T00:00:00.000Z', linkedAt: '2026-01-01T00:00:00.000Z' } },
  { type: 'UserLinked', data: { uuid: U, linkId: 'l-b', userId: B, role: 'viewer', reactivated: false, createdAt: '2026-01-02T00:00:00.000Z', linkedAt: '2026-01-02T00:00:00.000Z' } },
  { type: 'UserRoleChanged', data: { uuid: U, linkId: 'l-b', userId: B, role: 'editor', previousRole: 'viewer', changedAt: '2026-01-03T00:00:00.000Z' } },
  { type: 'DeviceUpdated', data: { uuid: U, changes: { name: 'Attic', ipAddress: '10.0.0.2', port: '9090', metadata: { floor: 3 } }, source: 'user', updatedAt: '2026-01-04T00:00:00.000Z' } },
  { type: 'DeviceTokenIssued', data: { uuid: U, gen: 1, issuedAt: '2026-01-05T00:00:00.000Z' } },
  { type: 'DeviceWentOnline', data: { uuid: U, lastSeenAt: '2026-01-06T00:00:00.000Z' } },
  { type: 'DeviceWentOffline', data: { uuid: U, reason: 'heartbeat-timeout', lastSeenAt: null, wentOfflineAt: '2026-01-06T00:05:00.000Z' } },
  { type: 'DeviceWentOnline', data: { uuid: U, lastSeenAt: '2026-01-07T00:00:00.000Z' } },
  { type: 'DeviceWentOffline', data: { uuid: U, reason: 'heartbeat-timeout', lastSeenAt: '2026-01-07T00:01:00.000Z', wentOfflineAt: '2026-01-07T00:06:00.000Z' } },
  { type: 'UserUnlinked', data: { uuid: U, linkId: 'l-b', userId: B, unlinkedAt: '2026-01-08T00:00:00.000Z' } },
  { type: 'DeviceDeleted', data: { uuid: U, id: 'id-1', deletedAt: '2026-01-09T00:00:00.000Z' } },
  { type: 'DeviceRegistered', data: { id: 'id-2', uuid: U, deviceId: 'HUB-F', name: 'Cellar', ipAddress: null, port: '8080', metadata: null, gen: 2, registeredAt: '2026-01-10T00:00:00.000Z' } },
];

const foldOf = (events: readonly DeviceEvent[]): DeviceState => events.reduce(deviceDecider.evolve, deviceDecider.initialState());

const link = (linkId: string, userId: string, role: string, isActive: boolean, createdAt: string, updatedAt: string): Record<string, unknown> => ({ linkId, userId, role, isActive, createdAt, updatedAt });
const attic = {
  id: 'id-1',
  uuid: U,
  deviceId: 'HUB-F',
  name: 'Attic',
  ipAddress: '10.0.0.2',
  port: '9090',
  metadata: { floor: 3 },
  gen: 1,
  isOnline: false,
  lastSeenAt: '2026-01-07T00:01:00.000Z',
  createdAt: '2026-01-01T00:00:00.000Z',
};

test('DEVICE_SNAPSHOT_FORMAT names what a snapshot holds: these folds are format 1 (a change here bumps it)', () => {
  expect(DEVICE_SNAPSHOT_FORMAT).toBe(1);
  const after = (n: number): DeviceState => foldOf(EVENTS.slice(0, n));
  expect(after(10)).toStrictEqual({
    status: 'active',
    ...attic,
    links: {
      [A]: link('l-a', A, 'owner', true, '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z'),
      [B]: link('l-b', B, 'editor', true, '2026-01-02T00:00:00.000Z', '2026-01-03T00:00:00.000Z'),
    },
    updatedAt: '2026-01-04T00:00:00.000Z',
  });
  expect(after(12)).toStrictEqual({
    status: 'deleted',
    ...attic,
    links: {
      [A]: link('l-a', A, 'owner', false, '2026-01-01T00:00:00.000Z', '2026-01-09T00:00:00.000Z'),
      [B]: link('l-b', B, 'editor', false, '2026-01-02T00:00:00.000Z', '2026-01-08T00:00:00.000Z'),
    },
    updatedAt: '2026-01-09T00:00:00.000Z',
  });
  expect(after(13)).toStrictEqual({
    status: 'active',
    id: 'id-2',
    uuid: U,
    deviceId: 'HUB-F',
    name: 'Cellar',
    ipAddress: null,
    port: '8080',
    metadata: null,
    links: {},
    gen: 2,
    isOnline: false,
    lastSeenAt: null,
    createdAt: '2026-01-10T00:00:00.000Z',
    updatedAt: '2026-01-10T00:00:00.000Z',
  });
  // A snapshot read back (JSON) folds on exactly as the state it was taken from.
  for (let n = 1; n <= EVENTS.length; n++) {
    const stored = JSON.parse(JSON.stringify(after(n))) as DeviceState;
    expect(EVENTS.slice(n).reduce(deviceDecider.evolve, stored)).toStrictEqual(after(EVENTS.length));
  }
});
