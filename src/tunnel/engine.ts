import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Turns } from '../runtime/turns';
import { Server as EngineServer, type ErrorCallback, type ServerOptions, type Socket as EngineSocket } from 'engine.io';
import { connectionId } from './connection-ids';
import { OPEN as WEBSOCKET_OPEN, OwnWebSocket } from './own-websocket';
import { opensOwnConnection } from './websocket';

/**
 * The tunnel's engine.io server: engine.io as it is, except for connections that come straight
 * over WebSocket (every hub and app the contract knows: "Connect … with the WebSocket
 * transport"), which get a `WebSocketConnection` instead of engine.io's `Socket` and transport.
 *
 * Why: an idle hub is mostly its connection's objects. engine.io gives each connection a
 * `Socket` (six arrays, two timers, five listeners on its transport and a cleanup closure)
 * and a `WebSocket` transport (an event emitter with a listener table of its own, four send
 * callbacks and three listeners on `ws`'s socket): about 3 KB of heap per connection, for a
 * protocol that over WebSocket is one character in front of each message. This connection
 * speaks the same engine.io protocol (version 4) in a few hundred bytes, over a WebSocket of
 * its own (src/tunnel/own-websocket.ts, which hands it each message), and one sweep a second
 * pings every connection instead of a timer per connection (bench/README.md, "A connection of
 * its own for WebSocket").
 *
 * What Socket.IO asks of an engine.io socket, it has: `id`, `request`, `remoteAddress`,
 * `protocol`, `readyState`, `transport.name` and `.writable`, `write`, `close`, and the
 * events `data` and `close` (with engine.io's reasons: `transport close`, `transport error`,
 * `ping timeout`, `parse error`, `forced close`). Connections that start with HTTP long
 * polling (a browser app may) and those of protocol 3 stay engine.io's own.
 */

/** engine.io's packet types, as the first character of a text frame. */
const OPEN = '0';
const PING = '2';
const PONG = '3';
const MESSAGE = '4';
const BASE64 = 'b';
/** Types a client may send (close, upgrade and noop are ignored over WebSocket, as engine.io does). */
const KNOWN_TYPES = '0123456b';

export type CloseReason = 'transport close' | 'transport error' | 'ping timeout' | 'parse error' | 'forced close';

type Listener = (...args: never[]) => void;
type Frame = string | Buffer;

/** Frames a connection may send while its handshake waits for its turn (a client sends one, its `CONNECT`). */
const MAX_HELD_FRAMES = 16;

/** A request engine.io has upgraded: its WebSocket and the parsed query are on it. */
interface UpgradedRequest extends IncomingMessage {
  websocket?: unknown;
  _query?: Record<string, string | undefined>;
}

/**
 * One connection over WebSocket. Its listeners are kept in one flat array (`[event, listener,
 * once, event, listener, once, …]`): Socket.IO puts three on it and the tunnel one, and an
 * `EventEmitter`'s table of them is a dictionary of half a kilobyte (with a closure for each
 * `once`).
 */
export class WebSocketConnection {
  readyState: 'open' | 'closing' | 'closed' = 'open';
  /** False while a batch of frames is being written: later ones wait in `writeBuffer`. */
  writable = true;
  /** Frames not written yet (the tunnel's slow-consumer sweep counts them, as it does engine.io's). */
  writeBuffer: Frame[] = [];
  /** Let go once the handshake is done with it (src/tunnel/connection.ts). */
  request: IncomingMessage | null;
  readonly remoteAddress: string | undefined;
  /** The engine's tick at which this connection is next pinged, or, while a ping waits for its pong, closed. */
  due: number;
  private awaitingPong = false;
  /** A ping's wait was extended by a packet other than the pong already (engine.io extends it once). */
  private extended = false;
  private handlers: Array<string | Listener | boolean> = [];
  /** Whether the client's first frame (its Socket.IO `CONNECT`) has come. */
  private greeted = false;
  /** Frames held, in order, while the first waits for its turn (`TunnelEngine.handshakeTurns`); null: none held. */
  private held: Frame[] | null = null;
  private callbacks: Array<() => void> | null = null;

  constructor(
    readonly id: string,
    private readonly engine: TunnelEngine,
    readonly websocket: OwnWebSocket,
    request: IncomingMessage,
  ) {
    this.request = request;
    this.remoteAddress = request.socket.remoteAddress;
    this.due = engine.pingDue();
    // From now on the WebSocket hands this connection its messages, its errors and its close.
    websocket.connection = this;
    const { pingInterval, pingTimeout, maxHttpBufferSize } = engine.opts;
    this.send(OPEN + JSON.stringify({ sid: id, upgrades: [], pingInterval, pingTimeout, maxPayload: maxHttpBufferSize }));
  }

