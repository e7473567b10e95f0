/**
 * The hubs of `npm run bench:storm` (bench/storm.ts), in a worker process: hub clients with
 * their defaults, counting what the bench reports. Imports the hub client only.
 */
import { agentFetch, HubClient, type HttpFetch } from '@home-hub-cloud/hub-client';
import { io, type ManagerOptions, type SocketOptions } from 'socket.io-client';

export interface HubSpec {
  readonly uuid: string;
  readonly token: string;
}

export type WorkerMessage =
  | { readonly kind: 'start'; readonly baseUrl: string; readonly hubs: readonly HubSpec[]; readonly worker: number; readonly workers: number }
  | { readonly kind: 'mark' }
  | { readonly kind: 'stop' };

export interface WorkerReport {
  readonly kind: 'report';
  readonly connected: number;
  /** Connected again since the last mark. */
  readonly back: number;
  /** Heartbeats accepted and failed since the last mark. */
  readonly beatsOk: number;
  readonly beatsFailed: number;
  readonly stopped: Record<string, number>;
  readonly refused: Record<string, number>;
  readonly reconnects: number;
  /** Reconnections by cause (`timeout`, `websocket error`, `rate_limited`, ...). */
  readonly causes: Record<string, number>;
}

/** Hubs per source address: a real fleet comes from as many addresses as it has hubs. */
const HUBS_PER_ADDRESS = Number(process.env.BENCH_HUBS_PER_ADDRESS ?? 500);

/**
 * The loopback address hub `i` of worker `worker` of `workers` connects from (all of
 * 127.0.0.0/8 is this machine). From one address, 20,000 connections to one port take most of
 * the kernel's ephemeral ports (32768–60999 here) with those in TIME_WAIT, and each `connect()`
 * then searches the range for a free one: in a first run, 36 % of the fleet's CPU was that
 * search, a cost of the bench, not of hubs or the service. Numbered by the hub's place in the
 * whole fleet (worker `w` has hubs `w`, `w + workers`, ...): HUBS_PER_ADDRESS hubs an address
 * whatever it is set to.
 */
function sourceAddress(worker: number, workers: number, i: number): string {
  const block = Math.floor((i * workers + worker) / HUBS_PER_ADDRESS);
  return `127.1.${Math.floor(block / 250)}.${(block % 250) + 1}`;
}

/**
 * socket.io-client's `io` with connections made from `localAddress` (engine.io-client passes it
 * to `ws`, which gives it to `http.request`), and without an HTTP agent: engine.io-client's
 * default `agent: false` makes Node build a new `http.Agent` for every connection attempt
 * (100–140 µs of CPU each here, `node:http` alone), a cost of running thousands of hubs in one
 * process, which a hub on its own device pays once.
 */
function tunnelFrom(localAddress: string): (url: string, options: Partial<ManagerOptions & SocketOptions>) => ReturnType<typeof io> {
  return (url, options) => io(url, { ...options, localAddress, agent: undefined } as unknown as Partial<ManagerOptions & SocketOptions>);
}

/**
 * The fleet's HTTP (heartbeats, renewals): one keep-alive agent per worker (`agentFetch`), at
 * most BENCH_FLEET_HTTP_IDLE idle connections (256). `BENCH_FLEET_HTTP=fetch`: every hub through the
 * global `fetch`, as before 2026-11-28 (a hub on its own device does that): in a worker of
 * 10,000 hubs, `fetch`'s own work was about 40 % of the worker's CPU, and undici's pool held
 * thousands of connections (descriptors of the service's too) while the service was slow.
 */
function fleetHttp(): HttpFetch | undefined {
  if (process.env.BENCH_FLEET_HTTP === 'fetch') return undefined;
  return agentFetch({ maxFreeSockets: Number(process.env.BENCH_FLEET_HTTP_IDLE ?? 256) });
}

function runWorker(): void {
  // The bench is gone (it failed or was stopped): so is this fleet.
  process.on('disconnect', () => process.exit(0));
  const clients: HubClient[] = [];
  const connectedNow = new Set<number>();
  const connectedSinceMark = new Set<number>();
  let beatsOk = 0;
  let beatsFailed = 0;
  const stopped: Record<string, number> = {};
  const refused: Record<string, number> = {};
  let reconnects = 0;
  const causes: Record<string, number> = {};
  let reporter: NodeJS.Timeout | undefined;
  const report = (): void => {
    let back = 0;
    for (const i of connectedSinceMark) if (connectedNow.has(i)) back++;
    const message: WorkerReport = { kind: 'report', connected: connectedNow.size, back, beatsOk, beatsFailed, stopped, refused, reconnects, causes };
    // The bench may be gone between the check and the write: the callback takes the error.
    if (process.connected) process.send?.(message, undefined, undefined, () => undefined);
  };
  process.on('message', (message: WorkerMessage) => {
    if (message.kind === 'start') {
      const http = fleetHttp();
      message.hubs.forEach((spec, i) => {
        const client = new HubClient({
          baseUrl: message.baseUrl,
          uuid: spec.uuid,
          // BENCH_HUBS_PER_ADDRESS=0: every hub from the machine's own address, as earlier runs did.
          ...(HUBS_PER_ADDRESS > 0 ? { io: tunnelFrom(sourceAddress(message.worker, message.workers, i)) } : {}),
          tokens: { load: () => spec.token, save: () => undefined },
          ...(http !== undefined ? { fetch: http } : {}),
          // BENCH_CLIENT_TIMEOUT_MS: a longer wait for a machine too busy for the default 10 s (memory runs only).
          ...(process.env.BENCH_CLIENT_TIMEOUT_MS !== undefined ? { requestTimeoutMs: Number(process.env.BENCH_CLIENT_TIMEOUT_MS) } : {}),
          // BENCH_CONNECT_TIMEOUT_MS: another wait for one tunnel connection attempt (the client's default 30 s), to compare.
          ...(process.env.BENCH_CONNECT_TIMEOUT_MS !== undefined ? { connectTimeoutMs: Number(process.env.BENCH_CONNECT_TIMEOUT_MS) } : {}),
        });
        client.on((event) => {
          if (event.type === 'connected') {
            connectedNow.add(i);
            connectedSinceMark.add(i);
          } else if (event.type === 'disconnected') connectedNow.delete(i);
          else if (event.type === 'heartbeat') {
            if (event.ok) beatsOk++;
            else beatsFailed++;
          } else if (event.type === 'error' && event.where === 'heartbeat') beatsFailed++;
          else if (event.type === 'reconnecting') {
            reconnects++;
            causes[event.cause] = (causes[event.cause] ?? 0) + 1;
          }
          else if (event.type === 'refused') refused[event.code] = (refused[event.code] ?? 0) + 1;
          else if (event.type === 'stopped' && event.reason !== 'stopped') stopped[event.reason] = (stopped[event.reason] ?? 0) + 1;
        });
        clients.push(client);
        // BENCH_RAMP_PER_SECOND: hubs started at that pace (per worker) instead of all at once (memory runs only).
        const ramp = Number(process.env.BENCH_RAMP_PER_SECOND ?? 0);
        if (ramp > 0) setTimeout(() => void client.start(), (i * 1000) / ramp);
        else void client.start();
      });
      reporter = setInterval(report, 250);
    } else if (message.kind === 'mark') {
      connectedSinceMark.clear();
      beatsOk = 0;
      beatsFailed = 0;
      report();
    } else {
      clearInterval(reporter);
      for (const client of clients) client.stop();
      setTimeout(() => process.exit(0), 200);
    }
  });
}


runWorker();
