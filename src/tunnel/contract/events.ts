/**
 * The tunnel's contract (decisions §5): Socket.IO namespace `/tunnel`, its event names and
 * payloads. Types and constants only, no server code, so app and hub developers can import
 * this file as it is:
 *
 *   const app: Socket<ServerToAppEvents, AppToServerEvents> = io(`${wsUrl}/tunnel`, { auth: { token }, transports: ['websocket'] });
 *   const hub: Socket<ServerToDeviceEvents, DeviceToServerEvents> = io(`${wsUrl}/tunnel`, { auth: { token: deviceToken }, transports: ['websocket'] });
 */

export const TUNNEL_NAMESPACE = '/tunnel';

/** The `connect_error` message of every refused handshake (missing, invalid, expired or revoked token). */
export const UNAUTHORIZED = 'unauthorized';

/**
 * The `connect_error` message of a handshake refused because its IP failed too many, with
 * `data: {retryAfter}` (seconds): wait that long instead of refreshing the token.
 */
export const RATE_LIMITED_HANDSHAKE = 'rate_limited';

/** Largest `tunnel:message` accepted, serialized (decisions §5). */
export const TUNNEL_MESSAGE_MAX_BYTES = 64 * 1024;

export const TUNNEL_EVENTS = {
  subscribe: 'tunnel:subscribe',
  unsubscribe: 'tunnel:unsubscribe',
  message: 'tunnel:message',
  error: 'tunnel:error',
  deviceStatus: 'device:status',
} as const;

export const TUNNEL_ERROR_CODES = [
  'RATE_LIMITED',
  'FORBIDDEN',
  'NOT_FOUND',
  'INVALID_PAYLOAD',
  'TOKEN_EXPIRED',
  'SESSION_REPLACED',
  'ACCESS_REVOKED',
] as const;
export type TunnelErrorCode = (typeof TUNNEL_ERROR_CODES)[number];

/**
 * `tunnel:error`. Every refusal arrives this way, whether or not the event carried an ack
 * (an ack is answered too). `retryAfter` (seconds) comes with RATE_LIMITED; without it a
 * client waits 10 seconds. RATE_LIMITED also means "too much in flight on this socket" or
 * "the service cannot answer right now": either way, retry after `retryAfter`.
 */
export interface TunnelError {
  readonly code: TunnelErrorCode;
  readonly message: string;
  readonly retryAfter?: number;
}

// ---------------------------------------------------------------------------------------
// Subscriptions (apps only)

export interface SubscribeRequest {
  readonly deviceUuid: string;
}

/**
 * `isOnline`: the device's heartbeat presence, exactly as `GET /devices/:id` shows it.
 * `tunnelConnected`: the device's tunnel socket is connected right now, on any process.
 */
export type SubscribeAck =
  | { readonly success: true; readonly deviceUuid: string; readonly isOnline: boolean; readonly tunnelConnected: boolean }
  | { readonly success: false; readonly error: TunnelError };

/** Not in the interface: stops `device:status` and device messages for one device (disconnecting stops all). */
export type UnsubscribeRequest = SubscribeRequest;
export type UnsubscribeAck =
  | { readonly success: true; readonly deviceUuid: string }
  | { readonly success: false; readonly error: TunnelError };

// ---------------------------------------------------------------------------------------
// Messages

/** A message from an app to a device; needs the Control permission (owner, editor). */
export interface AppMessage {
  readonly deviceUuid: string;
  /** Generated (a UUID) when absent. */
  readonly id?: string;
  readonly type: string;
  readonly payload: unknown;
}

/** A message from a device to the apps subscribed to it, or to one user's apps (`to`). */
export interface DeviceMessage {
  readonly id?: string;
  /** A user id: only that user's subscribed apps receive the message. */
  readonly to?: string;
  /** The `id` of the message this one answers. */
  readonly replyTo?: string;
  readonly type: string;
  readonly payload: unknown;
}

/** An app's message as its device receives it. */
export interface MessageToDevice {
  readonly id: string;
  readonly deviceUuid: string;
  readonly from: { readonly userId: string };
  readonly type: string;
  readonly payload: unknown;
  /** ISO 8601 UTC, when the service relayed it. */
  readonly sentAt: string;
}

/** A device's message as the apps receive it. */
export interface MessageFromDevice {
  readonly id: string;
  readonly deviceUuid: string;
  readonly from: 'device';
  readonly replyTo?: string;
  readonly type: string;
  readonly payload: unknown;
  readonly sentAt: string;
}

/**
 * `delivered` is false when the message could not be handed on: an app's message to a device
 * that is not connected to the tunnel (on any API process), or any refused message. A
 * device's message is delivered to whichever apps are subscribed at that moment.
 */
export interface MessageAck {
  readonly success: boolean;
  readonly delivered: boolean;
}

/**
 * Sent to subscribed apps on every online/offline transition and when the device's tunnel
 * socket connects or drops. `isOnline` and `lastSeenAt` are the heartbeat presence, exactly
 * as `GET /devices/:id` shows it; `tunnelConnected` says whether the device's tunnel socket
 * is connected, on any process (decisions §5).
 *
 * `tunnelSeq` orders what statuses of one device say about `tunnelConnected`, across
 * processes: it grows with every connection of the device's socket and with its drop. A
 * status whose `tunnelSeq` is lower than the highest one already seen for the device carries
 * an older `tunnelConnected` (say a late "dropped" from the process that held an earlier
 * socket): keep the newer `tunnelConnected`. Its `isOnline` and `lastSeenAt` are current
 * either way. Equal values say the same about the socket.
 */
export interface DeviceStatus {
  readonly deviceUuid: string;
  readonly isOnline: boolean;
  readonly lastSeenAt: string | null;
  readonly tunnelConnected: boolean;
  readonly tunnelSeq: number;
}

// ---------------------------------------------------------------------------------------
// Event maps (socket.io's `Socket<Listen, Emit>` generics)

export interface AppToServerEvents {
  'tunnel:subscribe': (request: SubscribeRequest, ack?: (result: SubscribeAck) => void) => void;
  'tunnel:unsubscribe': (request: UnsubscribeRequest, ack?: (result: UnsubscribeAck) => void) => void;
  'tunnel:message': (message: AppMessage, ack?: (result: MessageAck) => void) => void;
}

export interface DeviceToServerEvents {
  'tunnel:message': (message: DeviceMessage, ack?: (result: MessageAck) => void) => void;
}

export interface ServerToAppEvents {
  'tunnel:message': (message: MessageFromDevice) => void;
  'tunnel:error': (error: TunnelError) => void;
  'device:status': (status: DeviceStatus) => void;
}

export interface ServerToDeviceEvents {
  'tunnel:message': (message: MessageToDevice) => void;
  'tunnel:error': (error: TunnelError) => void;
}

/** Everything the server listens to (apps and devices share the namespace). */
export interface ClientToServerEvents {
  'tunnel:subscribe': AppToServerEvents['tunnel:subscribe'];
  'tunnel:unsubscribe': AppToServerEvents['tunnel:unsubscribe'];
  'tunnel:message': (message: AppMessage | DeviceMessage, ack?: (result: MessageAck) => void) => void;
}

/** Everything the server emits. */
export interface ServerToClientEvents {
  'tunnel:message': (message: MessageToDevice | MessageFromDevice) => void;
  'tunnel:error': (error: TunnelError) => void;
  'device:status': (status: DeviceStatus) => void;
}
