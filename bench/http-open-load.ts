/**
 * An open-loop HTTP/1.1 load generator, run as a child process of a bench (the protocol of
 * bench/http-load.ts: the parent sends one `OpenLoadJob`, the child answers one
 * `OpenLoadResult` and exits). Requests arrive on a fixed schedule drawn in advance (Poisson
 * arrivals at `ratePerSecond`, seeded), whatever the server does: a slow answer does not
 * hold back the next request, as it would in a closed loop. Each request is sent on the
 * keep-alive connection idle the longest (so none idles into the server's keep-alive
 * timeout), a new one is opened when none is idle (up to `maxConnections`), and past that it
 * waits for one. A connection the server closes leaves the pool; a request in flight on it
 * counts under the status `closed`. Latency runs from the scheduled arrival to the end of the
 * response, so time spent waiting on the client side counts too (no coordinated omission).
 */
import { fork } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { parseResponse, percentile, requestBytes, summarize, type LoadRequest, type LoadResult } from './http-load';
import { mulberry32 } from '../test/support/prng';

export interface OpenLoadJob {
  readonly port: number;
  readonly requests: readonly LoadRequest[];
  /** The POST body of requests without one of their own. */
  readonly body: string;
  readonly ratePerSecond: number;
  readonly durationMs: number;
  /** Connections opened before the first arrival. */
  readonly initialConnections: number;
  readonly maxConnections: number;
  readonly seed: number;
  /** How long to wait for the last answers after the last arrival. */
  readonly drainTimeoutMs: number;
}

export interface OpenLoadResult extends LoadResult {
  readonly offered: number;
  readonly offeredPerSecond: number;
  /** Requests still unanswered when the drain timed out. */
  readonly unanswered: number;
  readonly connectionsUsed: number;
  /** How late the client sent a request after its scheduled arrival, at worst and at p99. */
  readonly sendLagMs: { readonly p99: number; readonly max: number };
}

