import type { Tokens } from '../auth/tokens';
import { TOKEN_MESSAGES, unverifiedTokenType } from '../auth/tokens';
import type { Clock } from '../commands/handler';
import { UnauthorizedError } from '../domain/errors';
import type { AppSockets } from './apps';
import { andThen, appSession, errorText, type Authenticated, type Session, type TunnelContext, type TunnelSocket } from './context';
import type { DeviceSockets } from './devices';
import { TunnelFailure, TUNNEL_MESSAGES } from './errors';
import { UNAUTHORIZED, type SubscribeAck, type TunnelError } from './events';
import type { ExpirySweep } from './expiry';
import { rawConnection, type EventRunner } from './limits';
import { SmallMap } from './small-collections';
import { compactListeners } from './websocket';
import type { Socket as NetSocket } from 'node:net';
import { RateLimitedHandshake, type ClientIp, type HandshakeLimiter } from './handshake-limit';

/**
 * Connections and sessions: the handshake (an access token makes an app socket, a device
 * token a device socket), the session of each connected socket, its expiry with its
 * token, and the events each kind of socket listens to.
 */

/**
 * A refused handshake's error. Socket.IO sends the client its `message` and `data`, nothing
 * else, and the service does not log it: no stack is captured (in a reconnect storm thousands
 * are made a second; capturing their stacks was about 1 % of the service's CPU).
 */
export function handshakeError(message: string, detail: string): Error & { data: { message: string } } {
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    return Object.assign(new Error(message), { data: { message: detail } });
  } finally {
    Error.stackTraceLimit = limit;
  }
}

/** Who a session is, for the log. */
const who = (session: Session): Record<string, string> =>
  session.kind === 'app' ? { kind: 'app', userId: session.userId } : { kind: 'device', deviceUuid: session.uuid };

/**
 * What a connected socket keeps of its handshake: nothing, one object for all. The handshake
 * (its headers, query and URL; its `auth` holds the token) was needed until the connection
 * was accepted; what the tunnel needs later was taken already: the session's `raw` TCP
 * connection and its token's expiry.
 */
const FORGOTTEN_HANDSHAKE = Object.freeze({ headers: Object.freeze({}), time: '', address: '', xdomain: false, secure: false, issued: 0, url: '', query: Object.freeze({}), auth: Object.freeze({}) });

/** The upgrade request (engine.io and `socket.request` kept it for the life of the socket) and the handshake's copies are let go. */
function forgetHandshake(socket: TunnelSocket): void {
  (socket.conn as unknown as { request: unknown }).request = null;
  (socket as { handshake: unknown }).handshake = FORGOTTEN_HANDSHAKE;
}

/** The parts of Socket.IO's socket and client (not typed) that hold a Map per connection. */
interface ConnectionMaps {
  acks: Map<number, unknown>;
  client: { sockets: Map<string, unknown>; nsps: Map<string, unknown> };
}

/**
 * A connected socket made leaner once its listeners and maps are in place: the listener tables
 * of its emitters compacted (src/tunnel/websocket.ts), and Socket.IO's three maps of one entry
 * or none (its client's socket and namespace, its own acknowledgements) made `SmallMap`s.
 */
function compactConnection(socket: TunnelSocket, raw: NetSocket | null | undefined): void {
  compactListeners(socket);
  compactListeners(raw);
  const maps = socket as unknown as ConnectionMaps;
  if (maps.acks instanceof Map) maps.acks = new SmallMap(maps.acks);
  const client = maps.client;
  if (client.sockets instanceof Map) client.sockets = new SmallMap(client.sockets);
  if (client.nsps instanceof Map) client.nsps = new SmallMap(client.nsps);
  // Socket.IO's decoder keeps its one listener in an array with room for sixteen more.
  const decoder = (socket.client as unknown as { decoder?: { _callbacks?: Record<string, unknown> } }).decoder;
  const callbacks = decoder?._callbacks;
  if (callbacks !== undefined) for (const [event, list] of Object.entries(callbacks)) if (Array.isArray(list)) callbacks[event] = list.slice();
}

