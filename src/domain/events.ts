/**
 * Every domain event of the service and the names of the streams they live in.
 */
import type { DeviceEvent, HeartbeatEvent } from './device';
import type { SessionEvent } from './session';
import type { UserEvent } from './user';

export type HomeHubEvent = UserEvent | DeviceEvent | SessionEvent | HeartbeatEvent;
export type HomeHubEventType = HomeHubEvent['type'];

export type StreamCategory = 'user' | 'device' | 'session' | 'heartbeat';

/** Each category's stream-name prefix (usable as a subscription filter). */
export const STREAM_PREFIXES: Readonly<Record<StreamCategory, string>> = {
  user: 'user-',
  device: 'device-',
  session: 'session-',
  heartbeat: 'heartbeat-',
};

export function userStream(userId: string): string {
  return `${STREAM_PREFIXES.user}${userId}`;
}

export function deviceStream(deviceUuid: string): string {
  return `${STREAM_PREFIXES.device}${deviceUuid}`;
}

export function sessionStream(familyId: string): string {
  return `${STREAM_PREFIXES.session}${familyId}`;
}

export function heartbeatStream(deviceUuid: string): string {
  return `${STREAM_PREFIXES.heartbeat}${deviceUuid}`;
}

export const streamNames = { userStream, deviceStream, sessionStream, heartbeatStream } as const;

/** The category and id of a stream name, or null when it is not one of ours. */
export function parseStreamName(streamName: string): { readonly category: StreamCategory; readonly id: string } | null {
  for (const category of Object.keys(STREAM_PREFIXES) as StreamCategory[]) {
    const prefix = STREAM_PREFIXES[category];
    if (streamName.startsWith(prefix) && streamName.length > prefix.length) {
      return { category, id: streamName.slice(prefix.length) };
    }
  }
  return null;
}

/** Which stream category each event type is appended to. */
export const EVENT_CATEGORY: Readonly<Record<HomeHubEventType, StreamCategory>> = {
  UserSynced: 'user',
  UserDeactivated: 'user',
  UserReactivated: 'user',
  PasswordChanged: 'user',
  PasswordResetRequested: 'user',
  EmailVerified: 'user',
  UserErased: 'user',
  EmailClaimWithdrawn: 'user',
  DeviceRegistered: 'device',
  DeviceUpdated: 'device',
  UserLinked: 'device',
  UserRoleChanged: 'device',
  UserUnlinked: 'device',
  DeviceDeleted: 'device',
  DeviceTokenIssued: 'device',
  DeviceWentOnline: 'device',
  DeviceWentOffline: 'device',
  RefreshIssued: 'session',
  RefreshRotated: 'session',
  RefreshReuseDetected: 'session',
  RefreshRevoked: 'session',
  HeartbeatReceived: 'heartbeat',
};

export function isHomeHubEventType(type: string): type is HomeHubEventType {
  return Object.prototype.hasOwnProperty.call(EVENT_CATEGORY, type);
}

/**
 * A stored `{type, data}` as a typed event, or null for a type this code does not know.
 * The data is trusted, not validated: only the deciders of this service write these streams.
 */
export function asHomeHubEvent(recorded: { readonly type: string; readonly data: unknown }): HomeHubEvent | null {
  if (!isHomeHubEventType(recorded.type)) return null;
  return { type: recorded.type, data: recorded.data } as HomeHubEvent;
}