/** Runs a load generator module (this one or bench/http-load.ts) in a child process with one job. */
export function runInChild<Job extends object, Result>(file: string, job: Job): Promise<Result> {
  const child = fork(file, [], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  return new Promise<Result>((resolve, reject) => {
    child.once('message', (result: Result) => resolve(result));
    child.once('exit', (code) => reject(new Error(`load generator exited with ${String(code)}`)));
    child.send(job);
  });
}


/** Arrival times in ms from the start: exponential gaps with mean 1000 / rate. */
export function poissonSchedule(ratePerSecond: number, durationMs: number, seed: number): Float64Array {
  const next = mulberry32(seed);
  const times: number[] = [];
  for (let t = -Math.log(1 - next()) * (1000 / ratePerSecond); t < durationMs; t += -Math.log(1 - next()) * (1000 / ratePerSecond)) {
    times.push(t);
  }
  return Float64Array.from(times);
}

interface Connection {
  readonly socket: Socket;
  /** Scheduled arrival (ms since start) of the request in flight, or -1 when idle. */
  scheduledAt: number;
  buffered: Buffer;
}

export async function runOpenLoad(job: OpenLoadJob): Promise<OpenLoadResult> {
  const schedule = poissonSchedule(job.ratePerSecond, job.durationMs, job.seed);
  const prepared = job.requests.map((r) => requestBytes(r, job.body));
  const latencies = new Float64Array(schedule.length);
  const lags = new Float64Array(schedule.length);
  const statuses: Record<string, number> = {};
  const idle: Connection[] = [];
  const all: Connection[] = [];
  const waiting: number[] = [];
  let opened = 0;
  let sent = 0;
  let completed = 0;
  let failure: Error | null = null;
  let started = 0;
  let onAllAnswered: (() => void) | null = null;

  const now = (): number => performance.now() - started;

  const send = (connection: Connection, index: number): void => {
    connection.scheduledAt = schedule[index] as number;
    lags[index] = Math.max(0, now() - connection.scheduledAt);
    connection.socket.write(prepared[index % prepared.length] as Buffer);
  };

  const release = (connection: Connection): void => {
    const queued = waiting.shift();
    if (connection.socket.destroyed) return;
    if (queued !== undefined) send(connection, queued);
    else {
      connection.scheduledAt = -1;
      idle.push(connection);
    }
  };

  const open = (): Promise<Connection> =>
    new Promise<Connection>((resolve, reject) => {
      opened++;
      const socket = connect({ port: job.port, host: '127.0.0.1', noDelay: true });
      const connection: Connection = { socket, scheduledAt: -1, buffered: Buffer.alloc(0) };
      all.push(connection);
      socket.once('connect', () => resolve(connection));
      socket.on('error', (error) => {
        failure ??= error;
        reject(error);
        onAllAnswered?.();
      });
      socket.on('close', () => {
        const at = idle.indexOf(connection);
        if (at >= 0) idle.splice(at, 1);
        if (connection.scheduledAt >= 0) {
          latencies[completed] = now() - connection.scheduledAt;
          completed++;
          statuses.closed = (statuses.closed ?? 0) + 1;
          connection.scheduledAt = -1;
          if (completed === schedule.length) onAllAnswered?.();
        }
      });
      socket.on('data', (chunk: Buffer) => {
        connection.buffered = connection.buffered.length === 0 ? chunk : Buffer.concat([connection.buffered, chunk]);
        for (;;) {
          const response = parseResponse(connection.buffered);
          if (response === null) return;
          connection.buffered = connection.buffered.subarray(response.length);
          latencies[completed] = now() - connection.scheduledAt;
          completed++;
          statuses[response.status] = (statuses[response.status] ?? 0) + 1;
          release(connection);
          if (completed === schedule.length) onAllAnswered?.();
        }
      });
    });

  const dispatch = (index: number): void => {
    const connection = idle.shift();
    if (connection !== undefined) {
      send(connection, index);
      return;
    }
    waiting.push(index);
    if (opened < job.maxConnections) {
      open().then(release, () => undefined);
    }
  };

  for (const connection of await Promise.all(Array.from({ length: Math.min(job.initialConnections, job.maxConnections) }, open))) {
    idle.push(connection);
  }

  started = performance.now();
  await new Promise<void>((resolve) => {
    const tick = (): void => {
      const at = now();
      while (sent < schedule.length && (schedule[sent] as number) <= at) dispatch(sent++);
      if (sent >= schedule.length || failure !== null) {
        resolve();
        return;
      }
      setTimeout(tick, Math.max(0, (schedule[sent] as number) - now()));
    };
    tick();
  });
  const lastArrival = now();
  await new Promise<void>((resolve) => {
    if (completed === schedule.length || failure !== null) {
      resolve();
      return;
    }
    const timer = setTimeout(resolve, job.drainTimeoutMs);
    onAllAnswered = () => {
      clearTimeout(timer);
      resolve();
    };
  });
  const elapsedMs = Math.max(lastArrival, job.durationMs);
  for (const connection of all) connection.socket.destroy();
  if (failure !== null) throw failure;

  const sortedLags = lags.subarray(0, sent).sort();
  return {
    ...summarize(latencies, completed, elapsedMs, statuses),
    offered: schedule.length,
    offeredPerSecond: (schedule.length / job.durationMs) * 1000,
    unanswered: schedule.length - completed,
    connectionsUsed: opened,
    sendLagMs: { p99: percentile(sortedLags, 99), max: sortedLags[sortedLags.length - 1] ?? 0 },
  };
}

if (require.main === module && process.send !== undefined) {
  process.once('message', (job: OpenLoadJob) => {
    runOpenLoad(job)
      .then((result) => process.send?.(result, () => process.exit(0)))
      .catch((error: unknown) => {
        process.stderr.write(`open-loop load failed: ${error instanceof Error ? error.stack : String(error)}\n`);
        process.exit(1);
      });
  });
}
