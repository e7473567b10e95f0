import { randomUUID } from 'node:crypto';
import type { Server as HttpServer } from 'node:http';
import type { Socket as NetSocket } from 'node:net';
import { Server, type Namespace, type Socket } from 'socket.io';
import type { z } from 'zod';
import type { AccessRevocations } from '../auth/access-revocations';
import type { Tokens } from '../auth/tokens';
import { TOKEN_MESSAGES } from '../auth/tokens';
import { systemClock, type Clock } from '../commands/handler';
import { activeRole, can, type DeviceState } from '../domain/device';
import { DomainError, UnauthorizedError } from '../domain/errors';
import { asHomeHubEvent, STREAM_PREFIXES } from '../domain/events';
import type { EventStore, GlobalPosition, RecordedEvent, Subscription } from '../infra/eventstore/port';
import type { ReadStore } from '../infra/readstore/port';
import { findDevice } from '../projections/devices';
import type { RelayDirection } from '../metrics';
import type { Logger } from '../logger';
import { parseInput } from '../api/validation';
import { createDeviceAccess } from './access';
import { createLocalCluster, createRedisCluster, type ClusterNotice, type DeviceClaim, type InterServerEvents, type RedisAdapterKind, type TunnelCluster } from './cluster';
import { TunnelFailure, TUNNEL_MESSAGES, toTunnelError } from './errors';
import {
  TUNNEL_MESSAGE_MAX_BYTES,
  TUNNEL_NAMESPACE,
  UNAUTHORIZED,
  type ClientToServerEvents,
  type DeviceStatus,
  type MessageAck,
  type MessageFromDevice,
  type MessageToDevice,
  type ServerToClientEvents,
  type SubscribeAck,
  type TunnelError,
  type UnsubscribeAck,
} from './events';
import { unlimited, type LimitDecision, type TunnelLimiter, type TunnelLimitKind, type TunnelPrincipal } from './limiter';
import { appMessage, deviceMessage, exceedsSize, subscribeRequest, type AppMessageInput, type DeviceMessageInput } from './schemas';

/**
 * The tunnel (decisions §5): Socket.IO namespace `/tunnel` on the API's HTTP server.
 *
 * - Apps (user access token) subscribe to devices they are linked to and send them
 *   messages; devices (device token) send messages to their subscribers.
 * - Rooms: `device:<uuid>` holds the device's one socket, `subscribers:<uuid>` its
 *   subscribers, `subscribers:<uuid>:<userId>` one user's subscribed sockets (for `to`).
 *   Broadcasts to rooms cross API processes through the adapter.
 * - Each process follows `device-*` events live from the head and acts on its own sockets
 *   only: presence transitions become `device:status`, unlinks and deletions revoke.
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

export interface TunnelRedis {
  readonly url: string;
  /** Chosen by `npm run bench:tunnel` (bench/README.md). */
  readonly adapter?: RedisAdapterKind;
}

export interface TunnelDeps {
  readonly tokens: Pick<Tokens, 'verifyAccess' | 'verifyDevice'>;
  readonly eventStore: EventStore;
  readonly logger: Logger;
  readonly clock?: Clock;
  readonly limiter?: TunnelLimiter;
  /** Distributed mode: the Redis adapter. Absent or null: one process, the in-memory adapter. */
  readonly redis?: TunnelRedis | null;
  /** CORS for the polling transport (browsers); the WebSocket transport needs none. */
  readonly appOrigin?: string | undefined;
  readonly options?: Partial<TunnelOptions>;
  /** Told of every message relayed (metrics). */
  readonly onRelayed?: (direction: RelayDirection) => void;
  /** The device read model: the heartbeat presence `device:status` carries when the tunnel socket connects or drops. */
  readonly readStore?: ReadStore;
  /** Deactivated accounts: their app sockets are told ACCESS_REVOKED and closed. */
  readonly accessRevocations?: Pick<AccessRevocations, 'onRevoked'>;
}

export interface TunnelStats {
  readonly appSockets: number;
  readonly deviceSockets: number;
  readonly subscriptions: number;
}

export interface Tunnel {
  readonly stats: () => TunnelStats;
  /** Closes every socket's transport (clients reconnect, to another process), then the adapter. */
  readonly close: () => Promise<void>;
}

export const DEFAULT_REDIS_ADAPTER: RedisAdapterKind = 'sharded';

type Authenticated =
  | { readonly kind: 'app'; readonly userId: string; readonly exp: number }
  | { readonly kind: 'device'; readonly uuid: string; readonly gen: number; readonly exp: number; readonly authorizedAt: string };

interface SocketData {
  auth: Authenticated;
  /** A device socket's session, made (and the device claimed) before the connection is accepted. */
  device?: DeviceSession;
}

