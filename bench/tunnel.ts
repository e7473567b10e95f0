/**
 * `npm run bench:tunnel`: relayed tunnel messages per second and their latency, app → device
 * and device → apps, with 100 B and 4 KiB payloads, in one process (in-memory adapter) and
 * across two processes through Redis (the sharded and the classic Redis adapter), each next
 * to a bare Socket.IO relay of the same shape measured in the same run.
 *
 * The bare relay: the same namespace, event names, rooms and message envelope (id, sentAt,
 * from), the same adapter, and nothing else: no tokens, no validation, no permissions, no
 * size check, no presence. The ratio tunnel / bare is what the tunnel's rules cost.
 *
 * Shape: BENCH_PAIRS devices (16), each with two linked users. App → device: one app per
 * device (its owner) sends to it; device → apps: each device sends to its two subscribed
 * apps (owner and viewer; a delivery per app counts as one relayed message). Every sender
 * keeps BENCH_WINDOW messages in flight (16), closed loop. Two processes: apps connect to
 * process A, devices to process B, so every message crosses Redis; a third process on the
 * same Redis holds no sockets at all (the bystander: what relaying costs the processes that
 * are not involved, which is what decides how the adapter scales to more processes).
 *
 * Servers run in child processes (the tunnel through `createTunnel`, as the service wires it;
 * the event store is the embedded log, a copy of the same prepared devices per process — it is
 * read at the handshake and subscribe only, never per message). The load generator
 * (socket.io-client, WebSocket transport) is this process. Everything is on 127.0.0.1 and
 * bounded: BENCH_ROUNDS (3) runs per relay and case, each BENCH_SECONDS (3) measured after
 * BENCH_WARMUP_SECONDS (1), at most BENCH_MAX_MESSAGES (2,000,000) per run; Redis is a private redis-server started here.
 * BENCH_PROFILE=1 writes V8 CPU profiles of the server processes to $TMPDIR/hhc-bench-tunnel-profiles/<server>/.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { Server } from 'socket.io';
import { createAdapter, createShardedAdapter } from '@socket.io/redis-adapter';
import Redis from 'ioredis';
import { io as connectClient, type Socket as ClientSocket } from 'socket.io-client';
import { createTokens } from '../src/auth/tokens';
import { newCommandContext, toNewEvents } from '../src/commands/handler';
import { deviceDecider, type DeviceCommand, type DeviceEvent, type DeviceState } from '../src/domain/device';
import { deviceStream } from '../src/domain/events';
import { openEmbeddedEventStore } from '../src/infra/eventstore/embedded';
import { createLogger } from '../src/logger';
import { createTunnel } from '../src/tunnel/tunnel';
import { startPrivateRedis } from '../test/support/redis';

const PAIRS = Number(process.env.BENCH_PAIRS ?? 16);
const WINDOW = Number(process.env.BENCH_WINDOW ?? 16);
const MEASURE_MS = Number(process.env.BENCH_SECONDS ?? 3) * 1000;
const WARMUP_MS = Number(process.env.BENCH_WARMUP_SECONDS ?? 1) * 1000;
const MAX_MESSAGES = Number(process.env.BENCH_MAX_MESSAGES ?? 2_000_000);
/** Runs per relay and case, in alternating order. */
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const SETTINGS = (process.env.BENCH_SETTINGS ?? 'one,sharded,classic').split(',').map((s) => s.trim());
const PROFILE = process.env.BENCH_PROFILE === '1';
const SIZES = [100, 4096] as const;
const DIRECTIONS = ['app→device', 'device→apps'] as const;

const SECRETS = {
  jwtAccessSecret: 'bench-access-secret-0123456789abcdef0123456789',
  jwtRefreshSecret: 'bench-refresh-secret-0123456789abcdef01234567',
  jwtDeviceSecret: 'bench-device-secret-0123456789abcdef0123456789',
};

type Relay = 'bare' | 'tunnel';
type AdapterKind = 'memory' | 'sharded' | 'classic';
type Direction = (typeof DIRECTIONS)[number];

