import { isUtf8 } from 'node:buffer';
import type { Socket } from 'node:net';
import type { WebSocketConnection } from './engine';

/**
 * The WebSocket under the tunnel's own connections (src/tunnel/engine.ts): RFC 6455 on the
 * server's side, without extensions, and nothing more than a `WebSocketConnection` uses.
 *
 * Why: `ws`'s WebSocket is three objects (the WebSocket, its Receiver, a Writable stream with a
 * state of its own, and its Sender), with listener tables, bound callbacks and chunk lists:
 * about 1.1 KB of an idle hub's heap. This is one object of a few fields, which hands each
 * message to its connection directly. `ws` still answers the upgrade (its checks of the
 * request, the `101`, the subprotocol), and still serves every other WebSocket (the upgrade
 * of a long-polling client); `TunnelWebSocketServer` (src/tunnel/websocket.ts) picks this one
 * for the connections the tunnel opens itself.
 *
 * It behaves as `ws` does for a server: a frame against the protocol closes the connection
 * with the status `ws` gives it (1002, 1007 for text that is not UTF-8, 1009 for a message
 * over `maxPayload`) and is reported to the connection as an error; a close frame is
 * answered with the same code, and the TCP connection ended; a ping is answered with a pong
 * (while one is not written yet, only the last ping since: RFC 6455 §5.5.3, so a client that
 * pings and reads nothing fills no queue); a closing connection is destroyed 30 s after its
 * close frame if the client never ends it. Unlike `ws`, a fragmented message is gathered in
 * one buffer, and messages read before the connection is made (written with the upgrade
 * request) wait for it instead of being handed to no one.
 */

/** Ready states, numbered as `ws` and browsers number them. */
export const OPEN = 1;
export const CLOSING = 2;
export const CLOSED = 3;
type ReadyState = 0 | typeof OPEN | typeof CLOSING | typeof CLOSED;
const STATE_NAMES = ['CONNECTING', 'OPEN', 'CLOSING', 'CLOSED'] as const;

/** How long a closing connection may take to end before it is destroyed (`ws`'s `closeTimeout`, and its default). */
export const CLOSE_TIMEOUT_MS = 30_000;

const TEXT = 0x1;
const BINARY = 0x2;
const CLOSE = 0x8;
const PING = 0x9;
const PONG = 0xa;

/** A frame's length field may not say more than 2^53 - 1: its upper 32 bits at most this. */
const HIGHEST_LENGTH_WORD = 2 ** 21 - 1;

const EMPTY = Buffer.alloc(0);

/** Messages kept for a connection not made yet before nothing more is read (a client sends one before the open packet, its `CONNECT`, if any). */
const MAX_EARLY_MESSAGES = 16;

/** Chunks of a frame not whole yet kept as they came before they are merged into one buffer. */
const MAX_PENDING_CHUNKS = 16;

/** Which socket each of these WebSockets reads (the listeners are shared: `this` is the socket). */
const OWNER = Symbol('own websocket');
type OwnedSocket = Socket & { [OWNER]?: OwnWebSocket };

/** A close status a client may send (`ws`'s rule: 1000–1014 but 1004–1006, and 3000–4999). */
export const isValidStatusCode = (code: number): boolean =>
  (code >= 1000 && code <= 1014 && code !== 1004 && code !== 1005 && code !== 1006) || (code >= 3000 && code <= 4999);

/** A frame the client sent against the protocol, with the status of the close frame that answers it. */
export class FrameError extends Error {
  constructor(
    message: string,
    readonly statusCode: number,
    prefixed: boolean,
  ) {
    super(prefixed ? `Invalid WebSocket frame: ${message}` : message);
  }
}

