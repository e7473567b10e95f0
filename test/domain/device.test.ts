import { ConflictError, ForbiddenError, NotFoundError, UnauthorizedError } from '../../src/domain/errors';
import {
  DEVICE_PERMISSIONS,
  type DeviceCommand,
  type DeviceEvent,
  type DeviceRegistered,
  type DeviceRole,
  type RecordHeartbeat,
  ROLE_PERMISSIONS,
  activeRole,
  can,
  deviceDecider,
  heartbeatReceived,
  jsonEqual,
  offlineDeadline,
} from '../../src/domain/device';
import { EVENT_CATEGORY, asHomeHubEvent, heartbeatStream, parseStreamName, streamNames } from '../../src/domain/events';
import { spec } from '../support/decider-spec';

const uuid = '3f2b8c1e-9d4a-4e6b-8f1a-2c3d4e5f6a7b';
const deviceInternalId = 'a1111111-1111-4111-8111-111111111111';
const owner = 'u-owner';
const coOwner = 'u-co-owner';
const editor = 'u-editor';
const viewer = 'u-viewer';
const stranger = 'u-stranger';

const T0 = '2025-03-01T08:00:00.000Z';
const T1 = '2025-03-01T08:01:00.000Z';
const T2 = '2025-03-01T08:02:00.000Z';
const T3 = '2025-03-01T08:03:00.000Z';

const device = spec(deviceDecider);

// ---- commands ----

function register(overrides: Partial<Extract<DeviceCommand, { type: 'RegisterDevice' }>['data']> = {}): DeviceCommand {
  return {
    type: 'RegisterDevice',
    data: {
      id: deviceInternalId,
      uuid,
      deviceId: 'HUB-0001',
      name: 'Living room hub',
      actorUserId: owner,
      linkId: 'link-owner',
      ownedDeviceCount: 0,
      maxDevicesPerUser: 100,
      now: T0,
      ...overrides,
    },
  };
}

const update = (actorUserId: string, changes: Extract<DeviceCommand, { type: 'UpdateDevice' }>['data']['changes']): DeviceCommand => ({
  type: 'UpdateDevice',
  data: { uuid, actorUserId, changes, now: T2 },
});

const link = (actorUserId: string, targetUserId: string, role: DeviceRole, linkId = `link-${targetUserId}`): DeviceCommand => ({
  type: 'LinkUser',
  data: { uuid, actorUserId, targetUserId, role, linkId, now: T2 },
});

const unlink = (actorUserId: string, targetUserId: string): DeviceCommand => ({
  type: 'UnlinkUser',
  data: { uuid, actorUserId, targetUserId, now: T2 },
});

const remove = (actorUserId: string): DeviceCommand => ({ type: 'DeleteDevice', data: { uuid, actorUserId, now: T2 } });

const issueToken = (actorUserId: string, now = T2): DeviceCommand => ({
  type: 'IssueDeviceToken',
  data: { uuid, actorUserId, now },
});

function heartbeat(overrides: Partial<RecordHeartbeat['data']> = {}): RecordHeartbeat {
  return { type: 'RecordHeartbeat', data: { uuid, tokenGen: 1, now: T2, ...overrides } };
}

const markOffline = (lastHeartbeatAt: string | null, now: string): DeviceCommand => ({
  type: 'MarkOffline',
  data: { uuid, lastHeartbeatAt, offlineAfterSeconds: 300, now },
});

// ---- events ----

function registered(overrides: Partial<DeviceRegistered['data']> = {}): DeviceRegistered {
  return {
    type: 'DeviceRegistered',
    data: {
      id: deviceInternalId,
      uuid,
      deviceId: 'HUB-0001',
      name: 'Living room hub',
      ipAddress: null,
      port: '8123',
      metadata: null,
      gen: 0,
      registeredAt: T0,
      ...overrides,
    },
  };
}

const linked = (userId: string, role: DeviceRole, at = T0, extra: { reactivated?: boolean; createdAt?: string; linkId?: string } = {}): DeviceEvent => ({
  type: 'UserLinked',
  data: {
    uuid,
    linkId: extra.linkId ?? `link-${userId === owner ? 'owner' : userId}`,
    userId,
    role,
    reactivated: extra.reactivated ?? false,
    createdAt: extra.createdAt ?? at,
    linkedAt: at,
  },
});

