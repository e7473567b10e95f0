import type { Server } from 'node:http';
import type { Socket } from 'node:net';

/**
 * Requests Node's HTTP parser refuses before express sees them (headers or a URL over the
 * header size limit, malformed request lines) are answered in the error body of decisions
 * §7 rather than with Node's bare, bodiless status line, so every error a client can
 * provoke has the same shape. Found by the schema fuzzing: a 70 kB query string was
 * answered 431 with an empty body.
 */

const ANSWERS: Readonly<Record<string, { status: number; error: string }>> = {
  HPE_HEADER_OVERFLOW: { status: 431, error: 'Request Header Fields Too Large' },
  HPE_URI_TOO_LONG: { status: 414, error: 'URI Too Long' },
};
const BAD_REQUEST = { status: 400, error: 'Bad Request' };

function answerFor(error: Error & { code?: string }): { status: number; error: string } {
  return (error.code !== undefined ? ANSWERS[error.code] : undefined) ?? BAD_REQUEST;
}

/**
 * An error answer written straight to a socket that no HTTP response object serves (a request
 * the parser refused, an upgrade refused before any handler): the body of decisions §7, and
 * the connection closed after it. `headers`: more header lines, each ending in CRLF.
 */
export function rawErrorAnswer(status: number, error: string, message = error, headers = ''): string {
  const body = JSON.stringify({ statusCode: status, message, error });
  return (
    `HTTP/1.1 ${status} ${error}\r\n${headers}Content-Type: application/json; charset=utf-8\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`
  );
}

export function answerClientErrors(server: Server): void {
  server.on('clientError', (error: Error & { code?: string }, socket: Socket) => {
    // A connection reset or timed out has nobody left to answer.
    if (error.code === 'ECONNRESET' || error.code === 'ERR_HTTP_REQUEST_TIMEOUT' || !socket.writable) {
      socket.destroy();
      return;
    }
    const { status, error: reason } = answerFor(error);
    socket.end(rawErrorAnswer(status, reason));
  });
}