/** Sets `payload` free of its mask, in place (RFC 6455 §5.3). */
function unmask(payload: Buffer, mask: Buffer, maskAt: number): void {
  const m0 = mask[maskAt] as number;
  const m1 = mask[maskAt + 1] as number;
  const m2 = mask[maskAt + 2] as number;
  const m3 = mask[maskAt + 3] as number;
  if ((m0 | m1 | m2 | m3) === 0) return;
  const length = payload.length;
  let i = 0;
  for (; i + 3 < length; i += 4) {
    payload[i] = (payload[i] as number) ^ m0;
    payload[i + 1] = (payload[i + 1] as number) ^ m1;
    payload[i + 2] = (payload[i + 2] as number) ^ m2;
    payload[i + 3] = (payload[i + 3] as number) ^ m3;
  }
  for (; i < length; i++) payload[i] = (payload[i] as number) ^ (mask[maskAt + (i & 3)] as number);
}

/** One unmasked frame from the server: FIN set, `opcode`, `payload` (a string is written as UTF-8). */
function encodeFrame(opcode: number, payload: string | Buffer): Buffer {
  const length = typeof payload === 'string' ? Buffer.byteLength(payload) : payload.length;
  const header = length < 126 ? 2 : length < 65_536 ? 4 : 10;
  const frame = Buffer.allocUnsafe(header + length);
  frame[0] = 0x80 | opcode;
  if (header === 2) frame[1] = length;
  else if (header === 4) {
    frame[1] = 126;
    frame.writeUInt16BE(length, 2);
  } else {
    frame[1] = 127;
    frame.writeUInt32BE(Math.floor(length / 2 ** 32), 2);
    frame.writeUInt32BE(length % 2 ** 32, 6);
  }
  if (typeof payload === 'string') frame.write(payload, header);
  else payload.copy(frame, header);
  return frame;
}

/**
 * `ws`'s server constructs its WebSocket with `(null, undefined, options)`, sets `_protocol` when
 * the client asked for subprotocols, then calls `setSocket(socket, head, options)`.
 */
export class OwnWebSocket {
  readyState: ReadyState = 0;
  /** The tunnel's connection over this socket, once its handshake opened one (`connection`). */
  private heard: WebSocketConnection | undefined = undefined;
  /** The subprotocol `ws` chose for the upgrade (none for Socket.IO's clients). */
  _protocol = '';
  socket: Socket | null = null;
  private maxPayload = 0;
  /** Bytes read that do not make a whole frame yet, and how many a frame needs before it is looked at again. */
  private pending: Buffer[] | null = null;
  private pendingBytes = 0;
  /**
   * Once many small chunks wait (a client trickling a frame a byte a packet), they are copied into
   * one buffer with room to grow, `pending`'s last entry its start: a Buffer object kept for every
   * chunk (about 250 bytes of heap for a byte of payload) is not.
   */
  private spare: Buffer | null = null;
  private needed = 0;
  /**
   * A fragmented message's first opcode, its fragments so far copied into one buffer (with room
   * to grow) and their length (0, null, 0: none). One buffer, not one per fragment: a client
   * sending a message a byte a fragment would otherwise have a Buffer object (about 100 bytes
   * of heap) made for every 7 bytes it sends.
   */
  private fragmentedOpcode = 0;
  private fragments: Buffer | null = null;
  private messageBytes = 0;
  /**
   * The pong being written (RFC 6455 §5.5.3: while one has not gone out, only the last ping
   * since is answered): undefined, none; null, one is written and no ping waits; a Buffer, the
   * payload of the last ping since. A client that pings and never reads keeps two pongs here,
   * not one for each of its pings.
   */
  private pong: Buffer | null | undefined = undefined;
  private closeFrameSent = false;
  private closeFrameReceived = false;
  /** A frame against the protocol was read: nothing more is. */
  private failed = false;
  private closeTimer: NodeJS.Timeout | null = null;
  private readonly closeTimeoutMs: number;

  /** `ws`'s server's options: `closeTimeout` (not in its types) as `ws` reads it. */
  constructor(_address?: null, _protocols?: undefined, options?: { closeTimeout?: number }) {
    this.closeTimeoutMs = options?.closeTimeout ?? CLOSE_TIMEOUT_MS;
  }

