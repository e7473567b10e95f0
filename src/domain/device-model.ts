/**
 * The device aggregate's vocabulary: roles and permissions, its state, commands and events
 * (stream `device-<deviceUuid>`), and the heartbeat events of the short-lived stream
 * `heartbeat-<deviceUuid>`. The decider that relates them is in `device.ts`, which
 * re-exports all of this.
 */
import type { Command, DomainEvent } from './messages';

export type JsonValue = string | number | boolean | null | readonly JsonValue[] | { readonly [key: string]: JsonValue };
export type JsonObject = { readonly [key: string]: JsonValue };

/** Structural equality of JSON values; object key order does not matter. */
export function jsonEqual(a: JsonValue | undefined, b: JsonValue | undefined): boolean {
  if (a === b) return true;
  if (a === null || b === null || a === undefined || b === undefined) return false;
  if (typeof a !== 'object' || typeof b !== 'object') return false;
  if (Array.isArray(a) || Array.isArray(b)) {
    if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return false;
    return a.every((item: JsonValue, i: number) => jsonEqual(item, b[i] as JsonValue));
  }
  const objA = a as JsonObject;
  const objB = b as JsonObject;
  const keysA = Object.keys(objA);
  if (keysA.length !== Object.keys(objB).length) return false;
  return keysA.every((key) => Object.prototype.hasOwnProperty.call(objB, key) && jsonEqual(objA[key], objB[key]));
}

export const DEFAULT_DEVICE_PORT = '8123';

export const DEVICE_MESSAGES = {
  notFound: 'Device not found',
  alreadyRegistered: 'Device already registered',
  limitReached: 'Device limit reached',
  onlyOwnerUpdates: 'Only the device owner can update device settings',
  onlyOwnerShares: 'Only the device owner can share the device',
  onlyOwnerRemovesOthers: 'Only the device owner can remove other users',
  onlyOwnerDeletes: 'Only the device owner can delete the device',
  onlyOwnerIssuesTokens: 'Only the device owner can request a device token',
  lastOwner: 'A device must keep at least one owner',
  userNotLinked: 'User is not linked to this device',
  tokenRevoked: 'Token has been revoked',
} as const;

// ---------------------------------------------------------------------------------------
// Roles and permissions

export const DEVICE_ROLES = ['owner', 'editor', 'viewer'] as const;
export type DeviceRole = (typeof DEVICE_ROLES)[number];

export const DEVICE_PERMISSIONS = ['View', 'Control', 'Settings', 'Delete', 'Share'] as const;
export type DevicePermission = (typeof DEVICE_PERMISSIONS)[number];

/** The interface's role-permission table. */
export const ROLE_PERMISSIONS: Readonly<Record<DeviceRole, Readonly<Record<DevicePermission, boolean>>>> = {
  owner: { View: true, Control: true, Settings: true, Delete: true, Share: true },
  editor: { View: true, Control: true, Settings: false, Delete: false, Share: false },
  viewer: { View: true, Control: false, Settings: false, Delete: false, Share: false },
};

export function can(role: DeviceRole, permission: DevicePermission): boolean {
  return ROLE_PERMISSIONS[role][permission];
}

// ---------------------------------------------------------------------------------------
// One copy of a text

/*
 * The event log decodes every event's strings anew, so a device's fold (kept for every
 * connected hub, src/tunnel/access.ts) and its read-model document would hold a copy of the
 * same role, port or time per field and per event they came from. These hand back the one
 * string already held instead: same text, one object.
 */

/** The role constant equal to `role` (one string for every link of every device). */
export function sharedRole(role: DeviceRole): DeviceRole {
  return role === 'owner' ? DEVICE_ROLES[0] : role === 'editor' ? DEVICE_ROLES[1] : role === 'viewer' ? DEVICE_ROLES[2] : role;
}

/** The default port's constant when `port` is that port. */
export function sharedPort(port: string): string {
  return port === DEFAULT_DEVICE_PORT ? DEFAULT_DEVICE_PORT : port;
}

/** `value`, or the first of `a` and `b` that is the same text. */
export function sharedText(value: string, a: string | null, b?: string | null): string {
  return value === a && a !== null ? a : value === b && b !== null && b !== undefined ? b : value;
}