interface ServerJob {
  readonly relay: Relay;
  readonly adapter: AdapterKind;
  readonly redisUrl: string;
  readonly dataDir: string;
}

type ToServer = { readonly kind: 'cpu' } | { readonly kind: 'stop' };
type FromServer = { readonly kind: 'listening'; readonly port: number } | { readonly kind: 'cpu'; readonly micros: number };

function log(message: string): void {
  process.stdout.write(`${new Date().toISOString().slice(11, 19)} ${message}\n`);
}

// ---------------------------------------------------------------------------------------
// Server processes

type AdapterFactory = ReturnType<typeof createAdapter> | ReturnType<typeof createShardedAdapter>;

async function redisAdapter(kind: 'sharded' | 'classic', url: string, prefix: string): Promise<{ adapter: AdapterFactory; close: () => void }> {
  const pub = new Redis(url, { maxRetriesPerRequest: null });
  const sub = new Redis(url, { maxRetriesPerRequest: null });
  await Promise.all([pub, sub].map((c) => new Promise((resolve) => c.once('ready', resolve))));
  const adapter = kind === 'sharded' ? createShardedAdapter(pub, sub, { channelPrefix: prefix }) : createAdapter(pub, sub, { key: prefix });
  return { adapter, close: () => [pub, sub].forEach((c) => c.disconnect()) };
}

/** The bare relay: routing and envelope only. */
async function startBare(job: ServerJob, http: ReturnType<typeof createServer>): Promise<() => Promise<void>> {
  const redis = job.adapter === 'memory' ? null : await redisAdapter(job.adapter, job.redisUrl, 'bench-bare');
  const server = new Server(http, { serveClient: false, maxHttpBufferSize: 128 * 1024, ...(redis !== null ? { adapter: redis.adapter } : {}) });
  const nsp = server.of('/tunnel');
  nsp.on('connection', (socket) => {
    const auth = socket.handshake.auth as { role: string; uuid: string; userId: string };
    if (auth.role === 'device') {
      void socket.join(`device:${auth.uuid}`);
      socket.on('tunnel:message', (m: { id?: string; type: string; payload: unknown }) => {
        nsp.to(`subscribers:${auth.uuid}`).emit('tunnel:message', {
          id: m.id ?? randomUUID(),
          deviceUuid: auth.uuid,
          from: 'device',
          type: m.type,
          payload: m.payload,
          sentAt: new Date().toISOString(),
        });
      });
      return;
    }
    socket.on('tunnel:subscribe', (m: { deviceUuid: string }, ack?: (r: unknown) => void) => {
      void Promise.resolve(socket.join([`subscribers:${m.deviceUuid}`, `subscribers:${m.deviceUuid}:${auth.userId}`])).then(() =>
        ack?.({ success: true, deviceUuid: m.deviceUuid, isOnline: true, tunnelConnected: true }),
      );
    });
    socket.on('tunnel:message', (m: { deviceUuid: string; id?: string; type: string; payload: unknown }) => {
      nsp.to(`device:${m.deviceUuid}`).emit('tunnel:message', {
        id: m.id ?? randomUUID(),
        deviceUuid: m.deviceUuid,
        from: { userId: auth.userId },
        type: m.type,
        payload: m.payload,
        sentAt: new Date().toISOString(),
      });
    });
  });
  return async () => {
    server.engine.close();
    redis?.close();
  };
}

async function startTunnelServer(job: ServerJob, http: ReturnType<typeof createServer>): Promise<() => Promise<void>> {
  const eventStore = await openEmbeddedEventStore(job.dataDir);
  const tunnel = await createTunnel(http, {
    tokens: createTokens(SECRETS),
    eventStore,
    logger: createLogger('warn'),
    redis: job.adapter === 'memory' ? null : { url: job.redisUrl, adapter: job.adapter },
  });
  return async () => {
    await tunnel.close();
    await eventStore.close();
  };
}

