/**
 * The device aggregate, stream `device-<deviceUuid>`: its decider. Its state, commands and
 * events, and the heartbeat events of `heartbeat-<deviceUuid>`, are in `device-model.ts`
 * (re-exported here, so `./device` is the one place to import from).
 *
 * Life cycle: none → active → deleted → active (registered again) → ... The stream keeps
 * the whole history. Each registration is a fresh start: a new internal `id` (carried by
 * the command), no links but the registrant's, offline. Only the token generation `gen`
 * survives, and moves on, so that no device token of an earlier life validates again.
 */
import type { Decider } from './messages';
import { ConflictError, ForbiddenError, NotFoundError, UnauthorizedError } from './errors';
import {
  DEFAULT_DEVICE_PORT,
  DEVICE_MESSAGES,
  activeRole,
  can,
  jsonEqual,
  type ActiveDevice,
  type ConfirmPresence,
  type DeleteDevice,
  type DeviceChanges,
  type DeviceCommand,
  type DeviceEvent,
  type DeviceLink,
  type DevicePermission,
  type DeviceState,
  type IssueDeviceToken,
  type LinkUser,
  type MarkOffline,
  type RecordHeartbeat,
  type RegisterDevice,
  type UnlinkUser,
  type UpdateDevice,
  sharedPort,
  sharedRole,
  sharedText,
} from './device-model';

export * from './device-model';

// ---------------------------------------------------------------------------------------
// Helpers

function plusSeconds(iso: string, seconds: number): string {
  // Pure date arithmetic on a time the command carries, not a clock read.
  return new Date(Date.parse(iso) + seconds * 1000).toISOString();
}

function later(a: string | null, b: string | null): string | null {
  if (a === null) return b;
  if (b === null) return a;
  return Date.parse(a) >= Date.parse(b) ? a : b;
}

/**
 * When an online device is due offline: the later of the newest heartbeat the caller knows
 * and the one the device stream recorded, plus the timeout. Null when it is not online.
 * The expiry job re-delays itself to this instant when `MarkOffline` emitted nothing.
 */
export function offlineDeadline(
  state: DeviceState,
  lastHeartbeatAt: string | null,
  offlineAfterSeconds: number,
): string | null {
  if (state.status !== 'active' || !state.isOnline) return null;
  const last = later(lastHeartbeatAt, state.lastSeenAt) ?? state.updatedAt;
  return plusSeconds(last, offlineAfterSeconds);
}

/** 404 without an active link (the device's existence stays hidden), 403 without the permission. */
function authorize(
  state: DeviceState,
  actorUserId: string,
  permission: DevicePermission,
  forbiddenMessage: string,
): ActiveDevice {
  if (state.status !== 'active') throw new NotFoundError(DEVICE_MESSAGES.notFound);
  const role = activeRole(state, actorUserId);
  if (role === null) throw new NotFoundError(DEVICE_MESSAGES.notFound);
  if (!can(role, permission)) throw new ForbiddenError(forbiddenMessage);
  return state;
}

function activeOwnerCount(device: ActiveDevice): number {
  return Object.values(device.links).filter((link) => link.isActive && link.role === 'owner').length;
}

function requireAnotherOwner(device: ActiveDevice, leavingUserId: string): void {
  const leaving = device.links[leavingUserId];
  const isActiveOwner = leaving !== undefined && leaving.isActive && leaving.role === 'owner';
  if (isActiveOwner && activeOwnerCount(device) <= 1) throw new ConflictError(DEVICE_MESSAGES.lastOwner);
}

function changedFields(device: ActiveDevice, changes: DeviceChanges): DeviceChanges {
  return {
    ...(changes.name !== undefined && changes.name !== device.name ? { name: changes.name } : {}),
    ...(changes.ipAddress !== undefined && changes.ipAddress !== device.ipAddress ? { ipAddress: changes.ipAddress } : {}),
    ...(changes.port !== undefined && changes.port !== device.port ? { port: changes.port } : {}),
    ...(changes.metadata !== undefined && !jsonEqual(changes.metadata, device.metadata)
      ? { metadata: changes.metadata }
      : {}),
  };
}

