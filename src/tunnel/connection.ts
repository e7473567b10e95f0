import type { Tokens } from '../auth/tokens';
import { TOKEN_MESSAGES } from '../auth/tokens';
import type { Clock } from '../commands/handler';
import { UnauthorizedError } from '../domain/errors';
import type { AppSockets } from './apps';
import { andThen, appSession, errorText, type Authenticated, type Session, type TunnelContext, type TunnelSocket } from './context';
import type { DeviceSockets } from './devices';
import { TunnelFailure, TUNNEL_MESSAGES } from './errors';
import { UNAUTHORIZED, type SubscribeAck, type TunnelError } from './events';
import type { EventRunner } from './limits';
import { RateLimitedHandshake, type ClientIp, type HandshakeLimiter } from './handshake-limit';

/**
 * Connections and sessions: the handshake (an access token makes an app socket, a device
 * token a device socket), the session of each connected socket, its expiry with its
 * token, and the events each kind of socket listens to.
 */

/** setTimeout's ceiling (about 24.8 days). */
const MAX_TIMER_MS = 2 ** 31 - 1;

export function handshakeError(message: string, detail: string): Error & { data: { message: string } } {
  return Object.assign(new Error(message), { data: { message: detail } });
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
}

/** Installs the handshake middleware and the connection handler on the namespace. */
export function acceptConnections(ctx: TunnelContext, deps: ConnectionDeps): void {
  const { nsp, logger, access, sessions } = ctx;
  const { tokens, apps, devices, runner } = deps;

  const authenticate = async (token: unknown): Promise<Authenticated> => {
    if (typeof token !== 'string' || token.length === 0 || token.length > 8192) throw new UnauthorizedError(TOKEN_MESSAGES.missing);
    try {
      const claims = tokens.verifyAccess(token);
      return { kind: 'app', userId: claims.sub, exp: claims.exp, iat: claims.iat, ...(claims.fam !== undefined ? { fam: claims.fam } : {}) };
    } catch (error) {
      // A valid access token of a deactivated account is refused as such; anything else may be a device token.
      if (error instanceof UnauthorizedError && error.message === TOKEN_MESSAGES.revoked) throw error;
    }
    const claims = tokens.verifyDevice(token);
    const folded = await access.fresh(claims.deviceUuid);
    if (folded.state.status !== 'active' || folded.state.gen !== claims.gen) throw new UnauthorizedError(TOKEN_MESSAGES.revoked);
    return { kind: 'device', uuid: claims.deviceUuid, gen: claims.gen, exp: claims.exp, authorizedAt: folded.revision.toString() };
  };

  nsp.use((socket, next) => {
    if (ctx.closing()) {
      next(handshakeError('unavailable', TUNNEL_MESSAGES.unavailable));
      return;
    }
    const token: unknown = (socket.handshake.auth as Record<string, unknown> | undefined)?.token;
    const ip = deps.clientIp(socket.request);
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

  const expireWithToken = (session: Session, exp: number): void => {
    if (exp <= 0) return;
    const ms = exp * 1000 - deps.clock.now().getTime();
    session.expiry = setTimeout(() => {
      session.socket.emit('tunnel:error', { code: 'TOKEN_EXPIRED', message: TUNNEL_MESSAGES.tokenExpired });
      session.socket.disconnect(true);
    }, Math.min(Math.max(ms, 0), MAX_TIMER_MS));
    session.expiry.unref();
  };

  const sessionOf = (socket: TunnelSocket): Session => {
    if (socket.data.device !== undefined) return socket.data.device;
    const auth = socket.data.auth;
    if (auth.kind !== 'app') throw new Error('a device socket connected without its session');
    return appSession(socket, auth.userId);
  };

  nsp.on('connection', (socket) => {
    const session = sessionOf(socket);
    sessions.all.set(socket.id, session);
    const who = session.kind === 'app' ? { kind: 'app', userId: session.userId } : { kind: 'device', deviceUuid: session.uuid };
    logger.info({ socket: socket.id, ...who }, 'tunnel: connected');
    socket.on('disconnect', (reason) => {
      logger.info({ socket: socket.id, ...who, reason }, 'tunnel: disconnected');
      if (session.kind === 'app') apps.left(session);
      else devices.left(session);
    });
    expireWithToken(session, socket.data.auth.exp);

    if (session.kind === 'app') {
      socket.on('tunnel:subscribe', (...args: unknown[]) => apps.onSubscribe(session, args));
      socket.on('tunnel:unsubscribe', (...args: unknown[]) => apps.onUnsubscribe(session, args));
      socket.on('tunnel:message', (...args: unknown[]) => apps.onMessage(session, args));
      return;
    }
    const refuseSubscribe = (): never => {
      throw new TunnelFailure('FORBIDDEN', TUNNEL_MESSAGES.devicesCannotSubscribe);
    };
    const failedSubscribe = (error: TunnelError): SubscribeAck => ({ success: false, error });
    // Counted per principal before it is judged, as an app's is (decisions §6): refused all the
    // same, but a flood is told RATE_LIMITED past the tier.
    const countedRefusal = () => andThen(runner.consume(session, 'subscribe'), refuseSubscribe);
    socket.on('tunnel:subscribe', (...args: unknown[]) => runner.run(session, args, failedSubscribe, countedRefusal));
    socket.on('tunnel:unsubscribe', (...args: unknown[]) => runner.run(session, args, failedSubscribe, refuseSubscribe));
    socket.on('tunnel:message', (...args: unknown[]) => devices.onMessage(session, args));
    // Replaced or revoked between the claim and this moment: it is over already.
    if (session.ended) socket.disconnect(true);
  });
}