  /** Engine.io protocol 4 (Socket.IO v3 and later). */
  get protocol(): 4 {
    return 4;
  }

  /** Socket.IO reads the transport's name and whether it can write now: this connection is both. */
  get transport(): this {
    return this;
  }

  get name(): 'websocket' {
    return 'websocket';
  }

  /** Never upgraded, never upgrading: an upgrade request naming this connection is closed (engine.io's rule). */
  get upgrading(): false {
    return false;
  }

  get upgraded(): true {
    return true;
  }

  /**
   * An HTTP request naming this connection's id with `transport=websocket` but no upgrade:
   * engine.io hands it to the connection's transport, which over WebSocket has nothing to
   * answer. Refused as engine.io refuses a bad request (its own transport leaves it
   * unanswered); the connection goes on.
   */
  onRequest(req: IncomingMessage & { res?: ServerResponse }): void {
    const res = req.res;
    if (res === undefined || res.headersSent) return;
    res.writeHead(400, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify({ code: 3, message: 'Bad request' }));
  }

  /** A Socket.IO packet, encoded (engine.io's `write`). */
  write(data: Frame, _options?: unknown, callback?: () => void): this {
    if (this.readyState !== 'open') return this;
    if (callback !== undefined) (this.callbacks ??= []).push(callback);
    this.send(typeof data === 'string' ? MESSAGE + data : data);
    return this;
  }

  send(frame: Frame): void {
    this.writeBuffer.push(frame);
    this.flush();
  }

  /**
   * Closes the connection once what it was asked to write is written; `discard`: at once,
   * whatever waits or is being written (a client that reads nothing never lets a write end).
   * Socket.IO then hears `close` with `forced close`.
   */
  close(discard = false): this {
    if (this.readyState === 'closed' || (this.readyState === 'closing' && !discard)) return this;
    this.readyState = 'closing';
    if (discard) {
      this.writeBuffer = [];
      this.closeTransport();
      return this;
    }
    this.flush();
    if (this.writable) this.closeTransport();
    return this;
  }

  /** A message from the client (the WebSocket joins fragments; text frames come as text). */
  receive(frame: Frame): void {
    if (this.readyState !== 'open') return;
    if (this.held !== null) {
      // A client waits for its handshake's answer: more than a few frames before it is not one.
      if (this.held.length >= MAX_HELD_FRAMES) this.onClose('transport error', new Error('frames sent before the handshake was answered'));
      else this.held.push(frame);
      return;
    }
    if (!this.greeted) {
      this.greeted = true;
      const turns = this.engine.handshakeTurns;
      if (turns !== undefined && !(typeof frame === 'string' && turns.atOnce(frame))) {
        this.waitTurn(turns.turns, frame);
        return;
      }
    }
    if (typeof frame !== 'string') {
      this.extendPingWait();
      this.emit('data', frame);
      return;
    }
    const type = frame.charAt(0);
    if (type !== PONG) this.extendPingWait();
    if (type === '' || !KNOWN_TYPES.includes(type)) {
      this.onClose('parse error');
      return;
    }
    switch (type) {
      case PONG:
        this.awaitingPong = false;
        this.due = this.engine.pingDue();
        return;
      case PING:
        // Over protocol 4 the server pings, never the client.
        this.onClose('transport error', new Error('invalid heartbeat direction'));
        return;
      case MESSAGE:
        this.emit('data', frame.slice(1));
        return;
      case BASE64:
        this.emit('data', Buffer.from(frame.slice(1), 'base64'));
        return;
      default:
        return;
    }
  }

  /**
   * The first frame waits for its turn of the event loop, and nothing more is read from the
   * client meanwhile (its socket paused; frames already read are held in order): the
   * handshake's work and what follows it are done a few connections a turn.
   */
  private waitTurn(turns: Turns, first: Frame): void {
    const held: Frame[] = [first];
    this.held = held;
    this.socket()?.pause();
    turns.run(() => {
      this.held = null;
      this.resumeReading();
      for (const frame of held) this.receive(frame);
    });
  }

  /** The WebSocket's TCP socket. */
  private socket(): Socket | undefined {
    return this.websocket.socket ?? undefined;
  }

  private resumeReading(): void {
    const socket = this.socket();
    if (socket !== undefined && !socket.destroyed) socket.resume();
  }

