import type { Socket as NetSocket } from 'node:net';
import type { Namespace, Server, Socket } from 'socket.io';
import { sharedRevision } from '../commands/handler';
import type { Logger } from '../logger';
import type { RelayDirection } from '../metrics';
import type { ReadStore } from '../infra/readstore/port';
import type { DeviceAccess } from './access';
import type { DeviceClaim, InterServerEvents, TunnelCluster } from './cluster';
import { TUNNEL_MESSAGE_MAX_BYTES, type ClientToServerEvents, type ServerToClientEvents } from './events';
import type { TunnelPrincipal } from './limiter';

/**
 * What every concern of the tunnel shares, passed in explicitly: the namespace, the
 * sessions of this process, the cluster (other processes through Redis, or none), the
 * device access cache, and the options. Each concern (connection.ts, apps.ts, devices.ts,
 * live-feed.ts, limits.ts) takes this context and exports its handlers; tunnel.ts wires them.
 */

export interface TunnelOptions {
  /** The engine's hard cap on one frame; above it the connection is closed. Above the message limit, so a message a little too large gets INVALID_PAYLOAD instead. */
  readonly maxFrameBytes: number;
  /**
   * Events of one socket that may wait their turn (behind one that waits for IO: an event
   * store read, a Redis-backed limiter). Never below what the rate limits let through at once.
   */
  readonly maxPendingPerSocket: number;
  /** A socket with more packets than this waiting to be written at two sweeps in a row is cut off. */
  readonly slowConsumerMaxQueued: number;
  readonly sweepEveryMs: number;
  /** A refused message is checked against the event store again only this long after the last check. */
  readonly denialRecheckMs: number;
  /** Folded device states kept for the permission checks. */
  readonly accessCacheSize: number;
}

export const DEFAULT_TUNNEL_OPTIONS: TunnelOptions = {
  maxFrameBytes: 2 * TUNNEL_MESSAGE_MAX_BYTES,
  // 50 messages per 10 s and 10 subscribes per minute may all arrive at once (decisions §5, §6).
  maxPendingPerSocket: 64,
  slowConsumerMaxQueued: 1024,
  sweepEveryMs: 2000,
  denialRecheckMs: 250,
  accessCacheSize: 20_000,
};

/** Who a socket is, as its handshake proved it. */
export type Authenticated =
  | { readonly kind: 'app'; readonly userId: string; readonly exp: number; readonly iat: number; readonly fam?: string }
  | { readonly kind: 'device'; readonly uuid: string; readonly gen: number; readonly exp: number; readonly authorizedAt: string };

/**
 * What a device socket's `data.auth` says once it is connected: its session (in
 * `sessions.all`, by socket id) holds what the handshake proved.
 */
export const ADMITTED_DEVICE = Object.freeze({ kind: 'admitted-device' } as const);

export interface SocketData {
  /** Who the socket is, as its handshake proved it; for a connected device socket, `ADMITTED_DEVICE`. */
  auth: Authenticated | typeof ADMITTED_DEVICE;
  /**
   * A device socket's session, made (and the device claimed) before the connection is accepted,
   * for the connection to take; from then on `sessions.all` holds it.
   */
  device?: DeviceSession;
}

/**
 * The `data` of every connected device socket, one object for all (a hub keeps its socket for
 * days): what its handshake left there is let go once the session took it.
 */
export const CONNECTED_DEVICE_DATA: SocketData = Object.freeze({ auth: ADMITTED_DEVICE });

export type TunnelServer = Server<ClientToServerEvents, ServerToClientEvents, InterServerEvents, SocketData>;
export type TunnelNamespace = Namespace<ClientToServerEvents, ServerToClientEvents, InterServerEvents, SocketData>;
export type TunnelSocket = Socket<ClientToServerEvents, ServerToClientEvents, InterServerEvents, SocketData>;

interface SessionBase {
  readonly socket: TunnelSocket;
  /** Events of this socket started or waiting, in arrival order, and the promise the next one waits for. */
  waiting: number;
  tail: Promise<void>;
  /** Sweeps in a row that found the socket's write queue over the limit. */
  congested: number;
  /** When the token expires, epoch ms (0: never); one sweep for every socket (src/tunnel/expiry.ts). */
  expiresAt: number;
  /** The TCP connection of a socket that came straight over WebSocket (the upgrade request is not kept). */
  raw: NetSocket | null;
}

export interface AppSession extends SessionBase {
  readonly kind: 'app';
  readonly userId: string;
  /** Subscribed device uuid → the `device-<uuid>` revision its link was checked at. */
  readonly subscriptions: Map<string, bigint>;
}

export interface DeviceSession extends SessionBase {
  readonly kind: 'device';
  readonly uuid: string;
  readonly gen: number;
  /** The `device-<uuid>` revision the token was checked at. */
  readonly authorizedAt: bigint;
  claim: DeviceClaim | null;
  /** Replaced or revoked: already dealt with when its socket closes. */
  ended: boolean;
}