async function serverMain(job: ServerJob): Promise<void> {
  const http = createServer((_req, res) => res.writeHead(404).end());
  const stop = job.relay === 'bare' ? await startBare(job, http) : await startTunnelServer(job, http);
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const send = (message: FromServer): void => {
    process.send?.(message);
  };
  send({ kind: 'listening', port: (http.address() as AddressInfo).port });
  process.on('message', (message: ToServer) => {
    if (message.kind === 'cpu') {
      const usage = process.cpuUsage();
      send({ kind: 'cpu', micros: usage.user + usage.system });
    } else {
      void stop().finally(() => process.exit(0));
    }
  });
}

interface ServerProcess {
  readonly port: number;
  readonly baseUrl: string;
  cpuMicros(): Promise<number>;
  stop(): Promise<void>;
}

async function spawnServer(job: ServerJob, name: string): Promise<ServerProcess> {
  // One directory per server: the loader's worker thread writes a profile of its own.
  const profileDir = join(tmpdir(), 'hhc-bench-tunnel-profiles', name);
  if (PROFILE) mkdirSync(profileDir, { recursive: true });
  const child: ChildProcess = fork(__filename, ['server', JSON.stringify(job)], {
    execArgv: ['--import', 'tsx', ...(PROFILE ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : [])],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name} did not start`)), 30_000);
    child.on('message', (message: FromServer) => {
      if (message.kind === 'listening') {
        clearTimeout(timer);
        resolve(message.port);
      }
    });
    child.once('exit', (code) => reject(new Error(`${name} exited with ${String(code)}`)));
  });
  return {
    port,
    baseUrl: `http://127.0.0.1:${port}`,
    cpuMicros: () =>
      new Promise<number>((resolve) => {
        const onMessage = (message: FromServer): void => {
          if (message.kind !== 'cpu') return;
          child.off('message', onMessage);
          resolve(message.micros);
        };
        child.on('message', onMessage);
        child.send({ kind: 'cpu' } satisfies ToServer);
      }),
    stop: () =>
      new Promise<void>((resolve) => {
        const kill = setTimeout(() => child.kill('SIGKILL'), 10_000);
        child.once('exit', () => {
          clearTimeout(kill);
          resolve();
        });
        child.send({ kind: 'stop' } satisfies ToServer);
      }),
  };
}

// ---------------------------------------------------------------------------------------
// Devices: given as events (the same decider and handler metadata the API would write)

interface Pair {
  readonly uuid: string;
  readonly owner: string;
  readonly viewer: string;
  readonly deviceToken: string;
}

async function prepareDevices(dataDir: string): Promise<Pair[]> {
  const tokens = createTokens(SECRETS);
  const eventStore = await openEmbeddedEventStore(dataDir);
  const pairs: Pair[] = [];
  for (let i = 0; i < PAIRS; i++) {
    const uuid = randomUUID();
    const id = randomUUID();
    const owner = randomUUID();
    const viewer = randomUUID();
    const now = new Date().toISOString();
    const commands: DeviceCommand[] = [
      {
        type: 'RegisterDevice',
        data: { id, uuid, deviceId: `HUB-${i}`, name: 'Hub', actorUserId: owner, linkId: randomUUID(), ownedDeviceCount: 0, maxDevicesPerUser: 100, now },
      },
      { type: 'LinkUser', data: { uuid, actorUserId: owner, targetUserId: viewer, role: 'viewer', linkId: randomUUID(), now } },
    ];
    let state: DeviceState = deviceDecider.initialState();
    const events: DeviceEvent[] = [];
    for (const command of commands) {
      const decided = deviceDecider.decide(command, state);
      state = decided.reduce(deviceDecider.evolve, state);
      events.push(...decided);
    }
    await eventStore.append(deviceStream(uuid), toNewEvents(events, newCommandContext({ type: 'user', id: owner }, randomUUID()), now), 'no_stream');
    pairs.push({ uuid, owner, viewer, deviceToken: tokens.signDevice({ sub: id, deviceUuid: uuid, gen: 0 }) });
  }
  await eventStore.close();
  return pairs;
}

