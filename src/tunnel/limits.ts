import type { Socket as NetSocket } from 'node:net';
import type { z } from 'zod';
import { DomainError } from '../domain/errors';
import { parseInput } from '../api/validation';
import { andThen, errorText, IDLE_TAIL, principalOf, type Maybe, type Session, type TunnelContext, type TunnelSocket } from './context';
import { TunnelFailure, TUNNEL_MESSAGES, toTunnelError } from './errors';
import type { TunnelError } from './events';
import type { LimitDecision, TunnelLimiter, TunnelLimitKind } from './limiter';
import { exceedsSize } from './schemas';

/**
 * Limits and back-pressure: the order of a socket's events, the bound on what may wait,
 * the rate limits of `tunnel:message` and `tunnel:subscribe`, and slow consumers.
 *
 * The events of one socket are handled in the order they arrive (decisions §5): an event
 * that needs no IO is answered at once when nothing is waiting; otherwise it waits behind
 * the socket's tail. At most `maxPendingPerSocket` events wait, never fewer than the rate
 * limits let through, so a burst within the limits is relayed whole and in order.
 */

export type Ack = (response: unknown) => void;
export type AckBody = (error: TunnelError) => unknown;
export type Work = (input: unknown) => Maybe<unknown>;

export interface EventRunner {
  /** Handles one event of the socket in its turn; answers its ack once; never throws. */
  run(session: Session, args: readonly unknown[], ackBody: AckBody, work: Work): void;
  /** Counts the event against the principal's rate limit; RATE_LIMITED when refused. */
  consume(session: Session, kind: TunnelLimitKind): Maybe<void>;
}

function allowed(decision: LimitDecision): void {
  if (!decision.allowed) throw new TunnelFailure('RATE_LIMITED', TUNNEL_MESSAGES.rateLimited, Math.max(1, Math.ceil(decision.retryAfter)));
}

function splitArgs(args: readonly unknown[]): { input: unknown; ack: Ack | undefined } {
  const last = args[args.length - 1];
  if (typeof last !== 'function') return { input: args[0], ack: undefined };
  return { input: args.length > 1 ? args[0] : undefined, ack: last as Ack };
}

/** An event's payload through its schema; INVALID_PAYLOAD when too large or malformed. */
export function parse<S extends z.ZodType>(schema: S, input: unknown): z.infer<S> {
  if (exceedsSize(input)) throw new TunnelFailure('INVALID_PAYLOAD', TUNNEL_MESSAGES.tooLarge);
  return parseInput(schema, input);
}

export function createEventRunner(ctx: Pick<TunnelContext, 'logger' | 'options'>, limiter: TunnelLimiter): EventRunner {
  const { logger, options } = ctx;

  const refuse = (session: Session, error: unknown, ack: Ack | undefined, ackBody: AckBody): void => {
    const payload = toTunnelError(error);
    if (!(error instanceof TunnelFailure) && !(error instanceof DomainError)) {
      logger.warn({ err: errorText(error), socket: session.socket.id }, 'tunnel: event failed');
    }
    session.socket.emit('tunnel:error', payload);
    if (ack !== undefined) ack(ackBody(payload));
  };

  /** Runs one event's work (synchronously when it needs no IO) and answers its ack; null when done already. */
  const execute = (session: Session, input: unknown, ack: Ack | undefined, ackBody: AckBody, work: Work): Promise<void> | null => {
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
      .catch((error: unknown) => logger.error({ err: errorText(error) }, 'tunnel: answering failed'));
  };

  /** `work` becomes the socket's tail: the next event starts only once it is done. */
  const enqueue = (session: Session, work: Promise<void>): void => {
    session.waiting++;
    session.tail = work.finally(() => {
      // Nothing waits any more: the settled promise does not stay with the socket.
      if (--session.waiting === 0) session.tail = IDLE_TAIL;
    });
  };

  return {
    run(session, args, ackBody, work) {
      const { input, ack } = splitArgs(args);
      if (session.waiting === 0) {
        const pending = execute(session, input, ack, ackBody, work);
        if (pending !== null) enqueue(session, pending);
        return;
      }
      if (session.waiting >= options.maxPendingPerSocket) {
        refuse(session, new TunnelFailure('RATE_LIMITED', TUNNEL_MESSAGES.tooBusy, 1), ack, ackBody);
        return;
      }
      enqueue(
        session,
        session.tail.then(() => execute(session, input, ack, ackBody, work) ?? undefined),
      );
    },
    consume: (session, kind) => andThen(limiter.consume(kind, principalOf(session)), allowed),
  };
}

/**
 * The TCP connection of a socket that came straight over WebSocket (the upgrade request's),
 * read at the handshake: the request itself is not kept (src/tunnel/connection.ts).
 */
export function rawConnection(socket: TunnelSocket): NetSocket | null {
  const request = socket.request as TunnelSocket['request'] | null;
  if (request === null) return null;
  return request.headers.upgrade?.toLowerCase() === 'websocket' ? request.socket : null;
}

function queuedPackets(socket: TunnelSocket): number {
  // engine.io keeps what the transport could not take yet in `writeBuffer` (not in its types).
  const buffer: unknown = (socket.conn as unknown as { writeBuffer?: unknown }).writeBuffer;
  return Array.isArray(buffer) ? buffer.length : 0;
}

/** Cuts off a socket whose write queue stays over the limit at two sweeps in a row. Returns the stop. */
export function startSlowConsumerSweep(ctx: Pick<TunnelContext, 'logger' | 'options' | 'sessions'>): () => void {
  const sweep = setInterval(() => {
    for (const session of ctx.sessions.all.values()) {
      session.congested = queuedPackets(session.socket) > ctx.options.slowConsumerMaxQueued ? session.congested + 1 : 0;
      if (session.congested >= 2) {
        ctx.logger.warn({ socket: session.socket.id, principal: principalOf(session) }, 'tunnel: slow consumer cut off');
        session.socket.conn.close(true);
        // A client that does not read would not finish the WebSocket closing handshake either.
        session.raw?.destroy();
      }
    }
  }, ctx.options.sweepEveryMs);
  sweep.unref();
  return () => clearInterval(sweep);
}