function isEmpty(changes: DeviceChanges): boolean {
  return Object.keys(changes).length === 0;
}

// ---------------------------------------------------------------------------------------
// Decide

function decideRegister(command: RegisterDevice, state: DeviceState): DeviceEvent[] {
  const c = command.data;
  if (state.status === 'active') throw new ConflictError(DEVICE_MESSAGES.alreadyRegistered);
  if (c.ownedDeviceCount >= c.maxDevicesPerUser) throw new ConflictError(DEVICE_MESSAGES.limitReached);
  return [
    {
      type: 'DeviceRegistered',
      data: {
        id: c.id,
        uuid: c.uuid,
        deviceId: c.deviceId,
        name: c.name,
        ipAddress: c.ipAddress ?? null,
        port: c.port ?? DEFAULT_DEVICE_PORT,
        metadata: c.metadata ?? null,
        gen: state.status === 'none' ? 0 : state.gen + 1,
        registeredAt: c.now,
      },
    },
    {
      type: 'UserLinked',
      data: {
        uuid: c.uuid,
        linkId: c.linkId,
        userId: c.actorUserId,
        role: 'owner',
        reactivated: false,
        createdAt: c.now,
        linkedAt: c.now,
      },
    },
  ];
}

function decideUpdate(command: UpdateDevice, state: DeviceState): DeviceEvent[] {
  const c = command.data;
  const device = authorize(state, c.actorUserId, 'Settings', DEVICE_MESSAGES.onlyOwnerUpdates);
  const changes = changedFields(device, c.changes);
  if (isEmpty(changes)) return [];
  return [{ type: 'DeviceUpdated', data: { uuid: device.uuid, changes, source: 'user', updatedAt: c.now } }];
}

function decideLink(command: LinkUser, state: DeviceState): DeviceEvent[] {
  const c = command.data;
  const device = authorize(state, c.actorUserId, 'Share', DEVICE_MESSAGES.onlyOwnerShares);
  const existing = device.links[c.targetUserId];
  // Becoming an owner counts against the target's limit, as a registration does (decisions §4).
  const becomesOwner = c.role === 'owner' && (existing === undefined || !existing.isActive || existing.role !== 'owner');
  if (becomesOwner && c.ownedDeviceCount !== undefined && c.maxDevicesPerUser !== undefined && c.ownedDeviceCount >= c.maxDevicesPerUser) {
    throw new ConflictError(DEVICE_MESSAGES.limitReached);
  }

  if (existing === undefined || !existing.isActive) {
    return [
      {
        type: 'UserLinked',
        data: {
          uuid: device.uuid,
          linkId: existing?.linkId ?? c.linkId,
          userId: c.targetUserId,
          role: c.role,
          reactivated: existing !== undefined,
          createdAt: existing?.createdAt ?? c.now,
          linkedAt: c.now,
        },
      },
    ];
  }

  if (existing.role === c.role) return [];
  if (c.role !== 'owner') requireAnotherOwner(device, c.targetUserId);
  return [
    {
      type: 'UserRoleChanged',
      data: {
        uuid: device.uuid,
        linkId: existing.linkId,
        userId: c.targetUserId,
        role: c.role,
        previousRole: existing.role,
        changedAt: c.now,
      },
    },
  ];
}

function decideUnlink(command: UnlinkUser, state: DeviceState): DeviceEvent[] {
  const c = command.data;
  const removingSelf = c.actorUserId === c.targetUserId;
  const device = authorize(state, c.actorUserId, removingSelf ? 'View' : 'Share', DEVICE_MESSAGES.onlyOwnerRemovesOthers);
  const target = device.links[c.targetUserId];
  if (target === undefined || !target.isActive) throw new NotFoundError(DEVICE_MESSAGES.userNotLinked);
  requireAnotherOwner(device, c.targetUserId);
  return [
    {
      type: 'UserUnlinked',
      data: { uuid: device.uuid, linkId: target.linkId, userId: c.targetUserId, unlinkedAt: c.now },
    },
  ];
}

