import type { Clock } from '../commands/handler';
import type { Session, TunnelContext } from './context';
import { TUNNEL_MESSAGES } from './errors';

/**
 * Token expiry for every socket of the process with one timer (decisions §5: a socket is
 * disconnected when its token expires, after `tunnel:error {code: 'TOKEN_EXPIRED'}`). A
 * timer per socket would cost each idle hub a `Timeout` and its closure; here each session
 * only carries its `expiresAt`, and a sweep every `everyMs` (1 s) walks the sessions only
 * when the earliest expiry it knows of has come: a socket is cut at most `everyMs` after
 * its token expired.
 */
export interface ExpirySweep {
  /** A new session: its `expiresAt` counts from now on. */
  track(session: Session): void;
  /** Runs a sweep now (the timer does it every `everyMs`). */
  sweep(): void;
  stop(): void;
}

export function startExpirySweep(ctx: Pick<TunnelContext, 'sessions'>, clock: Clock, everyMs = 1000): ExpirySweep {
  // The earliest `expiresAt` of the sessions seen since the last walk (it may have left: then the walk finds nothing).
  let nextDue = Infinity;

  const expire = (session: Session): void => {
    session.socket.emit('tunnel:error', { code: 'TOKEN_EXPIRED', message: TUNNEL_MESSAGES.tokenExpired });
    session.socket.disconnect(true);
  };

  const sweep = (): void => {
    const now = clock.now().getTime();
    if (now < nextDue) return;
    const due: Session[] = [];
    let next = Infinity;
    for (const session of ctx.sessions.all.values()) {
      if (session.expiresAt === 0) continue;
      if (session.expiresAt <= now) due.push(session);
      else if (session.expiresAt < next) next = session.expiresAt;
    }
    nextDue = next;
    for (const session of due) expire(session);
  };

  const timer = setInterval(sweep, everyMs);
  timer.unref();
  return {
    track(session) {
      if (session.expiresAt !== 0 && session.expiresAt < nextDue) nextDue = session.expiresAt;
    },
    sweep,
    stop: () => clearInterval(timer),
  };
}
