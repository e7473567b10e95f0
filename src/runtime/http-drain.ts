import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { Server as NetServer, type Socket } from 'node:net';

/**
 * HTTP draining at shutdown: what a server is doing (responses being written, open
 * sockets), and a close that answers what arrived before cutting what is left.
 */

/** Keep-alive connections that carry no request are closed from this long after SIGTERM on. */
const SHUTDOWN_IDLE_GRACE_MS = 500;

/** What an HTTP server is doing now, for a shutdown to find: responses being written, open sockets (upgraded ones included). */
export interface Traffic {
  readonly responses: ReadonlySet<ServerResponse>;
  readonly sockets: ReadonlySet<Socket>;
}

export function trackTraffic(server: Server): Traffic {
  const responses = new Set<ServerResponse>();
  const sockets = new Set<Socket>();
  // One listener for every socket (`this` is the socket): an idle WebSocket of a hub lives for
  // days, and a closure with a `once` wrapper per connection is a few hundred bytes each.
  function forget(this: Socket): void {
    sockets.delete(this);
  }
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.on('close', forget);
  });
  server.on('request', (_req: IncomingMessage, res: ServerResponse) => {
    responses.add(res);
    res.once('close', () => responses.delete(res));
  });
  return { responses, sockets };
}

/**
 * Closes an HTTP server gracefully: no new connections from now on; answers in flight
 * completed, with `Connection: close`, so their connections end with them; connections
 * that carry no request closed after a short grace; every socket still open (WebSockets
 * included) destroyed after `graceMs`.
 *
 * Not `server.close()` at first: since Node 19 it also closes at once every connection that
 * is "idle", which includes one whose request has arrived but not yet been parsed because
 * the event loop was busy: that request would be reset instead of answered. For the same
 * reason the idle sweeps run in the check phase (`setImmediate`), after pending input has
 * been read.
 */
export function drainHttpServer(server: Server, traffic: Traffic, graceMs: number): Promise<void> {
  return new Promise<void>((resolve) => {
    const closeAfterAnswer = (res: ServerResponse): void => {
      if (!res.headersSent) res.setHeader('Connection', 'close');
    };
    for (const res of traffic.responses) closeAfterAnswer(res);
    server.on('request', (_req: IncomingMessage, res: ServerResponse) => closeAfterAnswer(res));
    const sweep = (): void => {
      setImmediate(() => server.closeIdleConnections());
    };
    let idle: NodeJS.Timeout | undefined;
    const startIdle = setTimeout(() => {
      sweep();
      idle = setInterval(sweep, 100);
    }, SHUTDOWN_IDLE_GRACE_MS);
    const cut = setTimeout(() => {
      server.closeAllConnections();
      for (const socket of traffic.sockets) socket.destroy();
    }, graceMs);
    NetServer.prototype.close.call(server, () => {
      clearTimeout(startIdle);
      clearInterval(idle);
      clearTimeout(cut);
      resolve();
    });
  });
}