function decideDelete(command: DeleteDevice, state: DeviceState): DeviceEvent[] {
  const c = command.data;
  const device = authorize(state, c.actorUserId, 'Delete', DEVICE_MESSAGES.onlyOwnerDeletes);
  const deleted: DeviceEvent = { type: 'DeviceDeleted', data: { uuid: device.uuid, id: device.id, deletedAt: c.now } };
  const link = device.links[c.actorUserId];
  if (c.endActorLink !== true || link === undefined) return [deleted];
  return [{ type: 'UserUnlinked', data: { uuid: device.uuid, linkId: link.linkId, userId: c.actorUserId, unlinkedAt: c.now } }, deleted];
}

function decideIssueToken(command: IssueDeviceToken, state: DeviceState): DeviceEvent[] {
  const c = command.data;
  const device = authorize(state, c.actorUserId, 'Settings', DEVICE_MESSAGES.onlyOwnerIssuesTokens);
  return [{ type: 'DeviceTokenIssued', data: { uuid: device.uuid, gen: device.gen + 1, issuedAt: c.now } }];
}

/**
 * A heartbeat is authenticated by a device token, so a deleted device or an older token
 * generation is a revoked token (decisions §4), not a missing device.
 */
function decideHeartbeat(command: RecordHeartbeat, state: DeviceState): DeviceEvent[] {
  const c = command.data;
  if (state.status !== 'active' || c.tokenGen !== state.gen) throw new UnauthorizedError(DEVICE_MESSAGES.tokenRevoked);
  const events: DeviceEvent[] = [];
  if (!state.isOnline) {
    events.push({ type: 'DeviceWentOnline', data: { uuid: state.uuid, lastSeenAt: c.now } });
  }
  const changes = changedFields(state, {
    ...(c.ipAddress !== undefined ? { ipAddress: c.ipAddress } : {}),
    ...(c.metadata !== undefined ? { metadata: c.metadata } : {}),
  });
  if (!isEmpty(changes)) {
    events.push({ type: 'DeviceUpdated', data: { uuid: state.uuid, changes, source: 'heartbeat', updatedAt: c.now } });
  }
  return events;
}

/**
 * Fired by the expiry job. Emits nothing when the device is not online (already offline,
 * deleted, never registered) or when a heartbeat newer than the one the job was scheduled
 * for keeps it alive: the job then re-delays itself to `offlineDeadline(...)`.
 */
function decideMarkOffline(command: MarkOffline, state: DeviceState): DeviceEvent[] {
  const c = command.data;
  const deadline = offlineDeadline(state, c.lastHeartbeatAt, c.offlineAfterSeconds);
  if (state.status !== 'active' || deadline === null) return [];
  if (Date.parse(c.now) < Date.parse(deadline)) return [];
  return [
    {
      type: 'DeviceWentOffline',
      data: {
        uuid: state.uuid,
        reason: 'heartbeat-timeout',
        lastSeenAt: later(c.lastHeartbeatAt, state.lastSeenAt),
        wentOfflineAt: c.now,
      },
    },
  ];
}

/** Back online for a heartbeat newer than the one the device went offline with; nothing otherwise. */
function decideConfirmPresence(command: ConfirmPresence, state: DeviceState): DeviceEvent[] {
  const c = command.data;
  if (state.status !== 'active' || state.isOnline) return [];
  const at = Date.parse(c.heartbeatAt);
  // A heartbeat of an earlier registration of this uuid, or one the offline event already counted.
  if (at < Date.parse(state.createdAt)) return [];
  if (state.lastSeenAt !== null && at <= Date.parse(state.lastSeenAt)) return [];
  return [{ type: 'DeviceWentOnline', data: { uuid: state.uuid, lastSeenAt: c.heartbeatAt } }];
}