  /**
   * Messages read before a connection hears them (null: none). The connection is made once its
   * id is (a microtask after the `101`), but what came with the upgrade request (a client's
   * `CONNECT` written with it) is read on the next tick, before: such messages wait here, and
   * past `MAX_EARLY_MESSAGES` nothing more is parsed or read until the connection is there.
   */
  private early: Array<string | Buffer> | null = null;

  /** The tunnel's connection over this socket: it hears every message (those that came before it first) and the close. */
  get connection(): WebSocketConnection | undefined {
    return this.heard;
  }

  set connection(connection: WebSocketConnection | undefined) {
    this.heard = connection;
    const early = this.early;
    if (connection === undefined || early === null) return;
    this.early = null;
    // Once its handshake is done with it (the open packet sent, Socket.IO listening): after the code that set it.
    queueMicrotask(() => {
      const socket = this.socket;
      if (early.length >= MAX_EARLY_MESSAGES && socket !== null && !socket.destroyed && !this.failed && !this.closeFrameReceived) socket.resume();
      for (const message of early) this.heard?.receive(message);
      // What was read after them, and not parsed yet.
      if (this.pending !== null) this.read(EMPTY);
    });
  }

  /** The TCP connection after the `101`: read from now on, `head` (what came with the upgrade request) first. */
  setSocket(socket: Socket, head: Buffer, options: { maxPayload?: number }): void {
    this.socket = socket;
    this.maxPayload = options.maxPayload ?? 0;
    (socket as OwnedSocket)[OWNER] = this;
    socket.setTimeout(0);
    socket.setNoDelay();
    if (head.length > 0) socket.unshift(head);
    socket.on('close', onSocketClose);
    socket.on('data', onSocketData);
    socket.on('end', onSocketEnd);
    socket.on('error', onSocketError);
    this.readyState = OPEN;
  }

  /**
   * engine.io listens for an `error` before a transport takes the socket over; the connection
   * hears every error of this one directly, and an error of the TCP connection closes it.
   */
  on(_event: string, _listener: (...args: never[]) => void): this {
    return this;
  }

  /** `frame` as one message (a string as text, a Buffer as binary); `callback` once written, or with the error that stopped it. */
  send(frame: string | Buffer, callback?: (error?: Error | null) => void): void {
    const socket = this.socket;
    if (this.readyState !== OPEN || socket === null) {
      if (callback !== undefined) process.nextTick(callback, new Error(`WebSocket is not open: readyState ${this.readyState} (${STATE_NAMES[this.readyState]})`));
      return;
    }
    socket.write(encodeFrame(typeof frame === 'string' ? TEXT : BINARY, frame), callback);
  }

  /** Several messages in one write (one system call): `callback` once the last is written. */
  sendAll(frames: ReadonlyArray<string | Buffer>, callback: (error?: Error | null) => void): void {
    const socket = this.socket;
    const corked = frames.length > 1 && this.readyState === OPEN && socket !== null;
    if (corked) socket.cork();
    const last = frames.length - 1;
    for (let i = 0; i <= last; i++) this.send(frames[i] as string | Buffer, i === last ? callback : undefined);
    if (corked) socket.uncork();
  }

  /**
   * The closing handshake: a close frame (with `code`, and `reason` when given), then the TCP
   * connection ended once the client's close frame has come (or its frames were refused);
   * destroyed if it has not closed `CLOSE_TIMEOUT_MS` later.
   */
  close(code?: number, reason?: Buffer): void {
    const socket = this.socket;
    if (this.readyState === CLOSED || socket === null) return;
    if (this.readyState === CLOSING) {
      if (this.closeFrameSent && (this.closeFrameReceived || this.failed)) socket.end();
      return;
    }
    this.readyState = CLOSING;
    let payload = EMPTY;
    if (code !== undefined) {
      payload = Buffer.allocUnsafe(2 + (reason?.length ?? 0));
      payload.writeUInt16BE(code, 0);
      reason?.copy(payload, 2);
    }
    socket.write(encodeFrame(CLOSE, payload), (error) => {
      if (error !== undefined && error !== null) return;
      this.closeFrameSent = true;
      if (this.closeFrameReceived || this.failed) socket.end();
    });
    this.closeWithin();
  }