export interface ConnectionDeps {
  readonly tokens: Pick<Tokens, 'verifyAccess' | 'verifyDevice'>;
  readonly clock: Clock;
  readonly runner: EventRunner;
  readonly apps: AppSockets;
  readonly devices: DeviceSockets;
  /** Failed handshakes per client IP (src/tunnel/handshake-limit.ts). */
  readonly handshakes: HandshakeLimiter;
  readonly clientIp: ClientIp;
  /** Token expiry, one sweep for every socket. */
  readonly expiry: ExpirySweep;
  /** The handshake of `socket` was answered, accepted or refused (admission's window, src/tunnel/admission.ts). */
  readonly settled?: (socket: TunnelSocket) => void;
}

/** Installs the handshake middleware and the connection handler on the namespace. */
export function acceptConnections(ctx: TunnelContext, deps: ConnectionDeps): void {
  const { nsp, logger, access, sessions } = ctx;
  const { tokens, apps, devices, runner, expiry } = deps;

  const authenticate = async (token: unknown): Promise<Authenticated> => {
    if (typeof token !== 'string' || token.length === 0 || token.length > 8192) throw new UnauthorizedError(TOKEN_MESSAGES.missing);
    // The `type` claim, unverified, picks the verification: a token whose claims say `access`
    // can only be an access token (a device token's say `device`, and verification checks the
    // claim), so it is refused with what its own verification says (`Token has expired`,
    // decisions §7); any other can only fail as an access token, and is not tried as one.
    if (unverifiedTokenType(token) === 'access') {
      const claims = tokens.verifyAccess(token);
      return { kind: 'app', userId: claims.sub, exp: claims.exp, iat: claims.iat, ...(claims.fam !== undefined ? { fam: claims.fam } : {}) };
    }
    const claims = tokens.verifyDevice(token);
    const folded = await access.fresh(claims.deviceUuid);
    if (folded.state.status !== 'active' || folded.state.gen !== claims.gen) throw new UnauthorizedError(TOKEN_MESSAGES.revoked);
    return { kind: 'device', uuid: claims.deviceUuid, gen: claims.gen, exp: claims.exp, authorizedAt: folded.revision.toString() };
  };

  nsp.use((socket, answer) => {
    const next = (error?: Error): void => {
      deps.settled?.(socket);
      answer(error);
    };
    if (ctx.closing()) {
      next(handshakeError('unavailable', TUNNEL_MESSAGES.unavailable));
      return;
    }
    // A second namespace connection over a transport whose upgrade request is already gone.
    const request = socket.request as TunnelSocket['request'] | null;
    if (request === null) {
      next(handshakeError(UNAUTHORIZED, TUNNEL_MESSAGES.unavailable));
      return;
    }
    const token: unknown = (socket.handshake.auth as Record<string, unknown> | undefined)?.token;
    const ip = deps.clientIp(request);
    let counted = false;
    // Past its IP's limit of failed handshakes, refused before any token check.
    deps.handshakes
      .admit(ip)
      .then((decision) => {
        if (!decision.allowed) throw new RateLimitedHandshake(decision.retryAfter);
        counted = true;
        return authenticate(token);
      })
      .then(async (auth) => {
        socket.data.auth = auth;
        // A hub is reachable from the moment its client sees `connect` (decisions §5): it
        // holds the device's room and claim before the connection is accepted.
        if (auth.kind === 'device') await devices.admit(socket, auth);
      })
      .then(
        () => {
          // Only failed handshakes count.
          deps.handshakes.release(ip);
          next();
        },
        (error: unknown) => {
          if (counted && !(error instanceof UnauthorizedError)) deps.handshakes.release(ip);
          if (error instanceof RateLimitedHandshake) next(error);
          else if (error instanceof UnauthorizedError) next(handshakeError(UNAUTHORIZED, error.message));
          // A newer connection of the same device won the claim meanwhile.
          else if (error instanceof TunnelFailure) next(handshakeError('unavailable', error.message));
          else {
            logger.warn({ err: errorText(error) }, 'tunnel: handshake failed');
            next(handshakeError('unavailable', TUNNEL_MESSAGES.unavailable));
          }
        },
      );
  });

  const sessionOf = (socket: TunnelSocket): Session => {
    if (socket.data.device !== undefined) return socket.data.device;
    const auth = socket.data.auth;
    if (auth.kind !== 'app') throw new Error('a device socket connected without its session');
    return appSession(socket, auth.userId, auth.exp);
  };

  // The listeners every socket shares (`this` is the socket): nothing allocated per socket.
  const sessionFor = (socket: TunnelSocket): Session | undefined => sessions.all.get(socket.id);
  function onDisconnect(this: TunnelSocket, reason: string): void {
    const session = sessionFor(this);
    if (session === undefined) return;
    logger.info({ socket: this.id, ...who(session), reason }, 'tunnel: disconnected');
    if (session.kind === 'app') apps.left(session);
    else devices.left(session);
  }
  function onAppSubscribe(this: TunnelSocket, ...args: unknown[]): void {
    const session = sessionFor(this);
    if (session?.kind === 'app') apps.onSubscribe(session, args);
  }
  function onAppUnsubscribe(this: TunnelSocket, ...args: unknown[]): void {
    const session = sessionFor(this);
    if (session?.kind === 'app') apps.onUnsubscribe(session, args);
  }
  function onAppMessage(this: TunnelSocket, ...args: unknown[]): void {
    const session = sessionFor(this);
    if (session?.kind === 'app') apps.onMessage(session, args);
  }
  const refuseSubscribe = (): never => {
    throw new TunnelFailure('FORBIDDEN', TUNNEL_MESSAGES.devicesCannotSubscribe);
  };
  const failedSubscribe = (error: TunnelError): SubscribeAck => ({ success: false, error });
  function onDeviceSubscribe(this: TunnelSocket, ...args: unknown[]): void {
    const session = sessionFor(this);
    if (session === undefined) return;
    // Counted per principal before it is judged, as an app's is (decisions §6): refused all the
    // same, but a flood is told RATE_LIMITED past the tier.
    runner.run(session, args, failedSubscribe, () => andThen(runner.consume(session, 'subscribe'), refuseSubscribe));
  }
  function onDeviceUnsubscribe(this: TunnelSocket, ...args: unknown[]): void {
    const session = sessionFor(this);
    if (session !== undefined) runner.run(session, args, failedSubscribe, refuseSubscribe);
  }
  function onDeviceMessage(this: TunnelSocket, ...args: unknown[]): void {
    const session = sessionFor(this);
    if (session?.kind === 'device') devices.onMessage(session, args);
  }

  nsp.on('connection', (socket) => {
    const session = sessionOf(socket);
    session.raw = rawConnection(socket);
    forgetHandshake(socket);
    sessions.all.set(socket.id, session);
    logger.info({ socket: socket.id, ...who(session) }, 'tunnel: connected');
    socket.on('disconnect', onDisconnect);
    expiry.track(session);

    if (session.kind === 'app') {
      socket.on('tunnel:subscribe', onAppSubscribe);
      socket.on('tunnel:unsubscribe', onAppUnsubscribe);
      socket.on('tunnel:message', onAppMessage);
      compactConnection(socket, session.raw);
      return;
    }
    devices.accepted(session);
    socket.on('tunnel:subscribe', onDeviceSubscribe);
    socket.on('tunnel:unsubscribe', onDeviceUnsubscribe);
    socket.on('tunnel:message', onDeviceMessage);
    // Replaced or revoked between the claim and this moment: it is over already.
    if (session.ended) {
      socket.disconnect(true);
      return;
    }
    compactConnection(socket, session.raw);
  });
}