export function decideDevice(command: DeviceCommand, state: DeviceState): DeviceEvent[] {
  switch (command.type) {
    case 'RegisterDevice':
      return decideRegister(command, state);
    case 'UpdateDevice':
      return decideUpdate(command, state);
    case 'LinkUser':
      return decideLink(command, state);
    case 'UnlinkUser':
      return decideUnlink(command, state);
    case 'DeleteDevice':
      return decideDelete(command, state);
    case 'IssueDeviceToken':
      return decideIssueToken(command, state);
    case 'RecordHeartbeat':
      return decideHeartbeat(command, state);
    case 'MarkOffline':
      return decideMarkOffline(command, state);
    case 'ConfirmPresence':
      return decideConfirmPresence(command, state);
    default: {
      const _exhaustive: never = command;
      return _exhaustive;
    }
  }
}

// ---------------------------------------------------------------------------------------
// Evolve

export function initialDeviceState(): DeviceState {
  return { status: 'none' };
}

function withLink(device: ActiveDevice, link: DeviceLink): ActiveDevice {
  return { ...device, links: { ...device.links, [link.userId]: link } };
}

export function evolveDevice(state: DeviceState, event: DeviceEvent): DeviceState {
  if (event.type === 'DeviceRegistered') {
    const e = event.data;
    return {
      status: 'active',
      id: e.id,
      uuid: e.uuid,
      deviceId: e.deviceId,
      name: e.name,
      ipAddress: e.ipAddress,
      port: sharedPort(e.port),
      metadata: e.metadata,
      links: {},
      gen: e.gen,
      isOnline: false,
      lastSeenAt: null,
      createdAt: e.registeredAt,
      updatedAt: e.registeredAt,
    };
  }
  if (state.status !== 'active') return state;

  switch (event.type) {
    case 'DeviceUpdated': {
      const changes = event.data.changes;
      return { ...state, ...changes, ...(changes.port !== undefined ? { port: sharedPort(changes.port) } : {}), updatedAt: event.data.updatedAt };
    }
    case 'UserLinked': {
      const e = event.data;
      // The registrant's link is made with the device: its times are the device's own.
      const createdAt = sharedText(e.createdAt, state.createdAt, state.updatedAt);
      return withLink(state, {
        linkId: e.linkId,
        userId: e.userId,
        role: sharedRole(e.role),
        isActive: true,
        createdAt,
        updatedAt: sharedText(e.linkedAt, createdAt, state.updatedAt),
      });
    }
    case 'UserRoleChanged': {
      const link = state.links[event.data.userId];
      if (link === undefined) return state;
      return withLink(state, { ...link, role: sharedRole(event.data.role), updatedAt: event.data.changedAt });
    }
    case 'UserUnlinked': {
      const link = state.links[event.data.userId];
      if (link === undefined) return state;
      return withLink(state, { ...link, isActive: false, updatedAt: event.data.unlinkedAt });
    }
    case 'DeviceDeleted': {
      const at = event.data.deletedAt;
      const links = Object.fromEntries(
        Object.entries(state.links).map(([userId, link]) => [
          userId,
          link.isActive ? { ...link, isActive: false, updatedAt: at } : link,
        ]),
      );
      return { ...state, status: 'deleted', links, isOnline: false, updatedAt: at };
    }
    case 'DeviceTokenIssued':
      return { ...state, gen: event.data.gen };
    case 'DeviceWentOnline':
      return { ...state, isOnline: true, lastSeenAt: event.data.lastSeenAt };
    case 'DeviceWentOffline':
      return { ...state, isOnline: false, lastSeenAt: event.data.lastSeenAt ?? state.lastSeenAt };
    default: {
      const _exhaustive: never = event;
      return _exhaustive;
    }
  }
}

export const deviceDecider: Decider<DeviceState, DeviceCommand, DeviceEvent> = {
  initialState: initialDeviceState,
  evolve: evolveDevice,
  decide: decideDevice,
};