// ---------------------------------------------------------------------------------------
// Load

type Client = ClientSocket;

function open(baseUrl: string, auth: Record<string, string>): Promise<Client> {
  const socket = connectClient(`${baseUrl}/tunnel`, { auth, transports: ['websocket'], reconnection: false, forceNew: true });
  return new Promise<Client>((resolve, reject) => {
    socket.once('connect', () => resolve(socket));
    socket.once('connect_error', (error) => reject(error));
  });
}

interface Sample {
  readonly delivered: number;
  readonly seconds: number;
  /** Milliseconds from send to receipt, of messages sent in the measured window. */
  readonly latencies: readonly number[];
  /** Server CPU (all server processes) over the measured window. */
  readonly cpuMicros: number;
  /** Redis server CPU over the measured window. */
  readonly redisCpuMicros: number;
  /** CPU of a third API process with no sockets at all, over the measured window. */
  readonly bystanderCpuMicros: number;
}

interface Summary {
  readonly rate: number;
  readonly p50: number;
  readonly p99: number;
  /** Server CPU per relayed message, in microseconds (all server processes). */
  readonly cpuPerK: number;
  readonly redisCpuPerK: number;
  readonly bystanderCpuPerK: number;
}

function summarize(samples: readonly Sample[]): Summary {
  const delivered = samples.reduce((n, s) => n + s.delivered, 0);
  const seconds = samples.reduce((n, s) => n + s.seconds, 0);
  const latencies = samples.flatMap((s) => s.latencies).sort((x, y) => x - y);
  const perK = (micros: number): number => (delivered > 0 ? micros / delivered : Number.NaN);
  return {
    rate: delivered / seconds,
    p50: percentile(latencies, 0.5),
    p99: percentile(latencies, 0.99),
    cpuPerK: perK(samples.reduce((n, s) => n + s.cpuMicros, 0)),
    redisCpuPerK: perK(samples.reduce((n, s) => n + s.redisCpuMicros, 0)),
    bystanderCpuPerK: perK(samples.reduce((n, s) => n + s.bystanderCpuMicros, 0)),
  };
}

interface Ends {
  readonly apps: Client[][];
  readonly devices: Client[];
}

async function connectEnds(relay: Relay, appSide: ServerProcess, deviceSide: ServerProcess, pairs: readonly Pair[], appsPerDevice: number): Promise<Ends> {
  const tokens = createTokens(SECRETS);
  const devices = await Promise.all(
    pairs.map((p) => open(deviceSide.baseUrl, relay === 'tunnel' ? { token: p.deviceToken } : { role: 'device', uuid: p.uuid })),
  );
  const apps = await Promise.all(
    pairs.map((p) =>
      Promise.all(
        [p.owner, p.viewer].slice(0, appsPerDevice).map(async (userId) => {
          const auth: Record<string, string> =
            relay === 'tunnel'
              ? { token: tokens.signAccess({ sub: userId, email: `${userId}@bench.local`, role: 'user' }) }
              : { role: 'app', userId };
          const app = await open(appSide.baseUrl, auth);
          await app.timeout(5000).emitWithAck('tunnel:subscribe', { deviceUuid: p.uuid });
          return app;
        }),
      ),
    ),
  );
  return { apps, devices };
}

function percentile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? Number.NaN;
}