  /**
   * A deadline for a closing socket that has none: a close sets one, but a client's end (a FIN
   * without a close frame) makes it closing without: it ends its side and waits for what it
   * wrote to reach the client, which, reading nothing, may never let it.
   */
  closeWithin(): void {
    const socket = this.socket;
    if (this.readyState !== CLOSING || this.closeTimer !== null || socket === null || socket.destroyed) return;
    this.closeTimer = setTimeout(() => socket.destroy(), this.closeTimeoutMs);
  }

  /** Bytes from the client: every whole frame in them, in order; the rest waits for more. */
  read(chunk: Buffer): void {
    if (this.closeFrameReceived || this.failed) return;
    let data = chunk;
    if (this.pending !== null) {
      this.pendingBytes += chunk.length;
      if (this.pendingBytes < this.needed) {
        this.keep(this.pending, chunk);
        return;
      }
      this.pending.push(chunk);
      data = Buffer.concat(this.pending, this.pendingBytes);
      this.pending = null;
      this.spare = null;
      this.pendingBytes = 0;
    }
    let offset = 0;
    while (offset < data.length && !this.closeFrameReceived && !this.failed) {
      if (this.early !== null && this.early.length >= MAX_EARLY_MESSAGES) {
        // Enough kept for a connection not made yet: the rest waits too, as bytes, read once it is.
        this.needed = 0;
        break;
      }
      const used = this.frame(data, offset);
      if (used === 0) break;
      offset += used;
    }
    if (offset >= data.length || this.closeFrameReceived || this.failed) return;
    // Part of a frame: kept on its own (a small rest is copied, so that the whole chunk is not kept for it).
    const rest = data.length - offset > data.length / 2 ? data.subarray(offset) : Buffer.from(data.subarray(offset));
    this.pending = [rest];
    this.spare = null;
    this.pendingBytes = rest.length;
  }

  /** A chunk after `pending` (`pendingBytes` counts it already), in the spare room when it fits, the chunks merged into one when they are many. */
  private keep(pending: Buffer[], chunk: Buffer): void {
    const spare = this.spare;
    // The spare room's start is the only entry until a chunk did not fit in it.
    const used = pending.length === 1 ? (pending[0] as Buffer).length : -1;
    if (spare !== null && used >= 0 && used + chunk.length <= spare.length) {
      chunk.copy(spare, used);
      pending[0] = spare.subarray(0, used + chunk.length);
      return;
    }
    pending.push(chunk);
    if (pending.length < MAX_PENDING_CHUNKS) return;
    // Room doubling, never past what the frame needs: copying stays linear in what came.
    const merged = Buffer.allocUnsafe(Math.max(this.pendingBytes, Math.min(this.needed, 2 * this.pendingBytes)));
    let at = 0;
    for (const part of pending) at += part.copy(merged, at);
    this.pending = [merged.subarray(0, at)];
    this.spare = merged;
  }

