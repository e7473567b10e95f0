import { connect, type Socket } from 'node:net';

/**
 * HTTP spoken by hand over TCP, for tests that hold connections open, press a service to its
 * limits or read exactly what it writes (src/runtime/descriptor-headroom.ts).
 */

export const HEALTH_REQUEST = 'GET /api/v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n';
export const UPGRADE_REQUEST =
  'GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n' +
  'Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n';

/** A TCP connection to `port`, remembered in `sockets` (for the test to destroy), errors ignored. */
export async function openSocket(port: number, sockets: Socket[]): Promise<Socket> {
  const socket = connect(port, '127.0.0.1');
  sockets.push(socket);
  socket.on('error', () => undefined);
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', () => resolve());
    socket.once('error', reject);
  });
  return socket;
}

/** What the service first answers on `socket` to `request` (its head), or null when the connection closed first. */
export function answerHead(socket: Socket, request: string): Promise<string | null> {
  return new Promise((resolve) => {
    let text = '';
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('latin1');
      if (text.includes('\r\n\r\n')) resolve(text);
    });
    socket.once('close', () => resolve(text.includes('\r\n\r\n') ? text : null));
    socket.write(request);
  });
}

/** The status code of an answer's head, or `closed`. */
export const statusOf = (answer: string | null): string => answer?.slice(9, 12) ?? 'closed';

/**
 * The status of an upgrade on a new connection (closed once answered), tried again every 100 ms while it is refused
 * (503) for at most `timeoutMs`: a service hears connections closed by its clients in its own
 * time, and a fixed wait for it fails on a busy machine.
 */
export async function upgradeOnceThereIsRoom(open: () => Promise<Socket>, timeoutMs = 10_000): Promise<string> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const socket = await open();
    const status = statusOf(await answerHead(socket, UPGRADE_REQUEST));
    // Asked and answered: the probe holds nothing the test counts on.
    socket.destroy();
    if (status !== '503' || Date.now() > deadline) return status;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
