import { ServerResponse } from 'node:http';
import { Socket as NetSocket } from 'node:net';
import { WebSocket, WebSocketServer, type ServerOptions } from 'ws';

/**
 * The WebSocket engine of the tunnel (engine.io's `wsEngine`): `ws` as it is, except for what
 * an idle socket keeps.
 *
 * `ws`'s Receiver reads a frame's 4-byte mask as a view into the chunk the frame came in, and
 * keeps that view until the next frame: every socket held its last read chunk (for a hub that
 * has just connected, the chunk of its handshake; after a large message, that message's).
 * Once a frame's payload is unmasked the mask is not needed: it is let go then.
 */

/** The parts of `ws`'s Receiver (exported, not typed) this file touches. */
interface ReceiverInternals {
  _mask: Buffer | undefined;
  _bufferedBytes: number;
  _payloadLength: number;
  getData(cb: (error?: Error) => void): void;
}

type ReceiverClass = new (...args: never[]) => ReceiverInternals;

const Receiver = (WebSocket as unknown as { Receiver: ReceiverClass }).Receiver;

class MaskReleasingReceiver extends Receiver {
  override getData(cb: (error?: Error) => void): void {
    // The whole payload is here: getData unmasks it now (synchronously), and the mask is done with.
    const whole = this._bufferedBytes >= this._payloadLength;
    super.getData(cb);
    if (whole) this._mask = undefined;
  }
}

/** `ws`'s WebSocket with the method (not typed) that gives it its TCP connection and its Receiver. */
const WebSocketWithSocket = WebSocket as unknown as new (...args: ConstructorParameters<typeof WebSocket>) => WebSocket & { setSocket(...args: unknown[]): void };

/** The WebSocket of a tunnel connection: its receiver lets each frame's mask go. */
export class TunnelWebSocket extends WebSocketWithSocket {
  override setSocket(...args: unknown[]): void {
    super.setSocket(...args);
    const receiver = (this as unknown as { _receiver?: ReceiverInternals })._receiver;
    // Its own methods are the Receiver's: only getData differs.
    if (receiver !== undefined) Object.setPrototypeOf(receiver, MaskReleasingReceiver.prototype);
  }
}

/** `ws`'s server, making `TunnelWebSocket`s: engine.io constructs it with its own options. */
export class TunnelWebSocketServer extends WebSocketServer {
  constructor(options?: ServerOptions, callback?: () => void) {
    super({ ...options, WebSocket: TunnelWebSocket as unknown as typeof WebSocket }, callback);
  }
}

/** The listeners of an emitter (engine.io's transport and `ws`'s WebSocket both are). */
interface Listening {
  listeners(event: string): Array<(...args: unknown[]) => void>;
  removeListener(event: string, listener: (...args: unknown[]) => void): unknown;
}

/**
 * engine.io leaves an `error` listener of its own (`onUpgradeError`, a closure per connection)
 * on every WebSocket that came straight over WebSocket, for the time before the transport
 * listens; the transport listens from its creation on. Called once the connection has its
 * transport (engine.io's `connection`): the listener and what it holds are let go.
 */
export function dropUpgradeListener(engineSocket: { transport?: unknown }): void {
  const websocket = (engineSocket.transport as { socket?: unknown } | undefined)?.socket;
  if (!(websocket instanceof TunnelWebSocket)) return;
  const listening = websocket as unknown as Listening;
  const listeners = listening.listeners('error');
  // Only while the transport's own listener is there too: an error is never left unheard.
  if (listeners.length < 2) return;
  for (const listener of listeners) if (listener.name === 'onUpgradeError') listening.removeListener('error', listener);
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