const roleChanged = (userId: string, previousRole: DeviceRole, role: DeviceRole): DeviceEvent => ({
  type: 'UserRoleChanged',
  data: { uuid, linkId: `link-${userId === owner ? 'owner' : userId}`, userId, role, previousRole, changedAt: T2 },
});

const unlinked = (userId: string, at = T2): DeviceEvent => ({
  type: 'UserUnlinked',
  data: { uuid, linkId: `link-${userId === owner ? 'owner' : userId}`, userId, unlinkedAt: at },
});

const deleted = (at = T1): DeviceEvent => ({ type: 'DeviceDeleted', data: { uuid, id: deviceInternalId, deletedAt: at } });

const tokenIssued = (gen: number, at = T1): DeviceEvent => ({ type: 'DeviceTokenIssued', data: { uuid, gen, issuedAt: at } });

const wentOnline = (at: string): DeviceEvent => ({ type: 'DeviceWentOnline', data: { uuid, lastSeenAt: at } });

const wentOffline = (lastSeenAt: string, at: string): DeviceEvent => ({
  type: 'DeviceWentOffline',
  data: { uuid, reason: 'heartbeat-timeout', lastSeenAt, wentOfflineAt: at },
});

/** A registered device shared with an editor and a viewer. */
const shared: DeviceEvent[] = [registered(), linked(owner, 'owner'), linked(editor, 'editor', T1), linked(viewer, 'viewer', T1)];

describe('permission table', () => {
  it('matches the interface', () => {
    const table = Object.fromEntries(
      (['owner', 'editor', 'viewer'] as const).map((role) => [role, DEVICE_PERMISSIONS.filter((p) => can(role, p))]),
    );
    expect(table).toEqual({
      owner: ['View', 'Control', 'Settings', 'Delete', 'Share'],
      editor: ['View', 'Control'],
      viewer: ['View'],
    });
    expect(ROLE_PERMISSIONS.editor.Settings).toBe(false);
  });

  it('activeRole is null without an active link to an active device', () => {
    const state = device.given(shared).when(unlink(editor, editor)).result().state;
    expect(activeRole(state, owner)).toBe('owner');
    expect(activeRole(state, editor)).toBeNull();
    expect(activeRole(state, stranger)).toBeNull();
    const gone = device.given(shared).when(remove(owner)).result().state;
    expect(activeRole(gone, owner)).toBeNull();
  });
});

describe('RegisterDevice', () => {
  it('registers offline, with port 8123 by default, and makes the caller owner', () => {
    device.given([]).when(register()).then([registered(), linked(owner, 'owner')]);
    const { state } = device.given([]).when(register()).result();
    expect(state.status === 'active' && state.isOnline).toBe(false);
  });

  it('keeps ipAddress, port and metadata when given', () => {
    device
      .given([])
      .when(register({ ipAddress: '192.168.1.20', port: '8443', metadata: { fw: '1.2.3', zones: [1, 2] } }))
      .then([
        registered({ ipAddress: '192.168.1.20', port: '8443', metadata: { fw: '1.2.3', zones: [1, 2] } }),
        linked(owner, 'owner'),
      ]);
  });

  it('refuses a uuid that is already registered, whoever asks', () => {
    device.given(shared).when(register({ actorUserId: stranger, now: T2 })).thenThrows(ConflictError, 'Device already registered');
  });

  it('refuses beyond the device limit', () => {
    device.given([]).when(register({ ownedDeviceCount: 100 })).thenThrows(ConflictError, 'Device limit reached');
    device.given([]).when(register({ ownedDeviceCount: 3, maxDevicesPerUser: 3 })).thenThrows(ConflictError, 'Device limit reached');
  });

  it('accepts the last device within the limit', () => {
    device.given([]).when(register({ ownedDeviceCount: 99 })).then([registered(), linked(owner, 'owner')]);
  });

  it('registers a deleted uuid again: new id, fresh links, next token generation', () => {
    const history = [...shared, tokenIssued(1), tokenIssued(2), deleted(T2)];
    device
      .given(history)
      .when(register({ id: 'b2222222-2222-4222-8222-222222222222', actorUserId: viewer, linkId: 'link-2', now: T3 }))
      .then([
        registered({ id: 'b2222222-2222-4222-8222-222222222222', gen: 3, registeredAt: T3 }),
        linked(viewer, 'owner', T3, { linkId: 'link-2' }),
      ]);
    const { state } = device
      .given(history)
      .when(register({ actorUserId: viewer, linkId: 'link-2', now: T3 }))
      .result();
    expect(activeRole(state, viewer)).toBe('owner');
    expect(activeRole(state, owner)).toBeNull();
    expect(activeRole(state, editor)).toBeNull();
  });
});

