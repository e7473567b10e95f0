import { connect, type Socket } from 'node:net';
import { once } from 'node:events';
import { WebSocket } from 'ws';
import type { WebSocketConnection } from '../../src/tunnel/engine';
import { CLOSED, OwnWebSocket } from '../../src/tunnel/own-websocket';
import { acceptingListener, binaryFrame as binary, clientFrame as frame, closeFrame as close, continuationFrame as continuation, textFrame as text } from '../support/websocket-frames';

/**
 * The tunnel's own WebSocket (src/tunnel/own-websocket.ts), frame by frame over real TCP, side
 * by side with `ws`'s server-side WebSocket made the way `ws`'s server makes it (`setSocket`
 * on the accepted connection): the same bytes from a client, the same messages heard and the
 * same close status sent back. Frames are written by hand, so that every rule of RFC 6455 a
 * client can break is broken once.
 */

const MAX_PAYLOAD = 1000;

interface Heard {
  /** Messages handed over: text as strings, binary as `bin:<hex>`. */
  readonly messages: string[];
  /** What the connection heard as its close or error, in order. */
  readonly closes: string[];
}

/** What the client read back: the server's frames (opcode, payload) and whether the server ended the TCP connection. */
interface Answer {
  readonly frames: Array<{ opcode: number; payload: Buffer }>;
  ended: boolean;
}

type Side = 'own' | 'ws';

const { accepted, port } = acceptingListener();

