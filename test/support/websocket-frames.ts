import { once } from 'node:events';
import { createServer, type Server, type Socket } from 'node:net';

/**
 * WebSocket frames as a client writes them, by hand, so that a test can break every rule of
 * RFC 6455 once; and a TCP listener whose accepted sockets a test turns into a server side.
 */

export interface FrameOptions {
  /** `false`: the MASK bit clear (against the protocol for a client). */
  readonly masked?: boolean;
  /** The mask (a fixed one unless given). */
  readonly mask?: readonly number[];
  /** The length field (the shortest that fits unless given). */
  readonly lengthField?: 'short' | '16' | '64';
}

/** A client's frame: FIN and opcode in `first`, masked unless `masked: false`. */
export function clientFrame(first: number, payload: Buffer | string, options: FrameOptions = {}): Buffer {
  const body = Buffer.from(payload);
  const masked = options.masked ?? true;
  const mask = Buffer.from(options.mask ?? [0x12, 0x34, 0x56, 0x78]);
  const field = options.lengthField ?? (body.length < 126 ? 'short' : body.length < 65_536 ? '16' : '64');
  const head: number[] = [first];
  const maskBit = masked ? 0x80 : 0;
  if (field === 'short') head.push(maskBit | body.length);
  else if (field === '16') head.push(maskBit | 126, body.length >> 8, body.length & 0xff);
  else {
    const long = Buffer.alloc(8);
    long.writeBigUInt64BE(BigInt(body.length));
    head.push(maskBit | 127, ...long);
  }
  const wire = Buffer.from(body);
  if (masked) for (let i = 0; i < wire.length; i++) wire[i] = (wire[i] as number) ^ (mask[i % 4] as number);
  return Buffer.concat([Buffer.from(head), masked ? mask : Buffer.alloc(0), wire]);
}

export const textFrame = (payload: string | Buffer, fin = true): Buffer => clientFrame((fin ? 0x80 : 0) | 0x1, payload);
export const binaryFrame = (payload: Buffer, fin = true): Buffer => clientFrame((fin ? 0x80 : 0) | 0x2, payload);
export const continuationFrame = (payload: string | Buffer, fin: boolean): Buffer => clientFrame((fin ? 0x80 : 0) | 0x0, payload);

/** A close frame: empty without `code`, else the code and `reason`. */
export function closeFrame(code?: number, reason = ''): Buffer {
  if (code === undefined) return clientFrame(0x88, Buffer.alloc(0));
  const payload = Buffer.alloc(2 + Buffer.byteLength(reason));
  payload.writeUInt16BE(code, 0);
  payload.write(reason, 2);
  return clientFrame(0x88, payload);
}

/**
 * A TCP listener on 127.0.0.1 for the test file (half-open allowed, as an HTTP server's): every
 * accepted socket in `accepted`, destroyed after each test.
 */
export function acceptingListener(): { readonly accepted: Socket[]; port(): number } {
  let listener: Server;
  const accepted: Socket[] = [];
  beforeAll(async () => {
    listener = createServer({ allowHalfOpen: true }, (socket) => accepted.push(socket));
    listener.listen(0, '127.0.0.1');
    await once(listener, 'listening');
  });
  afterAll(async () => {
    listener.close();
    await once(listener, 'close');
  });
  afterEach(() => {
    for (const socket of accepted.splice(0)) socket.destroy();
  });
  return {
    accepted,
    port() {
      const address = listener.address();
      if (address === null || typeof address === 'string') throw new Error('no port');
      return address.port;
    },
  };
}
