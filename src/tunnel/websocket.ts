import { ServerResponse, type IncomingMessage } from 'node:http';
import { Socket as NetSocket } from 'node:net';
import { WebSocket, WebSocketServer, type ServerOptions } from 'ws';
import { OwnWebSocket } from './own-websocket';

/**
 * The WebSocket engine of the tunnel (engine.io's `wsEngine`): `ws` as it is, except for what
 * an idle socket keeps.
 *
 * `ws`'s Receiver reads a frame's 4-byte mask as a view into the chunk the frame came in, and
 * keeps that view until the next frame: every socket held its last read chunk (for a hub that
 * has just connected, the chunk of its handshake; after a large message, that message's).
 * Once a frame's payload is unmasked the mask is not needed: it is let go then.
 */

/** The parts of `ws`'s Receiver (exported, not typed; a Writable stream) this file touches. */
interface ReceiverInternals {
  _mask: Buffer | undefined;
  _buffers: Buffer[];
  _bufferedBytes: number;
  _payloadLength: number;
  readonly writableEnded: boolean;
  getData(cb: (error?: Error) => void): void;
  end(...args: unknown[]): unknown;
}

type ReceiverClass = new (...args: never[]) => ReceiverInternals;

const Receiver = (WebSocket as unknown as { Receiver: ReceiverClass }).Receiver;

class MaskReleasingReceiver extends Receiver {
  override getData(cb: (error?: Error) => void): void {
    // The whole payload is here: getData unmasks it now (synchronously), and the mask is done with.
    const whole = this._bufferedBytes >= this._payloadLength;
    super.getData(cb);
    if (whole) this._mask = undefined;
    // Read to its end: a new empty list, not the old one with room for the chunks it once held.
    if (this._bufferedBytes === 0 && this._buffers.length === 0) this._buffers = [];
  }

  /**
   * `ws` ends the receiver when its TCP socket ends and again when it closes; Node answers an
   * end after the first by building an error with a full stack (and dropping it, as `ws` passes
   * no callback). A second end is nothing here: in a storm's thousands of closes a second those
   * errors were about 2 % of the service's CPU.
   */
  override end(...args: unknown[]): unknown {
    if (args.length === 0 && this.writableEnded) return this;
    return super.end(...args);
  }
}

/** `ws`'s WebSocket with the method (not typed) that gives it its TCP connection and its Receiver. */
const WebSocketWithSocket = WebSocket as unknown as new (...args: ConstructorParameters<typeof WebSocket>) => WebSocket & { setSocket(...args: unknown[]): void };

/** The WebSocket `ws` makes for every upgrade but the tunnel's own connections' (a long-polling client's): its receiver lets each frame's mask go. */
export class TunnelWebSocket extends WebSocketWithSocket {
  override setSocket(...args: unknown[]): void {
    super.setSocket(...args);
    const receiver = (this as unknown as { _receiver?: ReceiverInternals })._receiver;
    // Its own methods are the Receiver's: only getData differs.
    if (receiver !== undefined) Object.setPrototypeOf(receiver, MaskReleasingReceiver.prototype);
  }
}

/**
 * Whether a request opens the tunnel's own connection (TunnelEngine.handshake's
 * `WebSocketConnection`): a new connection (no sid) of protocol 4 straight over WebSocket.
 * engine.io parses the query (`_query`) before it calls `ws` or its handshake; without one,
 * nothing is assumed.
 */
export function opensOwnConnection(request: IncomingMessage): boolean {
  const query = (request as IncomingMessage & { _query?: Record<string, string | undefined> })._query;
  return query !== undefined && query.transport === 'websocket' && query.EIO === '4' && query.sid === undefined;
}

/** The class `ws`'s server makes its WebSockets with (its option `WebSocket`), read when it completes an upgrade. */
type WebSocketClass = typeof WebSocket;

/**
 * `ws`'s server, answering every upgrade with its own checks and `101`: engine.io constructs it
 * with its own options. The WebSocket it makes is an `OwnWebSocket` (src/tunnel/own-websocket.ts)
 * for an upgrade that opens the tunnel's own connection, a `TunnelWebSocket` for any other.
 */
export class TunnelWebSocketServer extends WebSocketServer {
  declare options: ServerOptions & { WebSocket: WebSocketClass };

  constructor(options?: ServerOptions, callback?: () => void) {
    super({ ...options, WebSocket: TunnelWebSocket as unknown as WebSocketClass }, callback);
  }