async function until(what: string, read: () => boolean, timeoutMs = 3000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!read()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** Reads the server's (unmasked) frames off the client's socket. */
function answerOf(client: Socket): Answer {
  const answer: Answer = { frames: [], ended: false };
  let bytes = Buffer.alloc(0);
  client.on('data', (chunk: Buffer) => {
    bytes = Buffer.concat([bytes, chunk]);
    for (;;) {
      if (bytes.length < 2) return;
      let length = (bytes[1] as number) & 0x7f;
      let header = 2;
      if (length === 126) {
        if (bytes.length < 4) return;
        length = bytes.readUInt16BE(2);
        header = 4;
      } else if (length === 127) {
        if (bytes.length < 10) return;
        length = Number(bytes.readBigUInt64BE(2));
        header = 10;
      }
      if (bytes.length < header + length) return;
      answer.frames.push({ opcode: (bytes[0] as number) & 0x0f, payload: bytes.subarray(header, header + length) });
      bytes = bytes.subarray(header + length);
    }
  });
  client.on('end', () => {
    answer.ended = true;
  });
  return answer;
}

/** A server side of `side` over a fresh TCP connection, and the client's end of it. */
async function pair(side: Side): Promise<{ client: Socket; heard: Heard; answer: Answer; server: OwnWebSocket | WebSocket; serverTcp: Socket }> {
  const count = accepted.length;
  const client = connect(port(), '127.0.0.1');
  client.on('error', () => undefined);
  await once(client, 'connect');
  await until('accepted', () => accepted.length > count);
  const serverTcp = accepted[count] as Socket;
  const heard: Heard = { messages: [], closes: [] };
  const text = (data: string | Buffer): string => (typeof data === 'string' ? data : `bin:${data.toString('hex')}`);
  let server: OwnWebSocket | WebSocket;
  if (side === 'own') {
    const own = new OwnWebSocket(null, undefined, { closeTimeout: 300 });
    own.setSocket(serverTcp, Buffer.alloc(0), { maxPayload: MAX_PAYLOAD });
    own.connection = {
      receive: (frame: string | Buffer) => void heard.messages.push(text(frame)),
      onClose: (reason: string) => void heard.closes.push(reason),
    } as unknown as WebSocketConnection;
    server = own;
  } else {
    // As `ws`'s server makes its WebSocket for an accepted upgrade.
    const ws = new (WebSocket as unknown as new (...args: unknown[]) => WebSocket & { setSocket(...args: unknown[]): void })(null, undefined, { closeTimeout: 300, autoPong: true });
    ws.setSocket(serverTcp, Buffer.alloc(0), { maxPayload: MAX_PAYLOAD, allowSynchronousEvents: true });
    ws.on('message', (data: Buffer, isBinary: boolean) => heard.messages.push(isBinary ? text(data) : data.toString()));
    ws.on('error', () => heard.closes.push('transport error'));
    ws.on('close', () => heard.closes.push('transport close'));
    server = ws;
  }
  return { client, heard, answer: answerOf(client), server, serverTcp };
}

/** The status of the server's close frame (1005: none given; undefined: no close frame). */
const closeStatus = (answer: Answer): number | undefined => {
  const closing = answer.frames.find((f) => f.opcode === 0x8);
  if (closing === undefined) return undefined;
  return closing.payload.length >= 2 ? closing.payload.readUInt16BE(0) : 1005;
};

/** Writes `bytes` (one write, or one byte at a time), waits for the server's answer to settle, and says what each side saw. */
async function run(side: Side, bytes: Buffer, options: { byteByByte?: boolean; expectClose?: boolean } = {}): Promise<{ heard: Heard; answer: Answer; status: number | undefined }> {
  const { client, heard, answer } = await pair(side);
  if (options.byteByByte === true) {
    for (const byte of bytes) {
      client.write(Buffer.from([byte]));
      await new Promise((resolve) => setImmediate(resolve));
    }
  } else client.write(bytes);
  if (options.expectClose === true) await until('the close frame', () => closeStatus(answer) !== undefined);
  else await new Promise((resolve) => setTimeout(resolve, 30));
  client.destroy();
  return { heard, answer, status: closeStatus(answer) };
}

describe('what a client sends, heard as ws hears it', () => {
  test.each<[string, Buffer]>([
    ['one text frame', text('42["hello"]')],
    ['text in UTF-8 of several bytes a character', text('é ✓ 🙂')],
    ['several frames in one chunk', Buffer.concat([text('a'), text('b'), binary(Buffer.from([1, 2, 3])), text('c')])],
    ['a fragmented text message with a ping and a pong between its fragments', Buffer.concat([text('fra', false), frame(0x89, 'p'), continuation('gme', false), frame(0x8a, ''), continuation('nted', true), text('after')])],
    ['a 16-bit length', text('x'.repeat(300))],
    ['a 64-bit length for a short payload', frame(0x81, 'y'.repeat(130), { lengthField: '64' })],
    ['a zero mask', frame(0x81, 'plain', { mask: [0, 0, 0, 0] })],
    ['an empty text frame and an empty binary frame', Buffer.concat([text(''), binary(Buffer.alloc(0))])],
    ['a message exactly at the largest payload, in fragments', Buffer.concat([text('x'.repeat(600), false), continuation('y'.repeat(400), true)])],
  ])('%s', async (_what, bytes) => {
    const own = await run('own', bytes);
    const ws = await run('ws', bytes);
    expect(own.heard.messages).toEqual(ws.heard.messages);
    expect(own.heard.messages.length).toBeGreaterThan(0);
    expect(own.status).toBeUndefined();
  });

  test('a message whose frames come one byte at a time', async () => {
    const bytes = Buffer.concat([text('hello'), text('z'.repeat(200), false), continuation('!', true)]);
    const own = await run('own', bytes, { byteByByte: true });
    const ws = await run('ws', bytes, { byteByByte: true });
    expect(own.heard.messages).toEqual(['hello', `${'z'.repeat(200)}!`]);
    expect(own.heard.messages).toEqual(ws.heard.messages);
  });

  test('a ping is answered with a pong of the same payload', async () => {
    const own = await run('own', frame(0x89, 'are you there'));
    const ws = await run('ws', frame(0x89, 'are you there'));
    expect(own.answer.frames.map((f) => [f.opcode, f.payload.toString()])).toEqual([[0xa, 'are you there']]);
    expect(own.answer.frames.map((f) => [f.opcode, f.payload.toString()])).toEqual(ws.answer.frames.map((f) => [f.opcode, f.payload.toString()]));
  });
});

describe('frames against the protocol: the close status ws sends, nothing heard after, the connection told once', () => {
  test.each<[string, Buffer, number]>([
    ['an unmasked frame', frame(0x81, 'hi', { masked: false }), 1002],
    ['RSV1 set (no extension was agreed)', frame(0xc1, 'hi'), 1002],
    ['RSV2 set', frame(0xa1, 'hi'), 1002],
    ['an unknown data opcode', frame(0x83, 'hi'), 1002],
    ['an unknown control opcode', frame(0x8b, 'hi'), 1002],
    ['a continuation with nothing to continue', continuation('x', true), 1002],
    ['a new message before the fragmented one ends', Buffer.concat([text('a', false), text('b')]), 1002],
    ['a fragmented ping', frame(0x09, 'p'), 1002],
    ['a ping of 126 bytes', frame(0x89, 'p'.repeat(126)), 1002],
    ['a close frame of one byte', frame(0x88, Buffer.from([3])), 1002],
    ['a close frame with a status no client may send (1005)', close(1005), 1002],
    ['a close frame with a status out of range (999)', close(999), 1002],
    ['text that is not UTF-8', frame(0x81, Buffer.from([0x41, 0xc3, 0x28])), 1007],
    ['text that is not UTF-8 across fragments (a character cut in two is fine, a bad one is not)', Buffer.concat([frame(0x01, Buffer.from([0xc3])), frame(0x80, Buffer.from([0x28]))]), 1007],
    ['a close reason that is not UTF-8', frame(0x88, Buffer.from([0x03, 0xe8, 0xff])), 1007],
    ['a message over the largest payload', text('x'.repeat(MAX_PAYLOAD + 1)), 1009],
    ['fragments that add up to more than the largest payload', Buffer.concat([text('x'.repeat(600), false), continuation('y'.repeat(401), true)]), 1009],
    ['a 64-bit length over 2^53 - 1', Buffer.from([0x81, 0xff, 0x00, 0x20, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4]), 1009],
  ])('%s: status %d', async (_what, bytes, status) => {
    const after = text('42["not heard"]');
    const own = await run('own', Buffer.concat([bytes, after]), { expectClose: true });
    const ws = await run('ws', Buffer.concat([bytes, after]), { expectClose: true });
    expect(own.status).toBe(status);
    expect(ws.status).toBe(status);
    expect(own.heard.messages).toEqual(ws.heard.messages);
    expect(own.heard.messages).not.toContain('42["not heard"]');
    // The connection is told of the error first (its close after that is nothing to it).
    expect(own.heard.closes[0]).toBe('transport error');
    expect(ws.heard.closes[0]).toBe('transport error');
  });

  test('the header of an oversized message is enough: it is refused before its payload arrives', async () => {
    const { client, heard, answer } = await pair('own');
    // The header says 2,000 bytes; not one of them is sent.
    client.write(Buffer.from([0x81, 0xfe, 0x07, 0xd0, 1, 2, 3, 4]));
    await until('the close frame', () => closeStatus(answer) !== undefined);
    expect(closeStatus(answer)).toBe(1009);
    expect(heard.closes[0]).toBe('transport error');
    client.destroy();
  });
});

describe('the closing handshake', () => {
  test('a close frame is answered with its own status and reason, the TCP side ended, then the connection hears a transport close', async () => {
    const { client, heard, answer, server } = await pair('own');
    client.write(close(4001, 'going away'));
    await until('the answer', () => answer.ended);
    expect(answer.frames.map((f) => [f.opcode, f.payload.readUInt16BE(0), f.payload.subarray(2).toString()])).toEqual([[0x8, 4001, 'going away']]);
    client.end();
    await until('closed', () => server.readyState === CLOSED);
    expect(heard.closes).toEqual(['transport close']);
  });

  test('an empty close frame is answered with an empty one', async () => {
    const { client, answer } = await pair('own');
    client.write(close());
    await until('the answer', () => answer.ended);
    expect(answer.frames.map((f) => [f.opcode, f.payload.length])).toEqual([[0x8, 0]]);
    client.destroy();
  });

  test('after the service closes, the client\'s messages until its close frame are not handed over, and its close frame ends it', async () => {
    const { client, heard, answer, server } = await pair('own');
    const own = server as OwnWebSocket;
    own.close();
    await until('the service\'s close frame', () => closeStatus(answer) === 1005);
    client.write(Buffer.concat([text('late'), close(1000)]));
    await until('the TCP side ended', () => answer.ended);
    client.end();
    await until('closed', () => own.readyState === CLOSED);
    // A message after a close is the connection's affair (it ignores what comes once it closes): handed over as ws does.
    expect(heard.messages).toEqual(['late']);
    expect(heard.closes).toEqual(['transport close']);
  });

  test('a client that never ends after the closing handshake is destroyed at the close timeout', async () => {
    const { client, answer, server, serverTcp } = await pair('own');
    (server as OwnWebSocket).close(1000);
    await until('the service\'s close frame', () => closeStatus(answer) === 1000);
    // The client neither answers nor ends.
    await until('destroyed', () => serverTcp.destroyed, 2000);
    // Its close is heard a tick after the destroy.
    await until('closed', () => (server as OwnWebSocket).readyState === CLOSED);
    client.destroy();
  });

  test('sending on a closed WebSocket calls back with an error, never throws', async () => {
    const { client, server } = await pair('own');
    const own = server as OwnWebSocket;
    client.destroy();
    await until('closed', () => own.readyState === CLOSED);
    const error = await new Promise<Error | null | undefined>((resolve) => own.send('42["x"]', resolve));
    expect(error?.message).toMatch(/not open: readyState 3 \(CLOSED\)/);
  });

  test('frames the client wrote before its socket closed are handed over at the close, even while reading was paused', async () => {
    const { client, heard, server, serverTcp } = await pair('own');
    serverTcp.pause();
    client.end(Buffer.concat([text('one'), text('two')]));
    await new Promise((resolve) => setTimeout(resolve, 30));
    expect(heard.messages).toEqual([]);
    serverTcp.destroy();
    await until('closed', () => (server as OwnWebSocket).readyState === CLOSED);
    expect(heard.messages).toEqual(['one', 'two']);
    expect(heard.closes).toEqual(['transport close']);
  });
});

describe('what the service sends', () => {
  test.each([
    ['a short text', 'hello'],
    ['text of 200 bytes (16-bit length)', 'é'.repeat(100)],
    ['text of 70,000 bytes (64-bit length)', 'x'.repeat(70_000)],
  ])('%s, as one unmasked frame', async (_what, payload) => {
    const { client, answer, server } = await pair('own');
    const written = new Promise<Error | null | undefined>((resolve) => (server as OwnWebSocket).send(payload, resolve));
    await expect(written).resolves.toBeFalsy();
    await until('the frame', () => answer.frames.length === 1);
    expect(answer.frames[0]?.opcode).toBe(0x1);
    expect(answer.frames[0]?.payload.toString()).toBe(payload);
    client.destroy();
  });

  test('several messages in one write, in order, the callback once the last is written', async () => {
    const { client, answer, server, serverTcp } = await pair('own');
    const writes: number[] = [];
    const write = serverTcp.write.bind(serverTcp);
    const writev = (serverTcp as unknown as { _writev: (...args: unknown[]) => unknown })._writev.bind(serverTcp);
    (serverTcp as unknown as { _writev: (...args: unknown[]) => unknown })._writev = (...args: unknown[]) => {
      writes.push((args[0] as unknown[]).length);
      return writev(...args);
    };
    serverTcp.write = write;
    const done = new Promise<Error | null | undefined>((resolve) => (server as OwnWebSocket).sendAll(['a', Buffer.from([7]), 'c'], resolve));
    await expect(done).resolves.toBeFalsy();
    await until('three frames', () => answer.frames.length === 3);
    expect(answer.frames.map((f) => [f.opcode, f.payload.toString('hex')])).toEqual([
      [0x1, '61'],
      [0x2, '07'],
      [0x1, '63'],
    ]);
    // Corked: the three frames went to the kernel together.
    expect(writes).toEqual([3]);
    client.destroy();
  });
});