describe('UpdateDevice', () => {
  it('emits only the fields that changed', () => {
    device
      .given(shared)
      .when(update(owner, { name: 'Kitchen hub', port: '8123', ipAddress: '10.0.0.5' }))
      .then([{ type: 'DeviceUpdated', data: { uuid, changes: { name: 'Kitchen hub', ipAddress: '10.0.0.5' }, source: 'user', updatedAt: T2 } }]);
  });

  it('emits nothing when nothing changed', () => {
    device.given(shared).when(update(owner, { name: 'Living room hub', port: '8123' })).thenNothing();
    device.given(shared).when(update(owner, {})).thenNothing();
  });

  it('compares metadata by value, whatever the key order', () => {
    const history = [registered({ metadata: { a: 1, b: { c: [1, 2] } } }), linked(owner, 'owner')];
    device.given(history).when(update(owner, { metadata: { b: { c: [1, 2] }, a: 1 } })).thenNothing();
    device
      .given(history)
      .when(update(owner, { metadata: { a: 1, b: { c: [2, 1] } } }))
      .then([{ type: 'DeviceUpdated', data: { uuid, changes: { metadata: { a: 1, b: { c: [2, 1] } } }, source: 'user', updatedAt: T2 } }]);
  });

  it('applies the changes to the state', () => {
    const { state } = device.given(shared).when(update(owner, { name: 'Kitchen hub' })).result();
    expect(state.status === 'active' && [state.name, state.updatedAt]).toEqual(['Kitchen hub', T2]);
  });

  it('is for owners only', () => {
    for (const user of [editor, viewer]) {
      device
        .given(shared)
        .when(update(user, { name: 'Mine now' }))
        .thenThrows(ForbiddenError, 'Only the device owner can update device settings');
    }
  });

  it('hides the device from a caller without an active link', () => {
    device.given(shared).when(update(stranger, { name: 'x' })).thenThrows(NotFoundError, 'Device not found');
    device
      .given([...shared, unlinked(editor, T1)])
      .when(update(editor, { name: 'x' }))
      .thenThrows(NotFoundError, 'Device not found');
  });
});

describe('LinkUser', () => {
  it('links a new user with the given role', () => {
    device.given(shared).when(link(owner, stranger, 'viewer')).then([linked(stranger, 'viewer', T2)]);
  });

  it('changes the role of an existing link', () => {
    device.given(shared).when(link(owner, viewer, 'editor')).then([roleChanged(viewer, 'viewer', 'editor')]);
    device.given(shared).when(link(owner, editor, 'owner')).then([roleChanged(editor, 'editor', 'owner')]);
  });

  it('emits nothing when the link already has that role', () => {
    device.given(shared).when(link(owner, editor, 'editor')).thenNothing();
  });

  it('reactivates an inactive link, keeping its id and creation time, with the new role', () => {
    device
      .given([...shared, unlinked(viewer, T1)])
      .when(link(owner, viewer, 'editor', 'unused-link-id'))
      .then([linked(viewer, 'editor', T2, { reactivated: true, createdAt: T1 })]);
  });

  it('is for owners only (Share)', () => {
    device.given(shared).when(link(editor, stranger, 'viewer')).thenThrows(ForbiddenError, 'Only the device owner can share the device');
    device.given(shared).when(link(viewer, stranger, 'viewer')).thenThrows(ForbiddenError);
  });

  it('hides the device from a caller without an active link', () => {
    device.given(shared).when(link(stranger, stranger, 'owner')).thenThrows(NotFoundError, 'Device not found');
  });

  it('refuses to demote the last owner', () => {
    device.given(shared).when(link(owner, owner, 'editor')).thenThrows(ConflictError, 'A device must keep at least one owner');
  });

  it('lets one of two owners step down', () => {
    device
      .given([...shared, linked(coOwner, 'owner', T1)])
      .when(link(owner, owner, 'viewer'))
      .then([roleChanged(owner, 'owner', 'viewer')]);
  });

  it('does not count an inactive owner link as an owner', () => {
    device
      .given([...shared, linked(coOwner, 'owner', T1), unlinked(coOwner, T1)])
      .when(link(owner, owner, 'viewer'))
      .thenThrows(ConflictError, 'A device must keep at least one owner');
  });

  it('gives the new owner every permission', () => {
    const { state } = device.given(shared).when(link(owner, editor, 'owner')).result();
    expect(activeRole(state, editor)).toBe('owner');
  });
});