  /** The engine's sweep reached `due`: ping now, or close when the last ping had no pong in time. */
  onDue(): void {
    // Its first frame waits its turn, nothing read from it meanwhile: a pong it sent is unread, not missing.
    if (this.held !== null) {
      this.due = this.engine.pingDue();
      return;
    }
    if (this.awaitingPong) {
      this.onClose('ping timeout');
      return;
    }
    this.awaitingPong = true;
    this.extended = false;
    // Sent on a tick: the wait is whole ticks from now.
    this.due = this.engine.pongDue(0);
    this.send(PING);
  }

  onClose(reason: CloseReason, description?: Error): void {
    if (this.readyState === 'closed') return;
    this.readyState = 'closed';
    this.engine.forget(this);
    this.writeBuffer = [];
    this.callbacks = null;
    // Closed while its first frame waits its turn: its socket is read again, or the client's
    // answer to the closing frame would not be read before that turn (or the WebSocket's 30 s deadline).
    if (this.held !== null) this.resumeReading();
    // The WebSocket sends its closing frame. A closing one is not asked to close again: it
    // would end its TCP socket again, and Node makes (and drops) an error with a full stack for
    // each end after the first (a storm's thousands of closes a second spent about 1.4 % of the
    // service's CPU on them). It is only given its deadline when it has none (closing at the
    // client's end, without a close frame).
    if (this.websocket.readyState === WEBSOCKET_OPEN) this.websocket.close();
    else this.websocket.closeWithin();
    this.emit('close', reason, description);
  }

  on(event: string, listener: Listener): this {
    return this.listen(event, listener, false);
  }

  once(event: string, listener: Listener): this {
    return this.listen(event, listener, true);
  }

  removeListener(event: string, listener: Listener): this {
    const list = this.handlers;
    for (let i = 0; i < list.length; i += 3) {
      if (list[i] === event && list[i + 1] === listener) {
        this.handlers = list.slice(0, i).concat(list.slice(i + 3));
        break;
      }
    }
    return this;
  }

  off(event: string, listener: Listener): this {
    return this.removeListener(event, listener);
  }

  emit(event: string, ...args: unknown[]): boolean {
    const list = this.handlers;
    const called: Listener[] = [];
    let onceCalled = false;
    for (let i = 0; i < list.length; i += 3) {
      if (list[i] !== event) continue;
      called.push(list[i + 1] as Listener);
      if (list[i + 2] === true) onceCalled = true;
    }
    // A `once` listener is gone before it is called (as with an EventEmitter).
    if (onceCalled) this.handlers = list.filter((_, k) => !(list[k - (k % 3)] === event && list[k - (k % 3) + 2] === true));
    for (const listener of called) (listener as (...args: unknown[]) => void)(...args);
    return called.length > 0;
  }

  listeners(event: string): Listener[] {
    const found: Listener[] = [];
    for (let i = 0; i < this.handlers.length; i += 3) if (this.handlers[i] === event) found.push(this.handlers[i + 1] as Listener);
    return found;
  }

  listenerCount(event: string): number {
    return this.listeners(event).length;
  }

  private listen(event: string, listener: Listener, once: boolean): this {
    // A new array the size of its contents (a push would leave room for sixteen more).
    this.handlers = this.handlers.concat(event, listener, once);
    return this;
  }

  /** engine.io gives a ping's wait more time once when anything but the pong arrives meanwhile. */
  private extendPingWait(): void {
    if (!this.awaitingPong || this.extended) return;
    this.extended = true;
    // Between two ticks: one more, so that the wait is never shorter than `pingTimeout`.
    this.due = this.engine.pongDue(1);
  }

  /** Writes what waits, one batch at a time (one write): the next batch once the last is written. */
  private flush(): void {
    if (this.readyState === 'closed' || !this.writable || this.writeBuffer.length === 0) return;
    const frames = this.writeBuffer;
    const callbacks = this.callbacks;
    this.writeBuffer = [];
    this.callbacks = null;
    this.writable = false;
    this.websocket.sendAll(frames, (error) => this.written(error, callbacks));
  }

  private written(error: Error | null | undefined, callbacks: Array<() => void> | null): void {
    if (error !== undefined && error !== null) {
      this.onClose('transport error', error);
      return;
    }
    this.writable = true;
    if (callbacks !== null) for (const callback of callbacks) callback();
    this.flush();
    if (this.readyState === 'closing' && this.writable) this.closeTransport();
  }

  private closeTransport(): void {
    // onClose closes the WebSocket.
    this.onClose('forced close');
  }
}

