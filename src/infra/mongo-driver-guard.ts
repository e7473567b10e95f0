import { createRequire } from 'node:module';

/**
 * A guard around one defect of the MongoDB Node driver (6.x and 7.x alike): a command sent on
 * a connection whose socket is destroyed between the call and the write (a connection reset or
 * a network drop at that instant) never settles. The driver writes to the destroyed socket,
 * which answers `false` and never emits `drain`; its `close` came before the command began to
 * read, so nothing rejects the command, and the socket's timeout cannot fire on a destroyed
 * socket. When the command is the server monitor's `hello` (polling monitoring), the monitor
 * waits on it forever: the server stays "Unknown" and every operation of that client fails
 * server selection until the process restarts, although MongoDB is back. Measured through a
 * TCP proxy that cut a busy client's connections for 1.5 s: the client stayed unusable after
 * 5 cuts in 30 (driver 6.22) and 3 in 40 (7.9); after none in 40 with the guard
 * (test/infra/mongo-driver-guard.test.ts has the deterministic reproduction).
 *
 * The guard settles a command, and ends a streaming (`exhaust`) command, with the
 * connection's own network error as soon as the connection closes; the driver then does what
 * it does for any network error (marks the server unknown, clears the pool, checks again).
 */

interface DriverConnection {
  readonly closed: boolean;
  readonly error: Error | null;
  readonly id: number | string;
  readonly address: string;
  once(event: 'close', listener: () => void): unknown;
  off(event: 'close', listener: () => void): unknown;
}

type Command = (this: DriverConnection, ...args: unknown[]) => Promise<unknown>;
type ReplyListener = (error?: Error, reply?: unknown) => void;
type ExhaustCommand = (this: DriverConnection, ns: unknown, command: unknown, options: unknown, replyListener: ReplyListener) => void;

interface ConnectionPrototype {
  command: Command;
  exhaustCommand: ExhaustCommand;
  [GUARDED]?: true;
}

const GUARDED = Symbol.for('home-hub-cloud.mongo-driver-guard');

/** Installs the guard once per process on the driver's Connection class; safe to call again. */
export function guardClosedConnections(): void {
  const require = createRequire(__filename);
  const { Connection } = require('mongodb/lib/cmap/connection') as { Connection: { prototype: ConnectionPrototype } };
  const { MongoNetworkError } = require('mongodb') as { MongoNetworkError: new (message: string) => Error };
  const proto = Connection.prototype;
  if (proto[GUARDED] === true) return;
  proto[GUARDED] = true;

  const closedError = (connection: DriverConnection): Error =>
    connection.error ?? new MongoNetworkError(`connection ${String(connection.id)} to ${connection.address} closed`);

  const command = proto.command;
  proto.command = async function guardedCommand(this: DriverConnection, ...args: unknown[]): Promise<unknown> {
    if (this.closed) throw closedError(this);
    let onClose: (() => void) | undefined;
    const closed = new Promise<never>((_, reject) => {
      onClose = () => reject(closedError(this));
      this.once('close', onClose);
    });
    try {
      return await Promise.race([command.apply(this, args), closed]);
    } finally {
      if (onClose !== undefined) this.off('close', onClose);
    }
  };

  const exhaustCommand = proto.exhaustCommand;
  proto.exhaustCommand = function guardedExhaustCommand(this: DriverConnection, ns, cmd, options, replyListener): void {
    if (this.closed) {
      replyListener(closedError(this));
      return;
    }
    let ended = false;
    const onClose = (): void => {
      if (ended) return;
      ended = true;
      replyListener(closedError(this));
    };
    this.once('close', onClose);
    exhaustCommand.call(this, ns, cmd, options, (error, reply) => {
      if (ended) return;
      if (error !== undefined) {
        ended = true;
        this.off('close', onClose);
      }
      replyListener(error, reply);
    });
  };
}