export type Session = AppSession | DeviceSession;

/** The tail of a socket with nothing waiting: one settled promise for all of them. */
export const IDLE_TAIL: Promise<void> = Promise.resolve();

function newSession(socket: TunnelSocket, exp: number): SessionBase {
  return { socket, waiting: 0, tail: IDLE_TAIL, congested: 0, expiresAt: exp > 0 ? exp * 1000 : 0, raw: null };
}

export function appSession(socket: TunnelSocket, userId: string, exp: number): AppSession {
  return { ...newSession(socket, exp), kind: 'app', userId, subscriptions: new Map() };
}

export function deviceSession(socket: TunnelSocket, auth: Extract<Authenticated, { kind: 'device' }>): DeviceSession {
  // One literal, every field in the object itself: spread into a literal, the fields after the
  // spread went to a separate property array (a hub holds its session for days).
  const { waiting, tail, congested, expiresAt, raw } = newSession(socket, auth.exp);
  return {
    socket,
    waiting,
    tail,
    congested,
    expiresAt,
    raw,
    kind: 'device',
    uuid: auth.uuid,
    gen: auth.gen,
    authorizedAt: sharedRevision(BigInt(auth.authorizedAt)),
    claim: null,
    ended: false,
  };
}

/**
 * Who a session's events are counted against (decisions §6: the user behind an app socket, or
 * the device). Made when asked (a rate-limit key is made for each event anyway) rather than
 * kept in every session for its life.
 */
export function principalOf(session: Session): TunnelPrincipal {
  return session.kind === 'app' ? { type: 'user', id: session.userId } : { type: 'device', id: session.uuid };
}

/** The sockets this process holds, indexed the ways the concerns look them up. */
export interface TunnelSessions {
  /** Every connected session, by socket id. */
  readonly all: Map<string, Session>;
  /**
   * The device sockets of each device on this process, including those still claiming: the
   * session itself when there is one (nearly always), a Set only while several overlap.
   */
  readonly devices: Map<string, DeviceSession | Set<DeviceSession>>;
  /** The current (claimed) device socket of each device held by this process. */
  readonly live: Map<string, DeviceSession>;
  /** Subscribed app sessions on this process, by device. */
  readonly subscribers: Map<string, Set<AppSession>>;
}

export function createSessions(): TunnelSessions {
  return { all: new Map(), devices: new Map(), live: new Map(), subscribers: new Map() };
}

/** The device sockets of `uuid` on this process (a copy: ending one changes the index). */
export function deviceSessionsOf(sessions: TunnelSessions, uuid: string): DeviceSession[] {
  const held = sessions.devices.get(uuid);
  if (held === undefined) return [];
  return held instanceof Set ? [...held] : [held];
}

export function addDeviceSession(sessions: TunnelSessions, session: DeviceSession): void {
  const held = sessions.devices.get(session.uuid);
  if (held === undefined) sessions.devices.set(session.uuid, session);
  else if (held instanceof Set) held.add(session);
  else if (held !== session) sessions.devices.set(session.uuid, new Set([held, session]));
}

export function removeDeviceSession(sessions: TunnelSessions, session: DeviceSession): void {
  const held = sessions.devices.get(session.uuid);
  if (held === session) sessions.devices.delete(session.uuid);
  else if (held instanceof Set) {
    held.delete(session);
    // Back to the session itself once it is alone again.
    const [only, ...others] = held;
    if (only === undefined) sessions.devices.delete(session.uuid);
    else if (others.length === 0) sessions.devices.set(session.uuid, only);
  }
}

export interface TunnelContext {
  readonly nsp: TunnelNamespace;
  readonly options: TunnelOptions;
  readonly logger: Logger;
  readonly now: () => string;
  readonly cluster: TunnelCluster;
  readonly access: DeviceAccess;
  readonly sessions: TunnelSessions;
  /** The device read model: the heartbeat presence `device:status` carries. */
  readonly readStore: ReadStore | undefined;
  readonly onRelayed: ((direction: RelayDirection) => void) | undefined;
  /** Keeps work that outlives the event that started it (releases, notices); awaited on close. */
  readonly track: (work: Promise<unknown>, what: string) => void;
  /** True once the tunnel is closing: no new connections. */
  readonly closing: () => boolean;
}

export const deviceRoom = (uuid: string): string => `device:${uuid}`;
export const subscribersRoom = (uuid: string): string => `subscribers:${uuid}`;
export const userSubscribersRoom = (uuid: string, userId: string): string => `subscribers:${uuid}:${userId}`;

export type Maybe<T> = T | Promise<T>;

/** `next(value)`, at once when the value is already there: the hot path allocates no promise. */
export function andThen<T, R>(value: Maybe<T>, next: (value: T) => Maybe<R>): Maybe<R> {
  return value instanceof Promise ? value.then(next) : next(value);
}

export const errorText = (error: unknown): string => (error instanceof Error ? error.message : String(error));