/** A tick of the ping sweep is a second, or a quarter of the shorter ping wait when that is less. */
function tickMsFor(options: ServerOptions): number {
  const shorter = Math.min(options.pingInterval ?? 25_000, options.pingTimeout ?? 20_000);
  return Math.max(10, Math.min(1000, Math.floor(shorter / 4)));
}

/**
 * engine.io's server, giving connections that come straight over WebSocket (protocol 4) a
 * `WebSocketConnection`; everything else (HTTP long polling, its upgrade, protocol 3,
 * middlewares, CORS, the upgrade itself) is engine.io's own.
 */
export class TunnelEngine extends EngineServer {
  declare opts: ServerOptions & Required<Pick<ServerOptions, 'pingInterval' | 'pingTimeout' | 'maxHttpBufferSize'>>;
  private readonly connections = new Set<WebSocketConnection>();
  /** Ticks since the engine started; a connection's `due` is one of them (a small integer, kept unboxed). */
  private tick = 0;
  private sweep: NodeJS.Timeout | undefined;
  private readonly tickMs: number;
  /**
   * Clients' first frames (their handshakes) taken a few a turn of the event loop (the tunnel
   * sets it: src/runtime/turns.ts), but those `atOnce` says go first (an app's); unset: at once.
   */
  handshakeTurns: { readonly turns: Turns; readonly atOnce: (frame: string) => boolean } | undefined;
  /** WebSocket upgrades taken a few a turn when many come together (the tunnel gives turns of their own, not the first frames': an app's upgrade is not behind the hubs' handshakes); unset: at once. */
  upgradeTurns: Turns | undefined;

  constructor(options: ServerOptions) {
    super(options);
    this.tickMs = tickMsFor(this.opts);
  }

  /**
   * An upgrade (a WebSocket's HTTP request, parsed) waits its turn as first frames do: the
   * engine's work for it (its checks, the `101`, the connection and its open packet) is done a
   * few a turn of the event loop when many came together, so that requests read meanwhile (a
   * person's) are not behind all of them. The TCP socket is not read meanwhile; an error on it
   * destroys it, and one destroyed by then is let go.
   */
  override handleUpgrade(req: IncomingMessage, socket: Socket, head: Buffer): void {
    const turns = this.upgradeTurns;
    if (turns === undefined) {
      super.handleUpgrade(req as never, socket as never, head);
      return;
    }
    const onError = (): void => void socket.destroy();
    socket.on('error', onError);
    turns.run(() => {
      socket.removeListener('error', onError);
      if (socket.destroyed) return;
      super.handleUpgrade(req as never, socket as never, head);
    });
  }

  /** The tick a connection just heard from (or just opened) is pinged at: `pingInterval` on. */
  pingDue(): number {
    return this.tick + Math.ceil(this.opts.pingInterval / this.tickMs);
  }

  /** The tick a ping's pong is due by, `pingTimeout` on (`extra` ticks more when not counted from a tick). */
  pongDue(extra: 0 | 1): number {
    return this.tick + Math.ceil(this.opts.pingTimeout / this.tickMs) + extra;
  }

  /** Every connection's id, engine.io's and this engine's own (src/tunnel/connection-ids.ts). */
  override generateId(_request?: IncomingMessage): string {
    return connectionId();
  }

  forget(connection: WebSocketConnection): void {
    if (!this.connections.delete(connection)) return;
    delete this.clients[connection.id];
    this.clientsCount--;
  }

  override close(): this {
    clearInterval(this.sweep);
    this.sweep = undefined;
    return super.close();
  }

  protected override async handshake(
    transportName: 'polling' | 'websocket' | 'webtransport',
    req: UpgradedRequest,
    closeConnection: ErrorCallback,
  ): Promise<unknown> {
    const websocket = req.websocket;
    if (!(websocket instanceof OwnWebSocket) || !opensOwnConnection(req)) {
      // engine.io's own request type (not exported) is this one with its query parsed, as `_query` says.
      return super.handshake(transportName, req as never, closeConnection);
    }
    const id = await this.generateId(req);
    // Closed by the client while its id was made: nothing to open.
    if (websocket.readyState !== WEBSOCKET_OPEN) return undefined;
    const connection = new WebSocketConnection(id, this, websocket, req);
    this.connections.add(connection);
    this.clients[id] = connection as unknown as EngineSocket;
    this.clientsCount++;
    this.sweep ??= setInterval(() => this.ping(), this.tickMs).unref();
    this.emit('connection', connection);
    return undefined;
  }

  /** One sweep for every connection: ping those due, close those whose pong is overdue. */
  private ping(): void {
    const tick = ++this.tick;
    for (const connection of this.connections) if (connection.due <= tick) connection.onDue();
  }
}