  /**
   * The `101 Switching Protocols` answer and engine.io's open packet, which the tunnel writes
   * right after it (src/tunnel/engine.ts, once the connection's id is made: a microtask
   * later), go out in one write: a connection costs one system call fewer, which a crowd of
   * hubs reconnecting at once feels. `ws` refuses an upgrade with `end`, which writes what
   * is held; anything else written meanwhile goes with the uncork.
   *
   * Only an upgrade that opens the tunnel's own connection is corked (protocol 4, straight
   * over WebSocket, no sid: what TunnelEngine.handshake writes itself). engine.io refuses
   * others after `ws` accepted them (a protocol other than 4: a Socket.IO v2 client) by
   * writing its 400 and destroying the socket at once, and a socket destroyed while corked
   * drops what it holds: the client would hear nothing at all.
   */
  override handleUpgrade(...args: Parameters<WebSocketServer['handleUpgrade']>): void {
    const socket = args[1];
    if (!opensOwnConnection(args[0])) {
      super.handleUpgrade(...args);
      return;
    }
    socket.cork();
    // `ws` completes the upgrade (and constructs its WebSocket) before `handleUpgrade` returns: engine.io
    // gives it no `verifyClient`, the one thing it would wait for.
    this.options.WebSocket = OwnWebSocket as unknown as WebSocketClass;
    try {
      super.handleUpgrade(...args);
    } finally {
      this.options.WebSocket = TunnelWebSocket as unknown as WebSocketClass;
      queueMicrotask(() => {
        if (socket.writableCorked > 0) socket.uncork();
      });
    }
  }
}

/**
 * The `close` listener engine.io's stand-in response (`WebSocketResponse`) puts on the TCP
 * connection, as engine.io 6 writes it: `socket.once("close", () => this.emit("close"))`, its
 * source without white space (the bundled service is minified). It tells middlewares that
 * listen to the stand-in (logging ones do) that the connection ended; none of the tunnel's does.
 */
const STAND_IN_CLOSE_LISTENER = /^\(\)=>this\.emit\(["'`]close["'`]\)$/;
// An arrow function written in place has no name: the named listeners (`ws`'s, the tunnel's own) are not turned into text.
const isStandInListener = (listener: unknown): boolean =>
  typeof listener === 'function' && listener.name === '' && STAND_IN_CLOSE_LISTENER.test(String(listener).replace(/\s+/g, ''));

/**
 * engine.io hands its middlewares a stand-in response for a WebSocket upgrade (`res` is not a
 * `ServerResponse` then). The stand-in keeps the upgrade request (headers, raw headers, query),
 * and a `close` listener on the TCP connection keeps the stand-in (its own listener table
 * included), both for as long as the connection lives: about half a kilobyte per idle hub.
 * Called by the last of the middlewares, once none needs them any more: the request is let go,
 * and so is the listener (found by its source text: if engine.io writes it differently, it is
 * left where it is and test/tunnel/factory.test.ts says so).
 */
export function releaseUpgradeResponse(res: unknown): void {
  if (res instanceof ServerResponse || typeof res !== 'object' || res === null) return;
  const standIn = res as { req: unknown; socket?: unknown };
  standIn.req = null;
  const connection = standIn.socket;
  if (!(connection instanceof NetSocket)) return;
  // `listeners` gives a `once` listener unwrapped, and `removeListener` takes it so.
  for (const listener of connection.listeners('close')) {
    if (isStandInListener(listener)) connection.removeListener('close', listener as (...args: unknown[]) => void);
  }
}

/** The prototype of compacted listener tables: it has no keys, so none is inherited. */
const NO_LISTENERS: object = Object.freeze(Object.create(null) as object);

/**
 * Node's event emitters keep their listeners in an object without a prototype, which V8 keeps
 * as a dictionary: a few hundred bytes for a handful of events. Every idle tunnel connection
 * has four such emitters (the TCP socket, `ws`'s WebSocket and its Receiver, Socket.IO's
 * socket) whose listeners no longer change: called once they are in place, each table is
 * copied into an object of ordinary (fast) properties whose prototype has no keys, which
 * answers every lookup, addition and removal the same. A table changed later goes on working,
 * merely as a dictionary again.
 */
export function compactListeners(emitter: unknown): void {
  if (typeof emitter !== 'object' || emitter === null) return;
  const holder = emitter as { _events?: unknown };
  const table = holder._events;
  if (typeof table !== 'object' || table === null || Object.getPrototypeOf(table) !== null) return;
  const compact = Object.create(NO_LISTENERS) as Record<string | symbol, unknown>;
  for (const key of Reflect.ownKeys(table)) {
    const listeners = (table as Record<string | symbol, unknown>)[key];
    // A list of listeners keeps the room it once grew to (the TCP socket's `close` list, about 170 bytes): copied to its size.
    compact[key] = Array.isArray(listeners) ? listeners.slice() : listeners;
  }
  holder._events = compact;
}