/** Until every receiver has seen one probe from every sender (the adapter's subscriptions are in place). */
async function probeRoutes(ends: Ends, pairs: readonly Pair[], direction: Direction): Promise<void> {
  const deadline = Date.now() + 10_000;
  await Promise.all(
    pairs.map(async (pair, i) => {
      const receivers = direction === 'app→device' ? [ends.devices[i] as Client] : (ends.apps[i] as Client[]);
      const sender = direction === 'app→device' ? (ends.apps[i]?.[0] as Client) : (ends.devices[i] as Client);
      const seen = receivers.map(
        (r) =>
          new Promise<void>((resolve) => {
            const onMessage = (m: { type: string }): void => {
              if (m.type !== 'probe') return;
              r.off('tunnel:message', onMessage);
              resolve();
            };
            r.on('tunnel:message', onMessage);
          }),
      );
      const all = Promise.all(seen);
      let done = false;
      void all.then(() => (done = true));
      while (!done) {
        if (Date.now() > deadline) throw new Error('routes did not settle');
        sender.emit('tunnel:message', { deviceUuid: pair.uuid, type: 'probe', payload: null });
        await Promise.race([all, new Promise((resolve) => setTimeout(resolve, 100))]);
      }
    }),
  );
  // Let stray probes drain.
  await new Promise((resolve) => setTimeout(resolve, 200));
}

/** CPU seconds the Redis server has used so far, in microseconds. */
async function redisCpuMicros(client: Redis): Promise<number> {
  const info = await client.info('cpu');
  const field = (name: string): number => Number(new RegExp(`^${name}:([0-9.]+)`, 'm').exec(info)?.[1] ?? 0);
  return Math.round((field('used_cpu_user') + field('used_cpu_sys')) * 1e6);
}

async function measure(
  direction: Direction,
  size: number,
  ends: Ends,
  pairs: readonly Pair[],
  servers: readonly ServerProcess[],
  redis: Redis | null,
  bystander: ServerProcess | null,
): Promise<Sample> {
  await probeRoutes(ends, pairs, direction);
  const pad = 'x'.repeat(size);
  const start = performance.now();
  const measureFrom = start + WARMUP_MS;
  const measureUntil = measureFrom + MEASURE_MS;
  let sending = true;
  let delivered = 0;
  let sent = 0;
  const latencies: number[] = [];
  const sentAt = new Map<string, number>();
  let cpuBefore = 0;
  let cpuAfter = 0;
  let redisBefore = 0;
  let redisAfter = 0;
  let bystanderBefore = 0;
  let bystanderAfter = 0;
  const cpuTotal = async (): Promise<number> => (await Promise.all(servers.map((s) => s.cpuMicros()))).reduce((a, b) => a + b, 0);
  const redisCpu = async (): Promise<number> => (redis === null ? 0 : redisCpuMicros(redis));

  const listeners: Array<() => void> = [];
  await new Promise<void>((resolveRun) => {
    const finish = (): void => {
      if (!sending) return;
      sending = false;
      resolveRun();
    };
    pairs.forEach((pair, i) => {
      const device = ends.devices[i] as Client;
      const apps = ends.apps[i] as Client[];
      const sender = direction === 'app→device' ? (apps[0] as Client) : device;
      const receivers = direction === 'app→device' ? [device] : apps;
      const pending = new Map<string, number>();
      let seq = 0;
      const sendOne = (): void => {
        if (!sending || sent >= MAX_MESSAGES) return;
        const id = `${i}:${seq++}`;
        sentAt.set(id, performance.now());
        pending.set(id, receivers.length);
        sent++;
        sender.emit('tunnel:message', direction === 'app→device' ? { deviceUuid: pair.uuid, id, type: 'bench', payload: pad } : { id, type: 'bench', payload: pad });
      };
      for (const receiver of receivers) {
        const onMessage = (m: { id: string; type: string }): void => {
          if (m.type !== 'bench') return;
          const now = performance.now();
          const t0 = sentAt.get(m.id);
          if (t0 !== undefined && t0 >= measureFrom && now <= measureUntil) latencies.push(now - t0);
          if (now >= measureFrom && now <= measureUntil) delivered++;
          const left = (pending.get(m.id) ?? 1) - 1;
          if (left > 0) {
            pending.set(m.id, left);
            return;
          }
          pending.delete(m.id);
          sentAt.delete(m.id);
          if (now > measureUntil) finish();
          else sendOne();
        };
        receiver.on('tunnel:message', onMessage);
        listeners.push(() => receiver.off('tunnel:message', onMessage));
      }
      for (let w = 0; w < WINDOW; w++) sendOne();
    });
    setTimeout(() => {
      void Promise.all([cpuTotal(), redisCpu(), bystander?.cpuMicros() ?? 0]).then(([servers, redisServer, idle]) => {
        cpuBefore = servers;
        redisBefore = redisServer;
        bystanderBefore = idle;
      });
    }, WARMUP_MS);
    setTimeout(() => {
      void Promise.all([cpuTotal(), redisCpu(), bystander?.cpuMicros() ?? 0]).then(([servers, redisServer, idle]) => {
        cpuAfter = servers;
        redisAfter = redisServer;
        bystanderAfter = idle;
        finish();
      });
    }, WARMUP_MS + MEASURE_MS);
  });
  // Let what is in flight arrive before the next run.
  await new Promise((resolve) => setTimeout(resolve, 300));
  for (const off of listeners) off();
  return { delivered, seconds: MEASURE_MS / 1000, latencies, cpuMicros: cpuAfter - cpuBefore,
    redisCpuMicros: redisAfter - redisBefore,
    bystanderCpuMicros: bystanderAfter - bystanderBefore,
  };
}