// ---------------------------------------------------------------------------------------
// State

export interface DeviceLink {
  readonly linkId: string;
  readonly userId: string;
  readonly role: DeviceRole;
  readonly isActive: boolean;
  readonly createdAt: string;
  readonly updatedAt: string;
}

export interface DeviceData {
  /** Internal id of the current registration. */
  readonly id: string;
  readonly uuid: string;
  readonly deviceId: string;
  readonly name: string;
  readonly ipAddress: string | null;
  readonly port: string;
  readonly metadata: JsonObject | null;
  /** By user id; inactive links stay for the record. */
  readonly links: Readonly<Record<string, DeviceLink>>;
  /** Generation of the current device token; a token is valid only with this `gen`. */
  readonly gen: number;
  readonly isOnline: boolean;
  /** Time of the heartbeat that last changed presence (the read side tracks every heartbeat). */
  readonly lastSeenAt: string | null;
  readonly createdAt: string;
  readonly updatedAt: string;
}

export type DeviceState =
  | { readonly status: 'none' }
  | ({ readonly status: 'active' } & DeviceData)
  | ({ readonly status: 'deleted' } & DeviceData);

export type ActiveDevice = Extract<DeviceState, { status: 'active' }>;

/** The caller's role when it has an active link to an active device, else null. */
export function activeRole(state: DeviceState, userId: string): DeviceRole | null {
  if (state.status !== 'active') return null;
  const link = state.links[userId];
  return link !== undefined && link.isActive ? link.role : null;
}

// ---------------------------------------------------------------------------------------
// Commands

export interface DeviceChanges {
  readonly name?: string;
  readonly ipAddress?: string;
  readonly port?: string;
  readonly metadata?: JsonObject;
}

export type RegisterDevice = Command<
  'RegisterDevice',
  {
    /** A new internal id (UUID) for this registration. */
    readonly id: string;
    readonly uuid: string;
    readonly deviceId: string;
    readonly name: string;
    readonly ipAddress?: string | null;
    readonly port?: string;
    readonly metadata?: JsonObject | null;
    readonly actorUserId: string;
    /** Id of the owner link created for the caller. */
    readonly linkId: string;
    /** Active devices the caller owns now (from the read model). */
    readonly ownedDeviceCount: number;
    readonly maxDevicesPerUser: number;
    readonly now: string;
  }
>;

export type UpdateDevice = Command<
  'UpdateDevice',
  { readonly uuid: string; readonly actorUserId: string; readonly changes: DeviceChanges; readonly now: string }
>;

export type LinkUser = Command<
  'LinkUser',
  {
    readonly uuid: string;
    readonly actorUserId: string;
    readonly targetUserId: string;
    readonly role: DeviceRole;
    /** Used only when the target has no link yet. */
    readonly linkId: string;
    readonly now: string;
    /** For a link that makes the target an owner: the devices they own now, and how many they may (MAX_DEVICES_PER_USER). */
    readonly ownedDeviceCount?: number;
    readonly maxDevicesPerUser?: number;
  }
>;

export type UnlinkUser = Command<
  'UnlinkUser',
  { readonly uuid: string; readonly actorUserId: string; readonly targetUserId: string; readonly now: string }
>;

export type DeleteDevice = Command<
  'DeleteDevice',
  {
    readonly uuid: string;
    readonly actorUserId: string;
    readonly now: string;
    /** An erasure (decisions §11): the actor's own link ends first (`UserUnlinked`), in the same append. */
    readonly endActorLink?: boolean;
  }
>;

export type IssueDeviceToken = Command<
  'IssueDeviceToken',
  { readonly uuid: string; readonly actorUserId: string; readonly now: string }
>;

export type RecordHeartbeat = Command<
  'RecordHeartbeat',
  {
    readonly uuid: string;
    /** The `gen` claim of the device token that authenticated the heartbeat. */
    readonly tokenGen: number;
    readonly ipAddress?: string;
    readonly metadata?: JsonObject;
    readonly now: string;
  }
>;

export type MarkOffline = Command<
  'MarkOffline',
  {
    readonly uuid: string;
    /**
     * The newest heartbeat the handler knows of (the last event of `heartbeat-<uuid>`),
     * null when that stream is empty or aged out.
     */
    readonly lastHeartbeatAt: string | null;
    readonly offlineAfterSeconds: number;
    readonly now: string;
  }