describe('UnlinkUser', () => {
  it('lets the owner remove anyone', () => {
    device.given(shared).when(unlink(owner, editor)).then([unlinked(editor)]);
    device.given(shared).when(unlink(owner, viewer)).then([unlinked(viewer)]);
  });

  it('lets a linked user remove themselves', () => {
    device.given(shared).when(unlink(viewer, viewer)).then([unlinked(viewer)]);
    device.given(shared).when(unlink(editor, editor)).then([unlinked(editor)]);
  });

  it('keeps the link, inactive', () => {
    const { state } = device.given(shared).when(unlink(owner, viewer)).result();
    expect(state.status === 'active' && state.links[viewer]).toMatchObject({ isActive: false, role: 'viewer', linkId: 'link-u-viewer' });
  });

  it('forbids a non-owner to remove someone else', () => {
    device.given(shared).when(unlink(editor, viewer)).thenThrows(ForbiddenError, 'Only the device owner can remove other users');
    device.given(shared).when(unlink(viewer, owner)).thenThrows(ForbiddenError, 'Only the device owner can remove other users');
  });

  it('hides the device from a caller without an active link', () => {
    device.given(shared).when(unlink(stranger, viewer)).thenThrows(NotFoundError, 'Device not found');
    device.given([...shared, unlinked(viewer, T1)]).when(unlink(viewer, viewer)).thenThrows(NotFoundError, 'Device not found');
  });

  it('refuses to remove a user who is not linked, or no longer', () => {
    device.given(shared).when(unlink(owner, stranger)).thenThrows(NotFoundError, 'User is not linked to this device');
    device.given([...shared, unlinked(viewer, T1)]).when(unlink(owner, viewer)).thenThrows(NotFoundError, 'User is not linked to this device');
  });

  it('refuses to let the last owner leave', () => {
    device.given(shared).when(unlink(owner, owner)).thenThrows(ConflictError, 'A device must keep at least one owner');
  });

  it('lets an owner leave when another owner stays, or remove a co-owner', () => {
    const twoOwners = [...shared, linked(coOwner, 'owner', T1)];
    device.given(twoOwners).when(unlink(owner, owner)).then([unlinked(owner)]);
    device.given(twoOwners).when(unlink(owner, coOwner)).then([unlinked(coOwner)]);
  });
});

describe('DeleteDevice', () => {
  it('deletes for the owner', () => {
    device.given(shared).when(remove(owner)).then([deleted(T2)]);
  });

  it('leaves every link inactive and the device offline', () => {
    const { state } = device.given([...shared, tokenIssued(1), wentOnline(T1)]).when(remove(owner)).result();
    expect(state.status).toBe('deleted');
    expect(state.status !== 'none' && Object.values(state.links).every((l) => !l.isActive)).toBe(true);
    expect(state.status !== 'none' && state.isOnline).toBe(false);
  });

  it('is for owners only', () => {
    device.given(shared).when(remove(editor)).thenThrows(ForbiddenError, 'Only the device owner can delete the device');
    device.given(shared).when(remove(viewer)).thenThrows(ForbiddenError, 'Only the device owner can delete the device');
    device.given(shared).when(remove(stranger)).thenThrows(NotFoundError, 'Device not found');
  });
});