type TunnelServer = Server<ClientToServerEvents, ServerToClientEvents, InterServerEvents, SocketData>;
type TunnelNamespace = Namespace<ClientToServerEvents, ServerToClientEvents, InterServerEvents, SocketData>;
type TunnelSocket = Socket<ClientToServerEvents, ServerToClientEvents, InterServerEvents, SocketData>;
type Ack = (response: unknown) => void;

interface SessionBase {
  readonly socket: TunnelSocket;
  readonly principal: TunnelPrincipal;
  /** Events of this socket started or waiting, in arrival order, and the promise the next one waits for. */
  waiting: number;
  tail: Promise<void>;
  /** Sweeps in a row that found the socket's write queue over the limit. */
  congested: number;
  expiry: NodeJS.Timeout | undefined;
}

interface AppSession extends SessionBase {
  readonly kind: 'app';
  readonly userId: string;
  /** Subscribed device uuid → the `device-<uuid>` revision its link was checked at. */
  readonly subscriptions: Map<string, bigint>;
}

interface DeviceSession extends SessionBase {
  readonly kind: 'device';
  readonly uuid: string;
  readonly gen: number;
  /** The `device-<uuid>` revision the token was checked at. */
  readonly authorizedAt: bigint;
  claim: DeviceClaim | null;
  /** Replaced or revoked: already dealt with when its socket closes. */
  ended: boolean;
}

type Session = AppSession | DeviceSession;

export const deviceRoom = (uuid: string): string => `device:${uuid}`;
export const subscribersRoom = (uuid: string): string => `subscribers:${uuid}`;
export const userSubscribersRoom = (uuid: string, userId: string): string => `subscribers:${uuid}:${userId}`;

/** setTimeout's ceiling (about 24.8 days). */
const MAX_TIMER_MS = 2 ** 31 - 1;

type Maybe<T> = T | Promise<T>;

/** `next(value)`, at once when the value is already there: the hot path allocates no promise. */
function andThen<T, R>(value: Maybe<T>, next: (value: T) => Maybe<R>): Maybe<R> {
  return value instanceof Promise ? value.then(next) : next(value);
}

const DELIVERED: MessageAck = Object.freeze({ success: true, delivered: true });
const NOT_DELIVERED: MessageAck = Object.freeze({ success: true, delivered: false });

function allowed(decision: LimitDecision): void {
  if (!decision.allowed) throw new TunnelFailure('RATE_LIMITED', TUNNEL_MESSAGES.rateLimited, Math.max(1, Math.ceil(decision.retryAfter)));
}

function splitArgs(args: readonly unknown[]): { input: unknown; ack: Ack | undefined } {
  const last = args[args.length - 1];
  if (typeof last !== 'function') return { input: args[0], ack: undefined };
  return { input: args.length > 1 ? args[0] : undefined, ack: last as Ack };
}

function parse<S extends z.ZodType>(schema: S, input: unknown): z.infer<S> {
  if (exceedsSize(input)) throw new TunnelFailure('INVALID_PAYLOAD', TUNNEL_MESSAGES.tooLarge);
  return parseInput(schema, input);
}

function handshakeError(message: string, detail: string): Error & { data: { message: string } } {
  return Object.assign(new Error(message), { data: { message: detail } });
}