>;

/**
 * Issued by the expiry job right after it marked the device offline, when `heartbeat-<uuid>`
 * turned out to hold a heartbeat its decision had not seen: that heartbeat raced the
 * decision (the API may already have answered it `isOnline: true`), so the device is back.
 */
export type ConfirmPresence = Command<
  'ConfirmPresence',
  {
    readonly uuid: string;
    /** `receivedAt` of the heartbeat the offline decision missed. */
    readonly heartbeatAt: string;
    readonly now: string;
  }
>;

export type DeviceCommand =
  | RegisterDevice
  | UpdateDevice
  | LinkUser
  | UnlinkUser
  | DeleteDevice
  | IssueDeviceToken
  | RecordHeartbeat
  | MarkOffline
  | ConfirmPresence;

// ---------------------------------------------------------------------------------------
// Events

export type DeviceRegistered = DomainEvent<
  'DeviceRegistered',
  {
    readonly id: string;
    readonly uuid: string;
    readonly deviceId: string;
    readonly name: string;
    readonly ipAddress: string | null;
    readonly port: string;
    readonly metadata: JsonObject | null;
    readonly gen: number;
    readonly registeredAt: string;
  }
>;

export type DeviceUpdated = DomainEvent<
  'DeviceUpdated',
  {
    readonly uuid: string;
    /** Only the fields that changed. */
    readonly changes: DeviceChanges;
    readonly source: 'user' | 'heartbeat';
    readonly updatedAt: string;
  }
>;

export type UserLinked = DomainEvent<
  'UserLinked',
  {
    readonly uuid: string;
    readonly linkId: string;
    readonly userId: string;
    readonly role: DeviceRole;
    /** True when an inactive link was made active again (201 vs 200 at the API). */
    readonly reactivated: boolean;
    /** Creation of the link: the original one when reactivated. */
    readonly createdAt: string;
    readonly linkedAt: string;
  }
>;

export type UserRoleChanged = DomainEvent<
  'UserRoleChanged',
  {
    readonly uuid: string;
    readonly linkId: string;
    readonly userId: string;
    readonly role: DeviceRole;
    readonly previousRole: DeviceRole;
    readonly changedAt: string;
  }
>;

export type UserUnlinked = DomainEvent<
  'UserUnlinked',
  { readonly uuid: string; readonly linkId: string; readonly userId: string; readonly unlinkedAt: string }
>;

/** Every link becomes inactive and the device offline. */
export type DeviceDeleted = DomainEvent<
  'DeviceDeleted',
  { readonly uuid: string; readonly id: string; readonly deletedAt: string }
>;

export type DeviceTokenIssued = DomainEvent<
  'DeviceTokenIssued',
  { readonly uuid: string; readonly gen: number; readonly issuedAt: string }
>;

export type DeviceWentOnline = DomainEvent<'DeviceWentOnline', { readonly uuid: string; readonly lastSeenAt: string }>;

export type DeviceWentOffline = DomainEvent<
  'DeviceWentOffline',
  {
    readonly uuid: string;
    readonly reason: 'heartbeat-timeout';
    readonly lastSeenAt: string | null;
    readonly wentOfflineAt: string;
  }
>;

export type DeviceEvent =
  | DeviceRegistered
  | DeviceUpdated
  | UserLinked
  | UserRoleChanged
  | UserUnlinked
  | DeviceDeleted
  | DeviceTokenIssued
  | DeviceWentOnline
  | DeviceWentOffline;

/** The only event of `heartbeat-<uuid>`. Deliberately tiny: the stream gets one every 30–60 s. */
export type HeartbeatReceived = DomainEvent<'HeartbeatReceived', { readonly uuid: string; readonly receivedAt: string }>;

export type HeartbeatEvent = HeartbeatReceived;

/** The event to append to `heartbeat-<uuid>` for an accepted heartbeat (after `decide` accepted it). */
export function heartbeatReceived(command: RecordHeartbeat): HeartbeatReceived {
  return { type: 'HeartbeatReceived', data: { uuid: command.data.uuid, receivedAt: command.data.now } };
}