describe('IssueDeviceToken', () => {
  it('increments the token generation each time', () => {
    device.given(shared).when(issueToken(owner)).then([tokenIssued(1, T2)]);
    device.given([...shared, tokenIssued(1)]).when(issueToken(owner)).then([tokenIssued(2, T2)]);
    device.given([...shared, tokenIssued(1), tokenIssued(2)]).when(issueToken(owner, T3)).then([tokenIssued(3, T3)]);
  });

  it('is for owners only', () => {
    device.given(shared).when(issueToken(editor)).thenThrows(ForbiddenError, 'Only the device owner can request a device token');
    device.given(shared).when(issueToken(viewer)).thenThrows(ForbiddenError);
    device.given(shared).when(issueToken(stranger)).thenThrows(NotFoundError, 'Device not found');
  });

  it('keeps counting after the device is deleted and registered again', () => {
    const history = [...shared, tokenIssued(1), deleted(T2), registered({ gen: 2, registeredAt: T3 }), linked(owner, 'owner', T3)];
    device.given(history).when(issueToken(owner, T3)).then([tokenIssued(3, T3)]);
  });
});

describe('RecordHeartbeat', () => {
  const withToken = [...shared, tokenIssued(1)];

  it('brings an offline device online', () => {
    device.given(withToken).when(heartbeat()).then([wentOnline(T2)]);
  });

  it('emits nothing for an online device when nothing changed', () => {
    device.given([...withToken, wentOnline(T1)]).when(heartbeat()).thenNothing();
    device.given([...withToken, wentOnline(T1)]).when(heartbeat({ ipAddress: undefined, metadata: undefined })).thenNothing();
  });

  it('updates ipAddress and metadata when they changed', () => {
    device
      .given([...withToken, wentOnline(T1)])
      .when(heartbeat({ ipAddress: '10.0.0.9', metadata: { uptime: 12 } }))
      .then([{ type: 'DeviceUpdated', data: { uuid, changes: { ipAddress: '10.0.0.9', metadata: { uptime: 12 } }, source: 'heartbeat', updatedAt: T2 } }]);
  });

  it('goes online and updates in one heartbeat', () => {
    device
      .given(withToken)
      .when(heartbeat({ ipAddress: '10.0.0.9' }))
      .then([wentOnline(T2), { type: 'DeviceUpdated', data: { uuid, changes: { ipAddress: '10.0.0.9' }, source: 'heartbeat', updatedAt: T2 } }]);
  });

  it('comes back online after going offline', () => {
    device.given([...withToken, wentOnline(T0), wentOffline(T0, T1)]).when(heartbeat({ now: T3 })).then([wentOnline(T3)]);
  });

  it('refuses a token of an older generation', () => {
    device.given([...withToken, tokenIssued(2)]).when(heartbeat({ tokenGen: 1 })).thenThrows(UnauthorizedError, 'Token has been revoked');
  });

  it('refuses a token of a deleted device, and of its previous life after re-registration', () => {
    device.given([...withToken, deleted(T2)]).when(heartbeat({ now: T3 })).thenThrows(UnauthorizedError, 'Token has been revoked');
    device
      .given([...withToken, deleted(T2), registered({ gen: 2, registeredAt: T3 }), linked(owner, 'owner', T3)])
      .when(heartbeat({ tokenGen: 1, now: T3 }))
      .thenThrows(UnauthorizedError, 'Token has been revoked');
  });

  it('builds the tiny heartbeat event for heartbeat-<uuid>', () => {
    expect(heartbeatReceived(heartbeat({ ipAddress: '10.0.0.9', metadata: { big: 'x' } }))).toEqual({
      type: 'HeartbeatReceived',
      data: { uuid, receivedAt: T2 },
    });
  });
});