export async function createTunnel(httpServer: HttpServer, deps: TunnelDeps): Promise<Tunnel> {
  const options: TunnelOptions = { ...DEFAULT_TUNNEL_OPTIONS, ...deps.options };
  const { tokens, eventStore, logger } = deps;
  const clock = deps.clock ?? systemClock;
  const limiter = deps.limiter ?? unlimited;
  const now = (): string => clock.now().toISOString();

  const cluster: TunnelCluster =
    deps.redis === undefined || deps.redis === null
      ? createLocalCluster()
      : await createRedisCluster({ url: deps.redis.url, adapter: deps.redis.adapter ?? DEFAULT_REDIS_ADAPTER, logger });
  const access = createDeviceAccess(eventStore, { maxEntries: options.accessCacheSize, now: () => Date.now() });

  let closing = false;
  const sessions = new Map<string, Session>();
  /** The device sockets of each device on this process, including those still claiming. */
  const deviceSessions = new Map<string, Set<DeviceSession>>();
  /** The current (claimed) device socket of each device held by this process. */
  const liveDevices = new Map<string, DeviceSession>();
  /** Subscribed app sessions on this process, by device. */
  const subscribers = new Map<string, Set<AppSession>>();
  /** Work that outlives the event that started it (releases, notices), awaited on close. */
  const background = new Set<Promise<unknown>>();

  const track = (work: Promise<unknown>, what: string): void => {
    const guarded = work.catch((error: unknown) => logger.warn({ err: error instanceof Error ? error.message : String(error) }, `tunnel: ${what} failed`));
    background.add(guarded);
    void guarded.finally(() => background.delete(guarded));
  };

  const io: TunnelServer = new Server<ClientToServerEvents, ServerToClientEvents, InterServerEvents, SocketData>(httpServer, {
    serveClient: false,
    maxHttpBufferSize: options.maxFrameBytes,
    connectTimeout: 10_000,
    allowRequest: (_req, callback) => callback(closing ? 'shutting down' : null, !closing),
    ...(cluster.adapter !== undefined ? { adapter: cluster.adapter } : {}),
    ...(deps.appOrigin !== undefined ? { cors: { origin: deps.appOrigin, credentials: true } } : {}),
  });
  // Nothing lives in the main namespace.
  io.of('/').use((_socket, next) => next(handshakeError(UNAUTHORIZED, 'Connect to the /tunnel namespace')));
  const nsp: TunnelNamespace = io.of(TUNNEL_NAMESPACE);
  cluster.attach(nsp, (notice) => onNotice(notice));
  await cluster.roomsReady();

  // -------------------------------------------------------------------------------------
  // Handshake

  const authenticate = async (token: unknown): Promise<Authenticated> => {
    if (typeof token !== 'string' || token.length === 0 || token.length > 8192) throw new UnauthorizedError(TOKEN_MESSAGES.missing);
    try {
      const claims = tokens.verifyAccess(token);
      return { kind: 'app', userId: claims.sub, exp: claims.exp };
    } catch {
      // Not an access token: perhaps a device token.
    }
    const claims = tokens.verifyDevice(token);
    const folded = await access.fresh(claims.deviceUuid);
    if (folded.state.status !== 'active' || folded.state.gen !== claims.gen) throw new UnauthorizedError(TOKEN_MESSAGES.revoked);
    return { kind: 'device', uuid: claims.deviceUuid, gen: claims.gen, exp: claims.exp, authorizedAt: folded.revision.toString() };
  };

  nsp.use((socket, next) => {
    if (closing) {
      next(handshakeError('unavailable', TUNNEL_MESSAGES.unavailable));
      return;
    }
    const token: unknown = (socket.handshake.auth as Record<string, unknown> | undefined)?.token;
    authenticate(token)
      .then(async (auth) => {
        socket.data.auth = auth;
        // A hub is reachable from the moment its client sees `connect` (decisions §5): it
        // holds the device's room and claim before the connection is accepted.
        if (auth.kind === 'device') await admitDevice(socket, auth);
      })
      .then(
      () => next(),
      (error: unknown) => {
        if (error instanceof UnauthorizedError) {
          next(handshakeError(UNAUTHORIZED, error.message));
          return;
        }
        if (error instanceof TunnelFailure) {
          // A newer connection of the same device won the claim meanwhile.
          next(handshakeError('unavailable', error.message));
          return;
        }
        logger.warn({ err: error instanceof Error ? error.message : String(error) }, 'tunnel: handshake failed');
        next(handshakeError('unavailable', TUNNEL_MESSAGES.unavailable));
      },
    );
  });

  // -------------------------------------------------------------------------------------
  // Answers

  const refuse = (session: Session, error: unknown, ack: Ack | undefined, ackBody: (error: TunnelError) => unknown): void => {
    const payload = toTunnelError(error);
    if (!(error instanceof TunnelFailure) && !(error instanceof DomainError)) {
      logger.warn({ err: error instanceof Error ? error.message : String(error), socket: session.socket.id }, 'tunnel: event failed');
    }
    session.socket.emit('tunnel:error', payload);
    if (ack !== undefined) ack(ackBody(payload));
  };

  const failedMessage = (): MessageAck => ({ success: false, delivered: false });
  const failedSubscribe = (error: TunnelError): SubscribeAck => ({ success: false, error });

  /** Runs one event's work (synchronously when it needs no IO) and answers its ack once; null when done already. */
  const execute = (session: Session, input: unknown, ack: Ack | undefined, ackBody: (error: TunnelError) => unknown, work: (input: unknown) => Maybe<unknown>): Promise<void> | null => {
    let result: Maybe<unknown>;
    try {
      result = work(input);
    } catch (error) {
      refuse(session, error, ack, ackBody);
      return null;
    }
    if (!(result instanceof Promise)) {
      ack?.(result);
      return null;
    }
    return result
      .then(
        (response) => ack?.(response),
        (error: unknown) => refuse(session, error, ack, ackBody),
      )
      .catch((error: unknown) => logger.error({ err: error instanceof Error ? error.message : String(error) }, 'tunnel: answering failed'));
  };

  const tooBusy = (): TunnelFailure => new TunnelFailure('RATE_LIMITED', TUNNEL_MESSAGES.tooBusy, 1);

  /** `work` becomes the socket's tail: the next event starts only once it is done. */
  const enqueue = (session: Session, work: Promise<void>): void => {
    session.waiting++;
    session.tail = work.finally(() => {
      session.waiting--;
    });
  };

  /**
   * The events of one socket are handled in the order they arrive (decisions §5): an event
   * that needs no IO is answered at once when nothing is waiting; otherwise it waits behind
   * the socket's tail. At most `maxPendingPerSocket` events wait — never fewer than the rate
   * limits let through, so a burst within the limits is relayed whole and in order.
   */
  const run = (session: Session, args: readonly unknown[], ackBody: (error: TunnelError) => unknown, work: (input: unknown) => Maybe<unknown>): void => {
    const { input, ack } = splitArgs(args);
    if (session.waiting === 0) {
      const pending = execute(session, input, ack, ackBody, work);
      if (pending !== null) enqueue(session, pending);
      return;
    }
    if (session.waiting >= options.maxPendingPerSocket) {
      refuse(session, tooBusy(), ack, ackBody);
      return;
    }
    enqueue(
      session,
      session.tail.then(() => execute(session, input, ack, ackBody, work) ?? undefined),
    );
  };

  const consume = (session: Session, kind: TunnelLimitKind): Maybe<void> =>
    andThen(limiter.consume(kind, session.principal), allowed);

  const deviceConnected = (uuid: string): Maybe<boolean> => liveDevices.has(uuid) || andThen(cluster.remoteDevice(uuid), (remote) => remote.connected);

  const sendStatus = (uuid: string, status: DeviceStatus, localOnly: boolean): void => {
    (localOnly ? nsp.local : nsp).to(subscribersRoom(uuid)).emit('device:status', status);
  };

  /** The heartbeat presence as the REST API shows it (the read model), else as the device stream last said. */
  const presenceOf = async (uuid: string): Promise<{ isOnline: boolean; lastSeenAt: string | null }> => {
    const doc = deps.readStore === undefined ? null : await findDevice(deps.readStore, uuid);
    if (doc !== null) return { isOnline: doc.isOnline, lastSeenAt: doc.lastSeenAt };
    const state = access.peek(uuid)?.state;
    return state?.status === 'active' ? { isOnline: state.isOnline, lastSeenAt: state.lastSeenAt } : { isOnline: false, lastSeenAt: null };
  };

  /** The device's tunnel socket connected or dropped: every subscriber, on every process, hears it with the presence. */
  const announceTunnel = (uuid: string, tunnelConnected: boolean): void => {
    track(
      presenceOf(uuid).then((presence) => sendStatus(uuid, { deviceUuid: uuid, ...presence, tunnelConnected }, false)),
      'device status',
    );
  };

  /** A presence transition: each process tells its own subscribers, with whether the device's tunnel socket is up anywhere. */
  const announcePresence = (uuid: string, isOnline: boolean, lastSeenAt: string | null): void => {
    if (!subscribers.has(uuid)) return;
    const connected = liveDevices.has(uuid) ? true : Promise.resolve(cluster.remoteDevice(uuid)).then((remote) => remote.connected);
    track(
      Promise.resolve(connected).then((tunnelConnected) => sendStatus(uuid, { deviceUuid: uuid, isOnline, lastSeenAt, tunnelConnected }, true)),
      'device status',
    );
  };

  // -------------------------------------------------------------------------------------
  // Apps

  const notFound = (): TunnelFailure => new TunnelFailure('NOT_FOUND', TUNNEL_MESSAGES.deviceNotFound);

  /** Why the user may not control the device, or null when they may. */
  const controlRefusal = (state: DeviceState, userId: string): TunnelFailure | null => {
    const role = activeRole(state, userId);
    if (role === null) return notFound();
    return can(role, 'Control') ? null : new TunnelFailure('FORBIDDEN', TUNNEL_MESSAGES.forbidden);
  };

  const removeSubscription = (session: AppSession, uuid: string): void => {
    if (!session.subscriptions.delete(uuid)) return;
    const set = subscribers.get(uuid);
    set?.delete(session);
    if (set?.size === 0) subscribers.delete(uuid);
    if (session.socket.connected) {
      void session.socket.leave(subscribersRoom(uuid));
      void session.socket.leave(userSubscribersRoom(uuid, session.userId));
    }
  };

  const subscribe = async (session: AppSession, input: unknown): Promise<SubscribeAck> => {
    const { deviceUuid: uuid } = parse(subscribeRequest, input);
    await consume(session, 'subscribe');
    const folded = await access.fresh(uuid);
    if (activeRole(folded.state, session.userId) === null) throw notFound();
    if (!session.socket.connected) return { success: false, error: notFound().toPayload() };
    const known = session.subscriptions.get(uuid);
    if (known === undefined) {
      await session.socket.join([subscribersRoom(uuid), userSubscribersRoom(uuid, session.userId)]);
      await cluster.roomsReady();
      session.subscriptions.set(uuid, folded.revision);
      let set = subscribers.get(uuid);
      if (set === undefined) subscribers.set(uuid, (set = new Set()));
      set.add(session);
      // An unlink the live subscription applied while this was joining.
      const latest = access.peek(uuid);
      if (latest !== undefined && activeRole(latest.state, session.userId) === null) {
        removeSubscription(session, uuid);
        throw notFound();
      }
    } else if (folded.revision > known) {
      session.subscriptions.set(uuid, folded.revision);
    }
    const isOnline = folded.state.status === 'active' && folded.state.isOnline;
    return { success: true, deviceUuid: uuid, isOnline, tunnelConnected: await deviceConnected(uuid) };
  };

  const unsubscribe = (session: AppSession, input: unknown): UnsubscribeAck => {
    const { deviceUuid: uuid } = parse(subscribeRequest, input);
    removeSubscription(session, uuid);
    return { success: true, deviceUuid: uuid };
  };

  const relayToDevice = (session: AppSession, message: AppMessageInput): Maybe<MessageAck> => {
    const uuid = message.deviceUuid;
    const out: MessageToDevice = {
      id: message.id ?? randomUUID(),
      deviceUuid: uuid,
      from: { userId: session.userId },
      type: message.type,
      payload: message.payload ?? null,
      sentAt: now(),
    };
    const local = liveDevices.get(uuid);
    if (local !== undefined) {
      local.socket.emit('tunnel:message', out);
      deps.onRelayed?.('to_device');
      return DELIVERED;
    }
    return andThen(cluster.remoteDevice(uuid), (remote) => {
      if (!remote.connected) return NOT_DELIVERED;
      nsp.to(deviceRoom(uuid)).emit('tunnel:message', out);
      deps.onRelayed?.('to_device');
      return DELIVERED;
    });
  };

  /** The hot path: answered from memory unless the cache cannot tell. */
  const authorizeAndRelay = (session: AppSession, message: AppMessageInput): Maybe<MessageAck> => {
    const uuid = message.deviceUuid;
    const cached = access.peek(uuid);
    const refusal = cached === undefined ? notFound() : controlRefusal(cached.state, session.userId);
    if (refusal === null) return relayToDevice(session, message);
    // A refusal from the cache may predate a link just made through another process.
    if (cached !== undefined && access.verifiedRecently(uuid, options.denialRecheckMs)) throw refusal;
    return access.fresh(uuid).then((folded) => {
      const checked = controlRefusal(folded.state, session.userId);
      if (checked !== null) throw checked;
      return relayToDevice(session, message);
    });
  };

  const appSends = (session: AppSession, input: unknown): Maybe<MessageAck> => {
    const message = parse(appMessage, input);
    return andThen(consume(session, 'message'), () => authorizeAndRelay(session, message));
  };

  // -------------------------------------------------------------------------------------
  // Devices

  const relayFromDevice = (session: DeviceSession, message: DeviceMessageInput): MessageAck => {
    const out: MessageFromDevice = {
      id: message.id ?? randomUUID(),
      deviceUuid: session.uuid,
      from: 'device',
      ...(message.replyTo !== undefined ? { replyTo: message.replyTo } : {}),
      type: message.type,
      payload: message.payload ?? null,
      sentAt: now(),
    };
    const room = message.to !== undefined ? userSubscribersRoom(session.uuid, message.to) : subscribersRoom(session.uuid);
    nsp.to(room).emit('tunnel:message', out);
    deps.onRelayed?.('to_apps');
    return DELIVERED;
  };

  const deviceSends = (session: DeviceSession, input: unknown): Maybe<MessageAck> => {
    const message = parse(deviceMessage, input);
    return andThen(consume(session, 'message'), () => relayFromDevice(session, message));
  };

  /** The device's socket on this process is gone: forget it everywhere, and tell the subscribers. */
  const deviceLeft = (session: DeviceSession): void => {
    liveDevices.delete(session.uuid);
    if (session.claim !== null) {
      track(cluster.releaseDevice(session.uuid, session.claim), 'device release');
      cluster.announce({ kind: 'device-gone', uuid: session.uuid, claim: session.claim });
    }
    announceTunnel(session.uuid, false);
  };

  /**
   * Ends a device socket that lost its place. Replaced: the newer socket holds the device,
   * nothing changes for the subscribers. Revoked (deleted, newer token): the device is gone.
   */
  const endDevice = (session: DeviceSession, error: TunnelError): void => {
    if (session.ended) return;
    session.ended = true;
    if (liveDevices.get(session.uuid) === session) {
      if (error.code === 'SESSION_REPLACED') liveDevices.delete(session.uuid);
      else deviceLeft(session);
    }
    session.socket.emit('tunnel:error', error);
    session.socket.disconnect(true);
  };

  const replaced = (): TunnelError => ({ code: 'SESSION_REPLACED', message: TUNNEL_MESSAGES.sessionReplaced });
  const deviceRevoked = (): TunnelError => ({ code: 'ACCESS_REVOKED', message: TUNNEL_MESSAGES.deviceRevoked });

  /** The socket is gone (or was refused) before its session ended: the claim goes back. */
  const abandoned = (session: DeviceSession): boolean => session.ended || session.socket.conn.readyState !== 'open';

  /**
   * Joins the device's room and claims the device before the handshake is accepted, so
   * that the client's `connect` means "reachable from every process". A newer claim
   * elsewhere, a revocation, or a client gone meanwhile refuses the handshake instead.
   */
  const connectDevice = async (session: DeviceSession): Promise<void> => {
    const { uuid, socket } = session;
    await socket.join(deviceRoom(uuid));
    await cluster.roomsReady();
    const claim = await cluster.claimDevice(uuid, socket.id);
    session.claim = claim;
    if (abandoned(session)) {
      await cluster.releaseDevice(uuid, claim);
      throw new TunnelFailure('SESSION_REPLACED', TUNNEL_MESSAGES.sessionReplaced);
    }
    // A newer connection elsewhere may have claimed the device while this one was claiming.
    if ((await cluster.remoteDevice(uuid)).claim > claim) {
      session.ended = true;
      throw new TunnelFailure('SESSION_REPLACED', TUNNEL_MESSAGES.sessionReplaced);
    }
    if (abandoned(session)) throw new TunnelFailure('SESSION_REPLACED', TUNNEL_MESSAGES.sessionReplaced);
    const previous = liveDevices.get(uuid);
    if (previous !== undefined && previous !== session) {
      if ((previous.claim ?? 0) > claim) {
        session.ended = true;
        throw new TunnelFailure('SESSION_REPLACED', TUNNEL_MESSAGES.sessionReplaced);
      }
      endDevice(previous, replaced());
    }
    liveDevices.set(uuid, session);
    cluster.announce({ kind: 'device-connected', uuid, claim });
    announceTunnel(uuid, true);
  };

  const onNotice = (notice: ClusterNotice): void => {
    if (notice.kind !== 'device-connected') return;
    const local = liveDevices.get(notice.uuid);
    if (local !== undefined && local.claim !== null && local.claim < notice.claim) endDevice(local, replaced());
  };

  // -------------------------------------------------------------------------------------
  // Connections

  const expire = (session: Session): void => {
    session.socket.emit('tunnel:error', { code: 'TOKEN_EXPIRED', message: TUNNEL_MESSAGES.tokenExpired });
    session.socket.disconnect(true);
  };

  const onDisconnect = (session: Session): void => {
    clearTimeout(session.expiry);
    sessions.delete(session.socket.id);
    if (session.kind === 'app') {
      for (const uuid of [...session.subscriptions.keys()]) removeSubscription(session, uuid);
      return;
    }
    const set = deviceSessions.get(session.uuid);
    set?.delete(session);
    if (set?.size === 0) deviceSessions.delete(session.uuid);
    if (liveDevices.get(session.uuid) === session) deviceLeft(session);
  };

  /** The device half of the handshake: its session, its room and its claim, before `connect`. */
  const admitDevice = async (socket: TunnelSocket, auth: Extract<Authenticated, { kind: 'device' }>): Promise<void> => {
    const session: DeviceSession = {
      socket,
      waiting: 0,
      tail: Promise.resolve(),
      congested: 0,
      expiry: undefined,
      kind: 'device',
      principal: { type: 'device', id: auth.uuid },
      uuid: auth.uuid,
      gen: auth.gen,
      authorizedAt: BigInt(auth.authorizedAt),
      claim: null,
      ended: false,
    };
    // A deletion or a new token generation the live subscription applied during the handshake.
    const latest = access.peek(session.uuid);
    if (latest !== undefined && (latest.state.status !== 'active' || latest.state.gen !== session.gen)) {
      throw new UnauthorizedError(TOKEN_MESSAGES.revoked);
    }
    let set = deviceSessions.get(session.uuid);
    if (set === undefined) deviceSessions.set(session.uuid, (set = new Set()));
    set.add(session);
    // Socket.IO says nothing of a socket whose client leaves before the connection is accepted.
    socket.conn.once('close', () => {
      if (!socket.connected) onDisconnect(session);
    });
    try {
      await connectDevice(session);
    } catch (error) {
      onDisconnect(session);
      throw error;
    }
    socket.data.device = session;
  };

  nsp.on('connection', (socket) => {
    const auth = socket.data.auth;
    const session: Session =
      socket.data.device ??
      (auth.kind === 'app'
        ? { socket, waiting: 0, tail: Promise.resolve(), congested: 0, expiry: undefined, kind: 'app', principal: { type: 'user', id: auth.userId }, userId: auth.userId, subscriptions: new Map() }
        : null) ??
      ((): never => {
        throw new Error('a device socket connected without its session');
      })();
    sessions.set(socket.id, session);
    const who = session.kind === 'app' ? { kind: 'app', userId: session.userId } : { kind: 'device', deviceUuid: session.uuid };
    logger.info({ socket: socket.id, ...who }, 'tunnel: connected');
    socket.on('disconnect', (reason) => {
      logger.info({ socket: socket.id, ...who, reason }, 'tunnel: disconnected');
      onDisconnect(session);
    });

    if (auth.exp > 0) {
      const ms = auth.exp * 1000 - clock.now().getTime();
      session.expiry = setTimeout(() => expire(session), Math.min(Math.max(ms, 0), MAX_TIMER_MS));
      session.expiry.unref();
    }

    if (session.kind === 'app') {
      socket.on('tunnel:subscribe', (...args: unknown[]) => run(session, args, failedSubscribe, (input) => subscribe(session, input)));
      socket.on('tunnel:unsubscribe', (...args: unknown[]) => run(session, args, failedSubscribe, (input) => unsubscribe(session, input)));
      socket.on('tunnel:message', (...args: unknown[]) => run(session, args, failedMessage, (input) => appSends(session, input)));
      return;
    }

    const refuseSubscribe = (): never => {
      throw new TunnelFailure('FORBIDDEN', TUNNEL_MESSAGES.devicesCannotSubscribe);
    };
    socket.on('tunnel:subscribe', (...args: unknown[]) => run(session, args, failedSubscribe, refuseSubscribe));
    socket.on('tunnel:unsubscribe', (...args: unknown[]) => run(session, args, failedSubscribe, refuseSubscribe));
    socket.on('tunnel:message', (...args: unknown[]) => run(session, args, failedMessage, (input) => deviceSends(session, input)));
    // Replaced or revoked between the claim and this moment: it is over already.
    if (session.ended) socket.disconnect(true);
  });

  // -------------------------------------------------------------------------------------
  // Reactions to device events (every process follows them and acts on its own sockets)

  const revokeSubscriptions = (uuid: string, revision: bigint, userId: string | null): void => {
    const set = subscribers.get(uuid);
    if (set === undefined) return;
    for (const session of [...set]) {
      if (userId !== null && session.userId !== userId) continue;
      const checkedAt = session.subscriptions.get(uuid);
      if (checkedAt === undefined || checkedAt >= revision) continue;
      removeSubscription(session, uuid);
      session.socket.emit('tunnel:error', { code: 'ACCESS_REVOKED', message: TUNNEL_MESSAGES.accessRevoked(uuid) });
    }
  };

  const revokeDevices = (uuid: string, revoked: (session: DeviceSession) => boolean): void => {
    for (const session of [...(deviceSessions.get(uuid) ?? [])]) {
      if (revoked(session)) endDevice(session, deviceRevoked());
    }
  };

  const react = (recorded: RecordedEvent): void => {
    const event = asHomeHubEvent(recorded);
    if (event === null) return;
    const uuid = recorded.streamName.slice(STREAM_PREFIXES.device.length);
    switch (event.type) {
      case 'DeviceWentOnline':
        announcePresence(uuid, true, event.data.lastSeenAt);
        return;
      case 'DeviceWentOffline':
        announcePresence(uuid, false, event.data.lastSeenAt);
        return;
      case 'UserUnlinked':
        revokeSubscriptions(uuid, recorded.revision, event.data.userId);
        return;
      case 'DeviceDeleted':
        revokeSubscriptions(uuid, recorded.revision, null);
        revokeDevices(uuid, (session) => session.authorizedAt < recorded.revision);
        return;
      case 'DeviceTokenIssued':
        revokeDevices(uuid, (session) => session.gen < event.data.gen);
        return;
      default:
        return;
    }
  };

  // A deactivated account: every process closes the sockets it holds for it.
  deps.accessRevocations?.onRevoked((userId) => {
    for (const session of [...sessions.values()]) {
      if (session.kind !== 'app' || session.userId !== userId) continue;
      session.socket.emit('tunnel:error', { code: 'ACCESS_REVOKED', message: TUNNEL_MESSAGES.accountRevoked });
      session.socket.disconnect(true);
    }
  });

  let subscription: Subscription | null = null;
  let wake: () => void = () => undefined;
  const follow = async (start: GlobalPosition | null): Promise<void> => {
    let from = start;
    while (!closing) {
      const current = eventStore.subscribe({ ...(from !== null ? { fromPosition: from } : {}), streamPrefixes: [STREAM_PREFIXES.device] });
      subscription = current;
      try {
        for await (const item of current) {
          if (item.kind !== 'event') continue;
          from = item.event.position;
          access.apply(item.event);
          try {
            react(item.event);
          } catch (error) {
            logger.error({ err: error instanceof Error ? error.message : String(error), type: item.event.type }, 'tunnel: reaction failed');
          }
        }
      } catch (error) {
        if (!closing) logger.warn({ err: error instanceof Error ? error.message : String(error) }, 'tunnel: device event subscription failed; resubscribing');
      }
      await current.close().catch(() => undefined);
      if (closing) return;
      await new Promise<void>((resolve) => {
        wake = resolve;
        setTimeout(resolve, 1000).unref();
      });
    }
  };
  const following = follow(await eventStore.headPosition());

  // -------------------------------------------------------------------------------------
  // Housekeeping

  const queuedPackets = (socket: TunnelSocket): number => {
    // engine.io keeps what the transport could not take yet in `writeBuffer` (not in its types).
    const buffer: unknown = (socket.conn as unknown as { writeBuffer?: unknown }).writeBuffer;
    return Array.isArray(buffer) ? buffer.length : 0;
  };
  /** The TCP connection of a socket that came straight over WebSocket (the upgrade request's). */
  const rawConnection = (socket: TunnelSocket): NetSocket | null =>
    socket.request.headers.upgrade?.toLowerCase() === 'websocket' ? socket.request.socket : null;
  const sweep = setInterval(() => {
    for (const session of sessions.values()) {
      session.congested = queuedPackets(session.socket) > options.slowConsumerMaxQueued ? session.congested + 1 : 0;
      if (session.congested >= 2) {
        logger.warn({ socket: session.socket.id, principal: session.principal }, 'tunnel: slow consumer cut off');
        session.socket.conn.close(true);
        // A client that does not read would not finish the WebSocket closing handshake either.
        rawConnection(session.socket)?.destroy();
      }
    }
  }, options.sweepEveryMs);
  sweep.unref();
  const heldDevices = (): Array<{ uuid: string; claim: DeviceClaim }> =>
    [...liveDevices.values()].flatMap((s) => (s.claim !== null ? [{ uuid: s.uuid, claim: s.claim }] : []));
  const refresh = setInterval(() => track(cluster.refreshDevices(heldDevices()), 'device refresh'), 30_000);
  refresh.unref();
  cluster.onReconnect(() => {
    // Redis may have restarted empty: write the records again and tell the other processes,
    // whose answers about these devices may have gone stale meanwhile.
    const held = heldDevices();
    track(cluster.refreshDevices(held), 'device refresh');
    for (const device of held) cluster.announce({ kind: 'device-connected', ...device });
  });

  return {
    stats: () => {
      let appSockets = 0;
      let subscriptions = 0;
      for (const session of sessions.values()) {
        if (session.kind !== 'app') continue;
        appSockets++;
        subscriptions += session.subscriptions.size;
      }
      return { appSockets, deviceSockets: sessions.size - appSockets, subscriptions };
    },
    close: async () => {
      if (closing) return;
      closing = true;
      clearInterval(sweep);
      clearInterval(refresh);
      await subscription?.close().catch(() => undefined);
      wake();
      await following;
      // Closing the transports, not a Socket.IO disconnect: clients then reconnect (to another process).
      const connections = [...sessions.values()].flatMap((session) => rawConnection(session.socket) ?? []);
      io.engine.close();
      const settle = Promise.allSettled([...background]);
      await Promise.race([settle, new Promise((resolve) => setTimeout(resolve, 2000).unref())]);
      // Clients that did not finish the closing handshake by now are not going to.
      for (const connection of connections) connection.destroy();
      await Promise.allSettled([io.of('/'), nsp].map(async (namespace) => namespace.adapter.close()));
      await cluster.close();
    },
  };
}
