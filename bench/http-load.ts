/**
 * A small closed-loop HTTP/1.1 load generator, run as a child process of a bench so that
 * the server under test keeps its own event loop. Each of `connections` keep-alive sockets
 * sends one request, waits for the whole response, and sends the next; requests are taken
 * round robin from a prepared list. Raw sockets rather than `http.request` or `fetch`: the
 * client must cost little CPU, since it shares the machine with the server it measures.
 *
 * Protocol: the parent sends one `LoadJob`; the child answers one `LoadResult` and exits.
 */
import { connect, type Socket } from 'node:net';

export interface LoadRequest {
  readonly path: string;
  /** Sent as `Authorization: Bearer …` when given. */
  readonly token?: string;
  /** POST by default. */
  readonly method?: 'GET' | 'POST';
  /** This request's own POST body, instead of the job's. */
  readonly body?: string;
}

export interface LoadJob {
  readonly port: number;
  readonly requests: readonly LoadRequest[];
  readonly body: string;
  readonly connections: number;
  /** 'pass': every request exactly once; 'sustained': round robin until `durationMs` or `maxRequests`. */
  readonly mode: 'pass' | 'sustained';
  readonly durationMs: number;
  readonly maxRequests: number;
}

export interface LoadResult {
  readonly requests: number;
  readonly elapsedMs: number;
  readonly perSecond: number;
  readonly statuses: Record<string, number>;
  readonly latencyMs: { readonly p50: number; readonly p90: number; readonly p99: number; readonly max: number };
}

const HEADER_END = Buffer.from('\r\n\r\n');

export function requestBytes(request: LoadRequest, defaultBody: string): Buffer {
  const auth = request.token === undefined ? '' : `Authorization: Bearer ${request.token}\r\n`;
  if (request.method === 'GET') return Buffer.from(`GET ${request.path} HTTP/1.1\r\nHost: 127.0.0.1\r\n${auth}Connection: keep-alive\r\n\r\n`);
  const body = request.body ?? defaultBody;
  return Buffer.from(
    `POST ${request.path} HTTP/1.1\r\nHost: 127.0.0.1\r\n${auth}Content-Type: application/json\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: keep-alive\r\n\r\n${body}`,
  );
}

/** Status and total length of the first complete response in `buf`, or null when it is not all there yet. */
export function parseResponse(buf: Buffer): { status: number; length: number } | null {
  const headerEnd = buf.indexOf(HEADER_END);
  if (headerEnd < 0) return null;
  const head = buf.toString('latin1', 0, headerEnd);
  const status = Number(head.slice(9, 12));
  const match = /\r\ncontent-length:\s*(\d+)/i.exec(head);
  if (match === null) throw new Error(`response without Content-Length:\n${head}`);
  const length = headerEnd + HEADER_END.length + Number(match[1]);
  return buf.length >= length ? { status, length } : null;
}

export function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;
}

export async function runLoad(job: LoadJob): Promise<LoadResult> {
  const prepared = job.requests.map((r) => requestBytes(r, job.body));
  const total = job.mode === 'pass' ? prepared.length : job.maxRequests;
  const latencies = new Float64Array(total);
  const statuses: Record<string, number> = {};
  let issued = 0;
  let completed = 0;
  const started = performance.now();
  const stopAt = started + job.durationMs;

  const next = (): Buffer | null => {
    if (issued >= total || (job.mode === 'sustained' && performance.now() >= stopAt)) return null;
    const bytes = prepared[issued % prepared.length] as Buffer;
    issued++;
    return bytes;
  };

  const runConnection = (): Promise<void> =>
    new Promise<void>((resolve, reject) => {
      const socket: Socket = connect({ port: job.port, host: '127.0.0.1', noDelay: true });
      let buffered: Buffer = Buffer.alloc(0);
      let sentAt = 0;
      const send = (): void => {
        const bytes = next();
        if (bytes === null) {
          socket.end();
          resolve();
          return;
        }
        sentAt = performance.now();
        socket.write(bytes);
      };
      socket.on('connect', send);
      socket.on('data', (chunk: Buffer) => {
        buffered = buffered.length === 0 ? chunk : Buffer.concat([buffered, chunk]);
        for (;;) {
          const response = parseResponse(buffered);
          if (response === null) return;
          buffered = buffered.subarray(response.length);
          if (completed < latencies.length) latencies[completed] = performance.now() - sentAt;
          completed++;
          statuses[response.status] = (statuses[response.status] ?? 0) + 1;
          send();
        }
      });
      socket.on('error', reject);
    });

  await Promise.all(Array.from({ length: job.connections }, runConnection));
  return summarize(latencies, completed, performance.now() - started, statuses);
}

/** Rate and latency percentiles of `completed` requests (their latencies first in `latencies`) over `elapsedMs`. */
export function summarize(latencies: Float64Array, completed: number, elapsedMs: number, statuses: Record<string, number>): LoadResult {
  const measured = latencies.subarray(0, Math.min(completed, latencies.length)).sort();
  return {
    requests: completed,
    elapsedMs,
    perSecond: (completed / elapsedMs) * 1000,
    statuses,
    latencyMs: {
      p50: percentile(measured, 50),
      p90: percentile(measured, 90),
      p99: percentile(measured, 99),
      max: measured[measured.length - 1] ?? 0,
    },
  };
}

if (require.main === module && process.send !== undefined) {
  process.once('message', (job: LoadJob) => {
    runLoad(job)
      .then((result) => process.send?.(result, () => process.exit(0)))
      .catch((error: unknown) => {
        process.stderr.write(`load failed: ${error instanceof Error ? error.stack : String(error)}\n`);
        process.exit(1);
      });
  });
}