describe('MarkOffline', () => {
  const online = [...shared, tokenIssued(1), wentOnline('2025-03-01T08:00:30.000Z')];

  it('takes a device offline once its last heartbeat is older than the timeout', () => {
    device
      .given(online)
      .when(markOffline('2025-03-01T08:00:30.000Z', '2025-03-01T08:05:30.000Z'))
      .then([wentOffline('2025-03-01T08:00:30.000Z', '2025-03-01T08:05:30.000Z')]);
  });

  it('is ignored when a newer heartbeat arrived than the one the expiry was scheduled for', () => {
    device.given(online).when(markOffline('2025-03-01T08:04:00.000Z', '2025-03-01T08:05:30.000Z')).thenNothing();
  });

  it('uses the newest heartbeat it knows, from the command or the device stream', () => {
    const onlineLater = [...shared, tokenIssued(1), wentOnline('2025-03-01T08:04:00.000Z')];
    device.given(onlineLater).when(markOffline('2025-03-01T08:00:30.000Z', '2025-03-01T08:05:30.000Z')).thenNothing();
    device
      .given(onlineLater)
      .when(markOffline(null, '2025-03-01T08:09:00.000Z'))
      .then([wentOffline('2025-03-01T08:04:00.000Z', '2025-03-01T08:09:00.000Z')]);
  });

  it('tells the job when to look again', () => {
    const { state } = device.given(online).when(markOffline(null, T1)).result();
    expect(offlineDeadline(state, '2025-03-01T08:04:00.000Z', 300)).toBe('2025-03-01T08:09:00.000Z');
    const offline = device.given([...online, wentOffline(T0, T3)]).when(markOffline(null, T3)).result().state;
    expect(offlineDeadline(offline, null, 300)).toBeNull();
  });

  it('is ignored when the device is already offline', () => {
    device.given([...shared, tokenIssued(1)]).when(markOffline(T0, T3)).thenNothing();
    device
      .given([...online, wentOffline('2025-03-01T08:00:30.000Z', '2025-03-01T08:05:30.000Z')])
      .when(markOffline('2025-03-01T08:00:30.000Z', '2025-03-01T08:06:00.000Z'))
      .thenNothing();
  });

  it('is ignored for a deleted or unknown device', () => {
    device.given([...online, deleted(T3)]).when(markOffline('2025-03-01T08:00:30.000Z', '2025-03-01T09:00:00.000Z')).thenNothing();
    device.given([]).when(markOffline(null, T3)).thenNothing();
  });

  it('marks the state offline', () => {
    const { state } = device.given(online).when(markOffline(null, '2025-03-01T08:06:00.000Z')).result();
    expect(state.status === 'active' && state.isOnline).toBe(false);
  });
});

describe('a deleted device', () => {
  const gone = [...shared, tokenIssued(1), deleted(T1)];
  const commands: [string, DeviceCommand][] = [
    ['UpdateDevice', update(owner, { name: 'x' })],
    ['LinkUser', link(owner, stranger, 'viewer')],
    ['UnlinkUser', unlink(owner, viewer)],
    ['DeleteDevice', remove(owner)],
    ['IssueDeviceToken', issueToken(owner)],
  ];

  it.each(commands)('refuses %s with 404', (_name, command) => {
    device.given(gone).when(command).thenThrows(NotFoundError, 'Device not found');
  });

  it.each(commands)('refuses %s on a device never registered with 404', (_name, command) => {
    device.given([]).when(command).thenThrows(NotFoundError, 'Device not found');
  });

  it('continues the same history when registered again', () => {
    const again = [...gone, registered({ id: 'c3', gen: 2, registeredAt: T2 }), linked(owner, 'owner', T2)];
    device.given(again).when(update(owner, { name: 'Back again' })).then([
      { type: 'DeviceUpdated', data: { uuid, changes: { name: 'Back again' }, source: 'user', updatedAt: T2 } },
    ]);
    device
      .given(again)
      .when(link(owner, editor, 'viewer', 'link-fresh'))
      .then([linked(editor, 'viewer', T2, { linkId: 'link-fresh' })]);
    const { state } = device.given(again).when(issueToken(owner)).result();
    expect(state.status === 'active' && [state.id, state.gen, state.createdAt]).toEqual(['c3', 3, T2]);
  });
});

describe('jsonEqual', () => {
  it('compares JSON structurally', () => {
    expect(jsonEqual({ a: [1, { b: null }] }, { a: [1, { b: null }] })).toBe(true);
    expect(jsonEqual({ a: 1 }, { a: 1, b: 2 })).toBe(false);
    expect(jsonEqual([1, 2], { 0: 1, 1: 2 })).toBe(false);
    expect(jsonEqual(null, {})).toBe(false);
    expect(jsonEqual('1', 1)).toBe(false);
  });
});