  /** The frame at `offset`: the bytes it took, or 0 when it is not whole yet (`needed` says how many it takes). */
  private frame(data: Buffer, offset: number): number {
    const available = data.length - offset;
    if (available < 2) return this.need(2);
    const first = data[offset] as number;
    const second = data[offset + 1] as number;
    const fin = (first & 0x80) !== 0;
    const opcode = first & 0x0f;
    let length = second & 0x7f;
    if ((first & 0x30) !== 0) return this.fail('RSV2 and RSV3 must be clear', 1002);
    if ((first & 0x40) !== 0) return this.fail('RSV1 must be clear', 1002);
    if (opcode === 0) {
      if (this.fragmentedOpcode === 0) return this.fail('invalid opcode 0', 1002);
    } else if (opcode === TEXT || opcode === BINARY) {
      if (this.fragmentedOpcode !== 0) return this.fail(`invalid opcode ${opcode}`, 1002);
    } else if (opcode === CLOSE || opcode === PING || opcode === PONG) {
      if (!fin) return this.fail('FIN must be set', 1002);
      if (length > 125 || (opcode === CLOSE && length === 1)) return this.fail(`invalid payload length ${length}`, 1002);
    } else return this.fail(`invalid opcode ${opcode}`, 1002);
    if ((second & 0x80) === 0) return this.fail('MASK must be set', 1002);
    let header = 2;
    if (length === 126) {
      if (available < 4) return this.need(4);
      length = data.readUInt16BE(offset + 2);
      header = 4;
    } else if (length === 127) {
      if (available < 10) return this.need(10);
      const high = data.readUInt32BE(offset + 2);
      if (high > HIGHEST_LENGTH_WORD) return this.fail('Unsupported WebSocket frame: payload length > 2^53 - 1', 1009, false);
      length = high * 2 ** 32 + data.readUInt32BE(offset + 6);
      header = 10;
    }
    if (opcode < CLOSE && length > 0 && this.maxPayload > 0 && this.messageBytes + length > this.maxPayload) {
      return this.fail('Max payload size exceeded', 1009, false);
    }
    const maskAt = offset + header;
    header += 4;
    if (available < header + length) return this.need(header + length);
    const payload = data.subarray(offset + header, offset + header + length);
    unmask(payload, data, maskAt);
    if (opcode >= CLOSE) this.control(opcode, payload);
    else this.data(opcode, fin, payload);
    return header + length;
  }

  /** Not whole yet: `bytes` from the frame's start are needed before it is looked at again. */
  private need(bytes: number): 0 {
    this.needed = bytes;
    return 0;
  }

  private data(opcode: number, fin: boolean, payload: Buffer): void {
    if (!fin) {
      if (this.fragmentedOpcode === 0) this.fragmentedOpcode = opcode;
      if (payload.length > 0) this.gather(payload);
      return;
    }
    const type = opcode === 0 ? this.fragmentedOpcode : opcode;
    let message = payload;
    if (this.fragments !== null) {
      const gathered = this.fragments.subarray(0, this.messageBytes);
      message = payload.length === 0 ? gathered : Buffer.concat([gathered, payload], this.messageBytes + payload.length);
    }
    this.fragmentedOpcode = 0;
    this.fragments = null;
    this.messageBytes = 0;
    if (type !== BINARY && !isUtf8(message)) {
      this.fail('invalid UTF-8 sequence', 1007);
      return;
    }
    this.hand(type === BINARY ? message : message.toString());
  }

  /** A whole message to the connection, or kept for it until it is there. */
  private hand(message: string | Buffer): void {
    if (this.heard !== undefined) {
      this.heard.receive(message);
      return;
    }
    const early = (this.early ??= []);
    // A binary message read before its connection is copied (it is a view into the chunk it came in).
    early.push(typeof message === 'string' ? message : Buffer.from(message));
    if (early.length >= MAX_EARLY_MESSAGES) this.socket?.pause();
  }

  /** A fragment's payload after those before it, in a buffer that doubles as it fills (never past `maxPayload`, which the message cannot pass). */
  private gather(payload: Buffer): void {
    const bytes = this.messageBytes + payload.length;
    let fragments = this.fragments;
    if (fragments === null || fragments.length < bytes) {
      let room = Math.max(bytes, 2 * (fragments?.length ?? 0), 256);
      if (this.maxPayload > 0) room = Math.max(bytes, Math.min(room, this.maxPayload));
      const grown = Buffer.allocUnsafe(room);
      if (fragments !== null) fragments.copy(grown, 0, 0, this.messageBytes);
      fragments = grown;
      this.fragments = grown;
    }
    payload.copy(fragments, this.messageBytes);
    this.messageBytes = bytes;
  }

