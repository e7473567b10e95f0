import { readdirSync, readFileSync, statSync } from 'node:fs';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Logger } from '../logger';
import { rawErrorAnswer } from './client-errors';

/**
 * Head-room below the process's limit of open files. Every TCP connection is a descriptor,
 * and at the limit libuv accepts each new connection only to close it at once: a person
 * opening the app sees the connection dropped like a hub does. A reconnect storm gets there
 * (bench/README.md, "The hubs of a dead process, at the survivor": 20,000 descriptors, the
 * limit, with 2,693 of 19,000 hubs connected): WebSockets, the heartbeats' kept-alive HTTP
 * connections and connections still waiting for their answer.
 *
 * Past `limit - reserve` descriptors (counted as those open at the start plus the server's
 * connections), the process gives descriptors back instead of taking more:
 * - kept-alive HTTP connections that wait for nothing are closed (at most once a second:
 *   every answer on them written out, nothing of a next request arrived), and every HTTP
 *   answer closes its connection (`Connection: close`);
 * - a new WebSocket upgrade is answered `503` with `Retry-After` and closed at once, before
 *   any handshake work: clients come back after their backoff, when there is room.
 * Requests keep being answered, a person's among them: that is what the reserve is for.
 */

/**
 * Descriptors kept free by default: a hundredth of the limit (200 of 20,000: a process holding
 * 19,000 hubs keeps its head-room), and never fewer than this.
 */
export const MIN_RESERVE = 64;
/** What a refused upgrade is told to wait, in seconds. */
export const UPGRADE_RETRY_AFTER_SECONDS = 5;
const SHED_EVERY_MS = 1000;

/** The soft limit of open files of this process (Linux's `/proc/self/limits`); null when unlimited or unknown. */
export function openFileLimit(read: () => string = () => readFileSync('/proc/self/limits', 'utf8')): number | null {
  try {
    const match = /^Max open files\s+(\d+|unlimited)\s/m.exec(read());
    return match?.[1] === undefined || match[1] === 'unlimited' ? null : Number(match[1]);
  } catch {
    return null;
  }
}

/**
 * The descriptors this process has open now (Linux's `/proc/self/fd`); null when unknown.
 * Linux 6.2 and later give their count as the directory's size: a `stat` of a few microseconds.
 * Older kernels say 0, and the directory is listed: a name per descriptor, about 19 ms at
 * 19,000 of them (a hub each), on the event loop.
 */
export function openDescriptors(): number | null {
  try {
    const size = statSync('/proc/self/fd').size;
    // The listing holds the directory open while it reads: one name more than the count.
    return size > 0 ? size : readdirSync('/proc/self/fd').length - 1;
  } catch {
    return null;
  }
}

export interface DescriptorHeadroomOptions {
  /** The limit of open files (`openFileLimit()`); null: no guard. */
  readonly limit: number | null;
  /** Descriptors kept free (default: max(MIN_RESERVE, limit / 100)). */
  readonly reserve?: number;
  /** Descriptors open besides the server's connections (default: those open now). */
  readonly baseline?: number;
  readonly logger: Pick<Logger, 'warn' | 'info'>;
}

const REFUSAL = rawErrorAnswer(503, 'Service Unavailable', 'Too many connections at once, retry later', `Retry-After: ${UPGRADE_RETRY_AFTER_SECONDS}\r\n`);

/**
 * Guards `server` (call it once every `upgrade` listener is in place: the tunnel's): its
 * connections are counted, and past the threshold it sheds as described above.
 */
export function guardDescriptors(server: Server, options: DescriptorHeadroomOptions): void {
  let connections = 0;
  const limit = options.limit;
  const threshold = limit === null ? null : limit - (options.reserve ?? Math.max(MIN_RESERVE, Math.ceil(limit / 100))) - (options.baseline ?? openDescriptors() ?? 0);
  const pressed = (): boolean => threshold !== null && connections >= threshold;
  if (threshold === null) return;

  // Connections that wait for nothing: every answer on them is written out, and nothing was read
  // since (by `bytesRead`: a next request that has begun to arrive, even unparsed, is not nothing).
  // Not Node's `closeIdleConnections`: it takes a connection whose answer is still being written
  // (`end()` called, the bytes not all out, a pipelined request queued behind it) for idle.
  const quiet = new Map<Socket, number>();
  // Connections with answers still to be written: how many.
  const busy = new Map<Socket, number>();
  const closeQuiet = (): void => {
    for (const [socket, readAt] of quiet) {
      if (socket.bytesRead === readAt && socket.writableLength === 0) socket.destroy();
    }
  };

  let lastShed = -Infinity;
  let episode = false;
  const shed = (): void => {
    const now = performance.now();
    if (now - lastShed < SHED_EVERY_MS) return;
    lastShed = now;
    if (!episode) {
      episode = true;
      options.logger.warn({ connections, threshold, limit }, 'open files near the limit: idle connections closed, new upgrades refused');
    }
    // In the check phase, as the shutdown's sweeps (src/runtime/http-drain.ts): the input that
    // arrived with the connection that pressed, a next request on a kept-alive one, is read first.
    setImmediate(closeQuiet);
  };

  // One listener for every connection (`this` is it), no closure per connection: a hub's WebSocket lives for days.
  function forget(this: Socket): void {
    connections--;
    quiet.delete(this);
    busy.delete(this);
    if (episode && !pressed()) {
      episode = false;
      options.logger.info({ connections, threshold }, 'open files below the reserve again');
    }
  }
  server.on('connection', (socket: Socket) => {
    connections++;
    socket.on('close', forget);
    if (pressed()) shed();
  });

  // Before the application's listeners: the header is set before any answer is written.
  server.prependListener('request', (request: IncomingMessage, response: ServerResponse) => {
    if (pressed()) response.setHeader('Connection', 'close');
    const socket = request.socket as Socket;
    quiet.delete(socket);
    busy.set(socket, (busy.get(socket) ?? 0) + 1);
    // After 'finish' (its bytes handed to the system), or when the connection closed.
    response.once('close', () => {
      const left = (busy.get(socket) ?? 1) - 1;
      if (left > 0) busy.set(socket, left);
      else {
        busy.delete(socket);
        if (!socket.destroyed) quiet.set(socket, socket.bytesRead);
      }
    });
  });

  // Refused before the tunnel's own listeners (engine.io's) see the upgrade: they run only when there is room.
  const upgraders = server.listeners('upgrade') as Array<(request: IncomingMessage, socket: Duplex, head: Buffer) => void>;
  server.removeAllListeners('upgrade');
  server.on('upgrade', (request: IncomingMessage, socket: Duplex, head: Buffer) => {
    // No longer HTTP: never shed as an idle connection (an answer still owed on it keeps it out for good).
    quiet.delete(socket as Socket);
    if (busy.has(socket as Socket)) busy.set(socket as Socket, Infinity);
    if (!pressed()) {
      for (const upgrade of upgraders) upgrade.call(server, request, socket, head);
      return;
    }
    socket.on('error', () => undefined);
    socket.once('finish', () => socket.destroy());
    socket.end(REFUSAL);
  });
}