describe('no secret in any device event', () => {
  it('never carries a token, only its generation', () => {
    const { events } = device.given(shared).when(issueToken(owner)).result();
    expect(JSON.stringify(events)).not.toMatch(/"token"|eyJ/);
    expect(Object.keys(events[0]?.data ?? {}).sort()).toEqual(['gen', 'issuedAt', 'uuid']);
  });
});

describe('stream names', () => {
  it('names and parses the streams of every aggregate', () => {
    expect(streamNames.deviceStream(uuid)).toBe(`device-${uuid}`);
    expect(heartbeatStream(uuid)).toBe(`heartbeat-${uuid}`);
    expect(streamNames.userStream('u1')).toBe('user-u1');
    expect(streamNames.sessionStream('f1')).toBe('session-f1');
    expect(parseStreamName(`heartbeat-${uuid}`)).toEqual({ category: 'heartbeat', id: uuid });
    expect(parseStreamName('session-f1')).toEqual({ category: 'session', id: 'f1' });
    expect(parseStreamName('email-jane@example.com')).toBeNull();
    expect(parseStreamName('device-')).toBeNull();
  });

  it('types stored events it knows and skips the others', () => {
    expect(asHomeHubEvent({ type: 'DeviceDeleted', data: deleted().data })).toEqual(deleted());
    expect(asHomeHubEvent({ type: 'SomethingElse', data: {} })).toBeNull();
    expect(EVENT_CATEGORY.HeartbeatReceived).toBe('heartbeat');
    expect(EVENT_CATEGORY.UserLinked).toBe('device');
  });
});

describe('the fold keeps one text where several say the same', () => {
  test('from events decoded apart (strings of their own), the same state, fields in the same order', () => {
    // Each event as the log hands it out: parsed on its own, no string shared with another.
    const decoded = (event: DeviceEvent): DeviceEvent => JSON.parse(JSON.stringify(event)) as DeviceEvent;
    const events: DeviceEvent[] = [
      { type: 'DeviceRegistered', data: { id: deviceInternalId, uuid, deviceId: 'HUB-0001', name: 'Hub', ipAddress: null, port: '8123', metadata: null, gen: 0, registeredAt: T0 } },
      { type: 'UserLinked', data: { uuid, linkId: 'link-owner', userId: owner, role: 'owner', reactivated: false, createdAt: T0, linkedAt: T0 } },
      { type: 'UserLinked', data: { uuid, linkId: 'link-viewer', userId: viewer, role: 'viewer', reactivated: false, createdAt: T1, linkedAt: T1 } },
      { type: 'UserRoleChanged', data: { uuid, linkId: 'link-viewer', userId: viewer, role: 'editor', previousRole: 'viewer', changedAt: T2 } },
      { type: 'DeviceUpdated', data: { uuid, changes: { port: '9000' }, source: 'user', updatedAt: T2 } },
      { type: 'DeviceUpdated', data: { uuid, changes: { port: '8123', name: 'Den' }, source: 'user', updatedAt: T3 } },
    ];
    const state = events.map(decoded).reduce(deviceDecider.evolve, deviceDecider.initialState());
    expect(JSON.stringify(state)).toBe(
      JSON.stringify({
        status: 'active',
        id: deviceInternalId,
        uuid,
        deviceId: 'HUB-0001',
        name: 'Den',
        ipAddress: null,
        port: '8123',
        metadata: null,
        links: {
          [owner]: { linkId: 'link-owner', userId: owner, role: 'owner', isActive: true, createdAt: T0, updatedAt: T0 },
          [viewer]: { linkId: 'link-viewer', userId: viewer, role: 'editor', isActive: true, createdAt: T1, updatedAt: T2 },
        },
        gen: 0,
        isOnline: false,
        lastSeenAt: null,
        createdAt: T0,
        updatedAt: T3,
      }),
    );
    expect(state).toEqual(events.reduce(deviceDecider.evolve, deviceDecider.initialState()));
  });
});