  private control(opcode: number, payload: Buffer): void {
    if (opcode === PING) {
      if (this.readyState !== OPEN) return;
      if (this.pong !== undefined) this.pong = Buffer.from(payload);
      else this.writePong(Buffer.from(payload));
      return;
    }
    if (opcode === PONG) return;
    let code: number | undefined;
    let reason: Buffer | undefined;
    if (payload.length >= 2) {
      code = payload.readUInt16BE(0);
      if (!isValidStatusCode(code)) {
        this.fail(`invalid status code ${code}`, 1002);
        return;
      }
      reason = Buffer.from(payload.subarray(2));
      if (!isUtf8(reason)) {
        this.fail('invalid UTF-8 sequence', 1007);
        return;
      }
    }
    this.closeFrameReceived = true;
    this.pending = null;
    this.spare = null;
    // Read on to the client's end (nothing more is parsed), which ends the connection.
    const socket = this.socket;
    if (socket !== null) process.nextTick(() => socket.resume());
    this.close(code, reason);
  }

  /** A pong, and once it is written, one for the last ping that came meanwhile. */
  private writePong(payload: Buffer): void {
    const socket = this.socket;
    if (socket === null || this.readyState !== OPEN) {
      this.pong = undefined;
      return;
    }
    this.pong = null;
    socket.write(encodeFrame(PONG, payload), (error) => {
      const next = this.pong;
      this.pong = undefined;
      if ((error === undefined || error === null) && next !== null && next !== undefined) this.writePong(next);
    });
  }

  /**
   * A frame against the protocol: nothing more is read from the client (its bytes are read and
   * dropped until it ends), a close frame with `statusCode`, and the connection hears an error.
   */
  private fail(message: string, statusCode: number, prefixed = true): 0 {
    this.failed = true;
    this.pending = null;
    this.spare = null;
    this.fragments = null;
    const socket = this.socket;
    if (socket !== null) process.nextTick(() => socket.resume());
    this.close(statusCode);
    this.heard?.onClose('transport error', new FrameError(message, statusCode, prefixed));
    return 0;
  }

  /** The TCP connection closed: what it had read and not handed over yet first (a paused socket keeps it), then the connection hears it. */
  closed(socket: Socket): void {
    this.readyState = CLOSING;
    if (!this.closeFrameReceived && !this.failed && socket.readableLength > 0) {
      const rest = socket.read() as Buffer | null;
      if (rest !== null) this.read(rest);
    }
    if (this.closeTimer !== null) clearTimeout(this.closeTimer);
    this.closeTimer = null;
    this.readyState = CLOSED;
    this.pending = null;
    this.spare = null;
    this.fragments = null;
    this.early = null;
    this.heard?.onClose('transport close');
  }

  /** The client ended its side: so does the server, unless it has already (after the closing handshake: an end after the first makes Node build an error with a stack). */
  ended(socket: Socket): void {
    if (this.readyState !== CLOSED) this.readyState = CLOSING;
    if (!socket.writableEnded) socket.end();
  }
}

// The TCP connection's listeners, one of each for every socket: `this` is the socket, which knows its WebSocket.
function onSocketData(this: OwnedSocket, chunk: Buffer): void {
  this[OWNER]?.read(chunk);
}

function onSocketClose(this: OwnedSocket): void {
  this[OWNER]?.closed(this);
}

function onSocketEnd(this: OwnedSocket): void {
  this[OWNER]?.ended(this);
}

function onSocketError(this: OwnedSocket): void {
  const websocket = this[OWNER];
  if (websocket === undefined) return;
  if (websocket.readyState !== CLOSED) websocket.readyState = CLOSING;
  this.destroy();
}