// ---------------------------------------------------------------------------------------

interface Row {
  readonly setting: string;
  readonly direction: Direction;
  readonly size: number;
  readonly bare: Summary;
  readonly tunnel: Summary;
}

const SETTING_NAMES: Record<string, string> = {
  one: 'one process (in-memory adapter)',
  sharded: 'two processes, Redis sharded adapter',
  classic: 'two processes, Redis classic adapter',
};

async function main(): Promise<void> {
  const work = mkdtempSync(join(tmpdir(), 'hhc-bench-tunnel-'));
  const redis = await startPrivateRedis();
  const rows: Row[] = [];
  try {
    const dirA = join(work, 'a');
    const dirB = join(work, 'b');
    const pairs = await prepareDevices(dirA);
    cpSync(dirA, dirB, { recursive: true });
    log(`${availableParallelism()} cores, load average ${loadavg()[0]?.toFixed(2)} (other work on the machine skews the figures)`);
    log(`${PAIRS} devices, window ${WINDOW} per sender, ${ROUNDS} × (${WARMUP_MS / 1000} s warm-up + ${MEASURE_MS / 1000} s) per relay and case`);

    for (const setting of SETTINGS) {
      const adapter: AdapterKind = setting === 'one' ? 'memory' : setting === 'sharded' ? 'sharded' : 'classic';
      const start = async (
        relay: Relay,
      ): Promise<{ appSide: ServerProcess; deviceSide: ServerProcess; all: ServerProcess[]; bystander: ServerProcess | null }> => {
        const server = (side: string): Promise<ServerProcess> =>
          spawnServer({ relay, adapter, redisUrl: redis.url, dataDir: join(work, `${relay}-${setting}-${side}`) }, `${relay}-${setting}-${side}`);
        const a = await server('a');
        if (setting === 'one') return { appSide: a, deviceSide: a, all: [a], bystander: null };
        const [b, c] = await Promise.all([server('b'), server('c')]);
        return { appSide: a, deviceSide: b, all: [a, b], bystander: c };
      };
      for (const relay of ['bare', 'tunnel'] as const) {
        for (const side of ['a', 'b', 'c']) cpSync(side === 'a' ? dirA : dirB, join(work, `${relay}-${setting}-${side}`), { recursive: true });
      }
      const bare = await start('bare');
      const tunnel = await start('tunnel');
      const redisProbe = setting === 'one' ? null : new Redis(redis.url);
      try {
        for (const direction of DIRECTIONS) {
          const appsPerDevice = direction === 'app→device' ? 1 : 2;
          const bareEnds = await connectEnds('bare', bare.appSide, bare.deviceSide, pairs, appsPerDevice);
          const tunnelEnds = await connectEnds('tunnel', tunnel.appSide, tunnel.deviceSide, pairs, appsPerDevice);
          for (const size of SIZES) {
            const samples: Record<Relay, Sample[]> = { bare: [], tunnel: [] };
            // Alternating order (bare, tunnel, tunnel, bare, ...) so drift favours neither.
            for (let round = 0; round < ROUNDS; round++) {
              const order: Relay[] = round % 2 === 0 ? ['bare', 'tunnel'] : ['tunnel', 'bare'];
              for (const relay of order) {
                const sample =
                  relay === 'bare'
                    ? await measure(direction, size, bareEnds, pairs, bare.all, redisProbe, bare.bystander)
                    : await measure(direction, size, tunnelEnds, pairs, tunnel.all, redisProbe, tunnel.bystander);
                samples[relay].push(sample);
              }
            }
            const b = summarize(samples.bare);
            const t = summarize(samples.tunnel);
            rows.push({ setting, direction, size, bare: b, tunnel: t });
            const rate = (x: Summary): string => `${Math.round(x.rate).toLocaleString('en')}/s p99 ${x.p99.toFixed(1)} ms`;
            log(`${setting} ${direction} ${size} B: bare ${rate(b)} | tunnel ${rate(t)} | ${((100 * t.rate) / b.rate).toFixed(0)} %`);
          }
          for (const c of [...bareEnds.devices, ...bareEnds.apps.flat(), ...tunnelEnds.devices, ...tunnelEnds.apps.flat()]) c.disconnect();
        }
      } finally {
        redisProbe?.disconnect();
        await Promise.all([...bare.all, ...tunnel.all, bare.bystander, tunnel.bystander].map((s) => s?.stop()));
      }
    }
  } finally {
    await redis.stop();
    rmSync(work, { recursive: true, force: true });
  }

  const lines = [
    '| setting | direction | payload | bare msg/s | tunnel msg/s | tunnel / bare | bare p50 / p99 ms | tunnel p50 / p99 ms | server CPU µs/msg bare / tunnel | Redis CPU µs/msg bare / tunnel | bystander CPU µs/msg bare / tunnel |',
    '| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...rows.map((r) => {
      const rate = (x: Summary): string => Math.round(x.rate).toLocaleString('en');
      const lat = (x: Summary): string => `${x.p50.toFixed(1)} / ${x.p99.toFixed(1)}`;
      return `| ${SETTING_NAMES[r.setting] ?? r.setting} | ${r.direction} | ${r.size === 100 ? '100 B' : '4 KiB'} | ${rate(r.bare)} | ${rate(r.tunnel)} | ${((100 * r.tunnel.rate) / r.bare.rate).toFixed(0)} % | ${lat(r.bare)} | ${lat(r.tunnel)} | ${r.bare.cpuPerK.toFixed(1)} / ${r.tunnel.cpuPerK.toFixed(1)} | ${r.setting === 'one' ? '–' : `${r.bare.redisCpuPerK.toFixed(1)} / ${r.tunnel.redisCpuPerK.toFixed(1)}`} | ${r.setting === 'one' ? '–' : `${r.bare.bystanderCpuPerK.toFixed(2)} / ${r.tunnel.bystanderCpuPerK.toFixed(2)}`} |`;
    }),
  ];
  log(`load average at the end ${loadavg()[0]?.toFixed(2)}`);
  process.stdout.write(`\n${lines.join('\n')}\n`);
}

if (process.argv[2] === 'server') {
  serverMain(JSON.parse(process.argv[3] ?? '{}') as ServerJob).catch((error: unknown) => {
    process.stderr.write(`bench server failed: ${error instanceof Error ? error.stack : String(error)}\n`);
    process.exit(1);
  });
} else {
  main().then(
    () => process.exit(0),
    (error: unknown) => {
      process.stderr.write(`bench failed: ${error instanceof Error ? error.stack : String(error)}\n`);
      process.exit(1);
    },
  );
}
