/**
 * `npm run bench:heartbeat`: heartbeats per second and latency for 10k simulated devices,
 * in embedded and distributed mode, next to this machine's ceiling measured in the same
 * run (a bare Express POST that verifies the same device JWT with a key built once), then
 * the offline expiry of all 10k devices going silent at once. Also the rate limiter's cost
 * per request: the ceiling's server with and without the service's rate-limit middleware in
 * front (in memory in embedded mode, in the stack's Redis in distributed mode), measured in
 * alternation while the service is idle, set against the service's own time per heartbeat.
 *
 * Everything runs on 127.0.0.1 and is bounded: BENCH_DEVICES devices (10,000),
 * BENCH_SECONDS of sustained load (15), BENCH_CONNECTIONS keep-alive connections (64).
 * The load generator is a child process (bench/http-load.ts); the service under test runs
 * in this process with every role (api, projector, expiry), as `npm start` would. The
 * distributed mode runs against the test stack started here (test/support/stack.ts:
 * EventStoreDB stand-in, jongodb, private redis-server) — stand-ins, not production servers.
 *
 * Devices are registered through the command layer (createDeviceCommands), not the HTTP
 * API: the same decider, handler and events, without 20,000 extra HTTP round trips and
 * without the per-user register rate limit and device cap, which are not what is measured.
 */
import { fork } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import express from 'express';
import Redis from 'ioredis';
import { rateLimit, type RateLimitDeps } from '../src/api/rate-limit';
import { createApiKeyMatcher } from '../src/auth/api-keys';
import { bearerToken, createTokens, type DeviceClaims, type Tokens } from '../src/auth/tokens';
import { createDeviceCommands } from '../src/commands/devices';
import { newCommandContext, systemClock } from '../src/commands/handler';
import { loadConfig } from '../src/config';
import type { DeviceWentOffline } from '../src/domain/device';
import { STREAM_PREFIXES } from '../src/domain/events';
import { openEmbeddedEventStore } from '../src/infra/eventstore/embedded';
import { createEsdbEventStore } from '../src/infra/eventstore/esdb';
import { formatPosition, type EventStore } from '../src/infra/eventstore/port';
import { createMemoryReadStore } from '../src/infra/readstore/memory';
import { createMongoReadStore } from '../src/infra/readstore/mongo';
import { createLogger } from '../src/logger';
import { CHECKPOINT_NAME } from '../src/projections/projector';
import type { Watermark } from '../src/projections/watermark';
import { createMemoryRateLimiter, createRedisRateLimiter, parseRateLimits, type RateLimiter } from '../src/ratelimit/limiter';
import { startService } from '../src/service';
import { startStack, type Stack } from '../test/support/stack';
import { TEST_SECRETS } from '../test/support/server';
import type { LoadJob, LoadRequest, LoadResult } from './http-load';
import { listenOnLoopback, type LoopbackServer } from './loopback';
import { profiled } from './profile';

const DEVICES = Number(process.env.BENCH_DEVICES ?? 10_000);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 64);
const SUSTAIN_MS = Number(process.env.BENCH_SECONDS ?? 15) * 1000;
/**
 * The offline window. Long enough that no device expires between two passes of the load,
 * and about 5× a device's heartbeat interval under load (10k devices at ~2,000/s: one every
 * ~5 s), as in production (a heartbeat every 30–60 s, a window of 300 s): so expiry jobs
 * fire about as often per heartbeat as they would there.
 */
const OFFLINE_AFTER_SECONDS = Number(process.env.BENCH_OFFLINE_AFTER_SECONDS ?? 30);
/** Set to 0 to skip the ceiling measurements (profiling runs). */
const MEASURE_CEILING = process.env.BENCH_CEILING !== '0';
/** Set to 0 to skip the limiter's cost (the ceiling's server with and without the rate limiter). */
const MEASURE_LIMITER = process.env.BENCH_LIMITER !== '0';
/** Rounds of that comparison, each one measurement of either server, in alternating order (2: bare, limiter, limiter, bare). */
const LIMITER_ROUNDS = Number(process.env.BENCH_LIMITER_ROUNDS ?? 2);
/** Real hubs send one heartbeat per 30–60 s; the bench sends them as fast as it can: the tier is lifted, but still counted. */
const RATE_LIMITS = 'heartbeat=1000000/60';
/** A directory: write a CPU profile of this process (the service) for each mode's sustained phase. */
const PROFILE_DIR = process.env.BENCH_PROFILE;
/** Set to skip the silence and expiry part (quicker runs while profiling the hot path). */
const SKIP_OFFLINE = process.env.BENCH_SKIP_OFFLINE === '1';
const MODES = (process.env.BENCH_MODES ?? 'embedded,distributed').split(',').map((m) => m.trim());
/** What a hub sends every 30–60 s: its address and a little metadata, unchanged from registration. */
const BODY = JSON.stringify({ ipAddress: '192.168.1.20', metadata: { fw: '1.4.2', model: 'HH-2' } });
const HEARTBEAT_PATH = (uuid: string): string => `/api/v1/devices/heartbeat/${uuid}`;

interface Device {
  readonly uuid: string;
  readonly token: string;
  /** The token generation, for heartbeats through the command layer. */
  readonly gen: number;
}

function log(message: string): void {
  process.stdout.write(`${new Date().toISOString().slice(11, 19)} ${message}\n`);
}

async function runLoadChild(job: LoadJob): Promise<LoadResult> {
  const child = fork(join(__dirname, 'http-load.ts'), [], { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  return new Promise<LoadResult>((resolve, reject) => {
    child.once('message', (result: LoadResult) => resolve(result));
    child.once('exit', (code) => reject(new Error(`load generator exited with ${String(code)}`)));
    child.send(job);
  });
}

const load = (port: number, devices: readonly Device[], mode: LoadJob['mode'], durationMs = SUSTAIN_MS): Promise<LoadResult> =>
  runLoadChild({
    port,
    requests: devices.map((d): LoadRequest => ({ path: HEARTBEAT_PATH(d.uuid), token: d.token })),
    body: BODY,
    connections: CONNECTIONS,
    mode,
    durationMs,
    maxRequests: 5_000_000,
  });

function summary(r: LoadResult): string {
  const l = r.latencyMs;
  const statuses = Object.entries(r.statuses)
    .map(([s, n]) => `${s}×${n}`)
    .join(' ');
  return `${Math.round(r.perSecond)} req/s over ${r.requests} requests; latency p50 ${l.p50.toFixed(2)} ms, p90 ${l.p90.toFixed(2)} ms, p99 ${l.p99.toFixed(2)} ms, max ${l.max.toFixed(1)} ms; ${statuses}`;
}


// ---------------------------------------------------------------------------------------
// The ceiling: the same request, verified the same way, answered at once.


/**
 * The ceiling's server. With `limiting`, the service's own rate-limit middleware runs first,
 * where the service has it (before body parsing), and the route reuses the claims it
 * verified, as the service's heartbeat route does: what it adds is the limiter's work alone.
 */
async function startBareServer(tokens: Tokens, limiting: RateLimitDeps | null): Promise<LoopbackServer> {
  const app = express();
  app.disable('x-powered-by');
  if (limiting !== null) app.use(rateLimit(limiting));
  app.use(express.json({ limit: 64 * 1024 }));
  app.post('/api/v1/devices/heartbeat/:uuid', (req, res) => {
    try {
      const verified = res.locals.deviceClaims as DeviceClaims | undefined;
      const claims = verified ?? tokens.verifyDevice(bearerToken(req.get('Authorization')));
      if (claims.deviceUuid !== req.params.uuid) {
        res.status(403).json({ statusCode: 403 });
        return;
      }
      res.status(200).json({ success: true, device: { id: claims.deviceUuid, isOnline: true, lastSeenAt: new Date().toISOString() } });
    } catch {
      res.status(401).json({ statusCode: 401 });
    }
  });
  return listenOnLoopback(app);
}

async function measureCeiling(tokens: Tokens, devices: readonly Device[]): Promise<LoadResult> {
  const server = await startBareServer(tokens, null);
  try {
    await load(server.port, devices, 'sustained', 2000); // warm up the JIT
    return await load(server.port, devices, 'sustained');
  } finally {
    await server.close();
  }
}

// ---------------------------------------------------------------------------------------
// CPU per request, and the rate limiter's cost

/** CPU time of this process's main thread (the event loop) in µs, from /proc on Linux (NaN elsewhere). */
function mainThreadCpuUs(): number {
  try {
    const stat = readFileSync(`/proc/self/task/${process.pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // utime and stime, fields 14 and 15 of the line (11 and 12 after the name), in clock ticks of 10 ms.
    return (Number(fields[11]) + Number(fields[12])) * 10_000;
  } catch {
    return Number.NaN;
  }
}

/** CPU time redis-server has used (user + system), in µs, from INFO. */
async function redisCpuUs(redis: Redis): Promise<number> {
  const info = await redis.info('cpu');
  const field = (name: string): number => Number(new RegExp(`^${name}:([0-9.]+)`, 'm').exec(info)?.[1] ?? Number.NaN);
  return (field('used_cpu_user') + field('used_cpu_sys')) * 1e6;
}

interface Costed {
  readonly result: LoadResult;
  /** Per request: CPU of this whole process (every thread), of its event-loop thread, and of redis-server (null: not watched). */
  readonly cpuUs: number;
  readonly loopCpuUs: number;
  readonly redisCpuUs: number | null;
}

/**
 * Runs one load and divides the CPU spent meanwhile by the requests answered. The window
 * includes handing the job to the load generator (the same for every measurement).
 */
async function costed(run: () => Promise<LoadResult>, redis: Redis | null = null): Promise<Costed> {
  const redisBefore = redis === null ? 0 : await redisCpuUs(redis);
  const loopBefore = mainThreadCpuUs();
  const cpuBefore = process.cpuUsage();
  const result = await run();
  const cpu = process.cpuUsage(cpuBefore);
  const loop = mainThreadCpuUs() - loopBefore;
  const n = Math.max(1, result.requests);
  return {
    result,
    cpuUs: (cpu.user + cpu.system) / n,
    loopCpuUs: loop / n,
    redisCpuUs: redis === null ? null : ((await redisCpuUs(redis)) - redisBefore) / n,
  };
}

interface LimiterComparison {
  readonly store: 'memory' | 'Redis';
  readonly bare: readonly Costed[];
  readonly limited: readonly Costed[];
}

function costSummary(c: Costed): string {
  const redis = c.redisCpuUs === null ? '' : `, redis-server ${c.redisCpuUs.toFixed(1)} µs`;
  return `${summary(c.result)}; CPU per request: process ${c.cpuUs.toFixed(1)} µs, event loop ${c.loopCpuUs.toFixed(1)} µs${redis}`;
}

/**
 * The ceiling's server bare and with the service's rate limiter in front (`rateLimit` with the
 * limiter the service builds in this mode: in memory, or in Redis), warmed up, then measured
 * in alternation — bare, limiter, limiter, bare, … — with the same client and duration, so
 * that load from elsewhere on the machine weighs on both. Every request consumes a point of
 * the heartbeat tier, lifted as for the service so that none is refused.
 */
async function compareLimiter(mode: string, tokens: Tokens, devices: readonly Device[], redisUrl: string | null): Promise<LimiterComparison> {
  const limits = parseRateLimits(RATE_LIMITS);
  let storeErrors = 0;
  let rejected = 0;
  const redis = redisUrl === null ? null : new Redis(redisUrl, { maxRetriesPerRequest: null, lazyConnect: false });
  redis?.on('error', (error: Error) => log(`${mode}: limiter's redis connection: ${error.message}`));
  const real: RateLimiter =
    redis === null
      ? createMemoryRateLimiter(limits)
      : createRedisRateLimiter(redis, limits, () => {
          storeErrors++;
        });
  // Counts the points taken, to show afterwards that every request took one (a call and an increment: nothing next to a consume).
  let consumed = 0;
  const limiter: RateLimiter = {
    limitOf: (tier) => real.limitOf(tier),
    refund: (tier, key) => real.refund(tier, key),
    consume: (tier, key) => {
      consumed++;
      return real.consume(tier, key);
    },
  };
  const store = redis === null ? 'memory' : 'Redis';
  const bareServer = await startBareServer(tokens, null);
  const limitedServer = await startBareServer(tokens, {
    limiter,
    tokens,
    matchApiKey: createApiKeyMatcher(TEST_SECRETS.INTERNAL_API_KEYS.split(',')),
    onRejected: () => {
      rejected++;
    },
  });
  try {
    await redis?.ping();
    log(`${mode}: the limiter's cost (${store}): ceiling bare and with the rate limiter, ${LIMITER_ROUNDS} rounds in alternation`);
    await load(bareServer.port, devices, 'sustained', 2000); // warm up the JIT
    await load(limitedServer.port, devices, 'sustained', 2000);
    consumed = 0;
    const bare: Costed[] = [];
    const limited: Costed[] = [];
    for (let round = 0; round < LIMITER_ROUNDS; round++) {
      for (const withLimiter of round % 2 === 0 ? [false, true] : [true, false]) {
        const c = await costed(() => load(withLimiter ? limitedServer.port : bareServer.port, devices, 'sustained'), redis);
        (withLimiter ? limited : bare).push(c);
        log(`${mode}:   ${withLimiter ? `with ${store} limiter` : 'bare'}: ${costSummary(c)}`);
      }
    }
    // Every answered request took a point, none was refused, and the store answered every time (no fail-open).
    const answered = limited.reduce((sum, c) => sum + c.result.requests, 0);
    if (storeErrors > 0 || rejected > 0 || consumed < answered) {
      throw new Error(`the limiter comparison is void: ${storeErrors} store errors, ${rejected} refusals, ${consumed} points taken for ${answered} requests answered`);
    }
    for (const c of [...bare, ...limited]) {
      const others = Object.keys(c.result.statuses).filter((s) => s !== '200');
      if (others.length > 0) throw new Error(`the limiter comparison is void: statuses ${others.join(', ')} besides 200`);
    }
    return { store, bare, limited };
  } finally {
    await bareServer.close();
    await limitedServer.close();
    await redis?.quit();
  }
}

// ---------------------------------------------------------------------------------------
// Registration through the command layer

const noWaitWatermark: Watermark = {
  advance: () => undefined,
  waitFor: async () => true,
  current: () => null,
  close: async () => undefined,
};

/** The device use cases straight on an event store: an empty read model, and no waiting for projections. */
function unwatchedDeviceCommands(eventStore: EventStore, maxDevicesPerUser: number): ReturnType<typeof createDeviceCommands> {
  return createDeviceCommands({
    eventStore,
    readStore: createMemoryReadStore(),
    watermark: noWaitWatermark,
    clock: systemClock,
    readYourWritesTimeoutMs: 1,
    maxDevicesPerUser,
  });
}

async function registerDevices(eventStore: EventStore, tokens: Tokens, count: number, concurrency: number): Promise<Device[]> {
  // Nothing reads back: the owner's device count starts at 0 and the cap is lifted.
  const commands = unwatchedDeviceCommands(eventStore, count + 1);
  const owner = randomUUID();
  const devices: Device[] = new Array<Device>(count);
  let nextIndex = 0;
  const worker = async (): Promise<void> => {
    for (let i = nextIndex++; i < count; i = nextIndex++) {
      const ctx = newCommandContext({ type: 'user', id: owner }, `bench-register-${i}`);
      const uuid = randomUUID();
      await commands.register({ uuid, deviceId: `HUB-${i}`, name: `Hub ${i}`, ipAddress: '192.168.1.20', metadata: { fw: '1.4.2', model: 'HH-2' } }, ctx);
      const device = await commands.issueToken(uuid, ctx);
      devices[i] = { uuid, gen: device.gen, token: tokens.signDevice({ sub: device.id, deviceUuid: uuid, gen: device.gen }) };
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return devices;
}

/**
 * Distributed mode only: the projector starts after the registrations, so the devices
 * collection stays empty. jongodb, the MongoDB stand-in, rewrites in O(collection size) on
 * every write (about 150 ms per write at 3,000 documents, measured on this machine): with
 * 10,000 device documents the figures would measure the stand-in, not the service. Every
 * heartbeat still goes through the projector (it reads the document, finds none, writes
 * nothing) and through the read-your-writes wait across Redis.
 */
async function skipRegistrationsInReadModel(eventStore: EventStore, mongodbUri: string): Promise<void> {
  const head = await eventStore.headPosition();
  if (head === null) return;
  const readStore = await createMongoReadStore(mongodbUri);
  try {
    await readStore.setCheckpoint(CHECKPOINT_NAME, formatPosition(head));
  } finally {
    await readStore.close();
  }
}

// ---------------------------------------------------------------------------------------
// One mode: register, start, first heartbeats, sustained load, silence, expiry

interface ModeResult {
  readonly mode: string;
  readonly registerSeconds: number;
  /** Embedded only: over HTTP in distributed mode every first heartbeat waits on the jongodb-bound projector. */
  readonly firstPass: LoadResult | null;
  readonly sustained: LoadResult;
  /** CPU per heartbeat of this process (the service) during `sustained`. */
  readonly sustainedCpu: Costed;
  readonly limiter: LimiterComparison | null;
  /** The ceiling measured just before and just after `sustained`, on the same machine state. */
  readonly ceilings: readonly LoadResult[];
  readonly offline: { readonly count: number; readonly earliestMs: number; readonly worstMs: number; readonly worstSeenMs: number; readonly spanSeconds: number };
}

const silentSink = new Writable({ write: (_chunk, _encoding, done) => done() });

async function waitUntil(condition: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

async function benchMode(mode: string, tokens: Tokens, ceilingDevices: readonly Device[]): Promise<ModeResult> {
  let stack: Stack | null = null;
  let dir: string | null = null;
  let env: Record<string, string>;
  if (mode === 'embedded') {
    dir = mkdtempSync(join(tmpdir(), 'hhc-bench-'));
    env = { DATA_DIR: dir };
  } else {
    stack = await startStack();
    env = { ...stack.env };
  }
  const ceilings: LoadResult[] = [];
  /** The ceiling is measured while the service is idle: before any heartbeat, and once every device is offline. */
  const ceiling = async (when: string): Promise<void> => {
    if (!MEASURE_CEILING) return;
    const result = await measureCeiling(tokens, ceilingDevices);
    ceilings.push(result);
    log(`${mode}: ceiling ${when}: ${summary(result)}`);
  };
  try {
    const config = loadConfig({
      ...TEST_SECRETS,
      ...env,
      PORT: '0',
      HOST: '127.0.0.1',
      LOG_LEVEL: 'warn',
      OFFLINE_AFTER_SECONDS: String(OFFLINE_AFTER_SECONDS),
      // Real hubs send one heartbeat per 30–60 s; the bench sends them as fast as it can.
      RATE_LIMITS,
    });
    log(`${mode}: registering ${DEVICES} devices through the command layer`);
    const registerStarted = Date.now();
    const seedStore = mode === 'embedded' ? await openEmbeddedEventStore(dir as string) : createEsdbEventStore(env.EVENTSTORE_URL as string);
    let devices: Device[];
    try {
      devices = await registerDevices(seedStore, tokens, DEVICES, mode === 'embedded' ? 100 : 32);
      if (mode !== 'embedded') await skipRegistrationsInReadModel(seedStore, env.MONGODB_URI as string);
    } finally {
      await seedStore.close();
    }
    const registerSeconds = (Date.now() - registerStarted) / 1000;
    await ceiling('before');
    const limiter = MEASURE_LIMITER ? await compareLimiter(mode, tokens, ceilingDevices, mode === 'embedded' ? null : (env.REDIS_URL as string)) : null;

    const service = await startService(config, createLogger('warn', silentSink));
    // Distributed: a second "API process" for the last heartbeat of every device (see lastPass).
    const sideStore = mode === 'embedded' ? null : createEsdbEventStore(env.EVENTSTORE_URL as string);
    try {
      const port = service.port ?? 0;
      let firstPass: LoadResult | null = null;
      if (mode === 'embedded') {
        log(`${mode}: first heartbeat of every device (each one a DeviceWentOnline)`);
        firstPass = await load(port, devices, 'pass');
        log(`${mode}:   ${summary(firstPass)}`);
      }
      log(`${mode}: sustained heartbeats for ${SUSTAIN_MS / 1000} s`);
      const sustainedCpu = await profiled(PROFILE_DIR, `heartbeat-${mode}`, () => costed(() => load(port, devices, 'sustained')));
      const sustained = sustainedCpu.result;
      log(`${mode}:   ${costSummary(sustainedCpu)}`);
      if (SKIP_OFFLINE) {
        return {
          mode,
          registerSeconds,
          firstPass,
          sustained,
          sustainedCpu,
          limiter,
          ceilings,
          offline: { count: 0, earliestMs: 0, worstMs: 0, worstSeenMs: 0, spanSeconds: 0 },
        };
      }

      // The last heartbeat of every device, then silence: all 10k deadlines fall within this pass.
      const head = await service.eventStore.headPosition();
      const offlineEvents: Array<{ data: DeviceWentOffline['data']; seenAt: number }> = [];
      const feed = service.eventStore.subscribe({ ...(head !== null ? { fromPosition: head } : {}), streamPrefixes: [STREAM_PREFIXES.device] });
      const collecting = (async () => {
        for await (const item of feed) {
          if (item.kind === 'event' && item.event.type === 'DeviceWentOffline') {
            offlineEvents.push({ data: item.event.data as DeviceWentOffline['data'], seenAt: Date.now() });
          }
        }
      })();
      const lastStarted = Date.now();
      if (sideStore === null) {
        const last = await load(port, devices, 'pass');
        log(`${mode}: last heartbeat of every device over HTTP (${summary(last)})`);
      } else {
        await lastPass(sideStore, devices);
        log(`${mode}: last heartbeat of every device through the command layer (${((Date.now() - lastStarted) / 1000).toFixed(1)} s)`);
      }
      log(`${mode}: now silent; offline after ${OFFLINE_AFTER_SECONDS} s`);
      await waitUntil(async () => new Set(offlineEvents.map((e) => e.data.uuid)).size >= DEVICES, (OFFLINE_AFTER_SECONDS + 90) * 1000, 'every device to go offline').catch(
        (error: unknown) => {
          log(`${mode}: ${error instanceof Error ? error.message : String(error)}`);
        },
      );
      await feed.close();
      await collecting;

      const windowMs = OFFLINE_AFTER_SECONDS * 1000;
      const deadlineOf = (e: { data: DeviceWentOffline['data'] }): number => Date.parse(e.data.lastSeenAt ?? '') + windowMs;
      const lateness = offlineEvents.map((e) => Date.parse(e.data.wentOfflineAt) - deadlineOf(e));
      const seenLateness = offlineEvents.map((e) => e.seenAt - deadlineOf(e));
      const times = offlineEvents.map((e) => Date.parse(e.data.wentOfflineAt));
      const offline = {
        count: new Set(offlineEvents.map((e) => e.data.uuid)).size,
        earliestMs: Math.min(...lateness),
        worstMs: Math.max(...lateness),
        worstSeenMs: Math.max(...seenLateness),
        spanSeconds: (Math.max(...times) - Math.min(...times)) / 1000,
      };
      log(
        `${mode}: ${offline.count} of ${DEVICES} offline (${offlineEvents.length} transitions); after their deadlines by ${offline.earliestMs} ms (earliest) ` +
          `to ${offline.worstMs} ms (worst), seen by a subscriber ${offline.worstSeenMs} ms after at worst; transitions spread over ${offline.spanSeconds.toFixed(1)} s`,
      );
      await ceiling('after');
      return { mode, registerSeconds, firstPass, sustained, sustainedCpu, limiter, ceilings, offline };
    } finally {
      await sideStore?.close();
      await service.stop();
    }
  } finally {
    await stack?.stop();
    if (dir !== null) rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Distributed mode: the last heartbeat of every device through the command layer, as a
 * second API process would run it, without waiting for its projection. Over HTTP every
 * heartbeat waits for the projector, which jongodb holds to ~50–100 events/s here, so a
 * pass over 10,000 devices would take minutes and "going silent at once" would mean
 * nothing. The expiry side (what this part measures) is the same either way.
 */
async function lastPass(eventStore: EventStore, devices: readonly Device[]): Promise<void> {
  const commands = unwatchedDeviceCommands(eventStore, 1);
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let i = next++; i < devices.length; i = next++) {
      const device = devices[i] as Device;
      const ctx = newCommandContext({ type: 'device', id: device.uuid }, `bench-last-${i}`);
      await commands.heartbeat(device.uuid, device.gen, { ipAddress: '192.168.1.20', metadata: { fw: '1.4.2', model: 'HH-2' } }, ctx);
    }
  };
  await Promise.all(Array.from({ length: 32 }, worker));
}

async function main(): Promise<void> {
  const tokens = createTokens({
    jwtAccessSecret: TEST_SECRETS.JWT_ACCESS_SECRET,
    jwtRefreshSecret: TEST_SECRETS.JWT_REFRESH_SECRET,
    jwtDeviceSecret: TEST_SECRETS.JWT_DEVICE_SECRET,
  });
  log(`heartbeat bench: ${DEVICES} devices, ${CONNECTIONS} connections, ${SUSTAIN_MS / 1000} s sustained, OFFLINE_AFTER_SECONDS=${OFFLINE_AFTER_SECONDS}`);
  // The ceiling's devices: same token shape and path, nothing registered (the bare server checks nothing else).
  const ceilingDevices: Device[] = Array.from({ length: DEVICES }, () => {
    const uuid = randomUUID();
    return { uuid, gen: 1, token: tokens.signDevice({ sub: randomUUID(), deviceUuid: uuid, gen: 1 }) };
  });

  const results: ModeResult[] = [];
  for (const mode of MODES) results.push(await benchMode(mode, tokens, ceilingDevices));

  const ms = (n: number): string => n.toFixed(1);
  process.stdout.write(
    '\n| mode | heartbeats/s | ceiling/s (before, after) | % of ceiling | p50 ms | p99 ms | ceiling p99 ms | first heartbeats/s | offline: count, earliest, worst lateness |\n' +
      '|---|---|---|---|---|---|---|---|---|\n',
  );
  for (const r of results) {
    const s = r.sustained;
    const ceiling = r.ceilings.length > 0 ? r.ceilings.reduce((sum, c) => sum + c.perSecond, 0) / r.ceilings.length : Number.NaN;
    const ceilingP99 = r.ceilings.length > 0 ? Math.max(...r.ceilings.map((c) => c.latencyMs.p99)) : Number.NaN;
    process.stdout.write(
      `| ${r.mode} | ${Math.round(s.perSecond)} | ${Math.round(ceiling)} (${r.ceilings.map((c) => Math.round(c.perSecond)).join(', ')}) | ${Math.round((100 * s.perSecond) / ceiling)} % | ` +
        `${ms(s.latencyMs.p50)} | ${ms(s.latencyMs.p99)} | ${ms(ceilingP99)} | ${r.firstPass === null ? '—' : Math.round(r.firstPass.perSecond)} | ` +
        `${r.offline.count}/${DEVICES}, +${(r.offline.earliestMs / 1000).toFixed(2)} s, +${(r.offline.worstMs / 1000).toFixed(2)} s |\n`,
    );
  }
  printLimiterTable(results);
}

/**
 * The limiter's cost per request, two ways: from throughput, (1/rate with − 1/rate without)
 * over all rounds (and per round, bare and limiter measured one after the other), and from
 * CPU per request. Then as a share of a real heartbeat: the service's time per heartbeat
 * at its sustained rate (1/rate) and its event-loop CPU per heartbeat, same mode, same run.
 */
function printLimiterTable(results: readonly ModeResult[]): void {
  const compared = results.filter((r) => r.limiter !== null);
  if (compared.length === 0) return;
  const rateOf = (cs: readonly Costed[]): number =>
    (1000 * cs.reduce((sum, c) => sum + c.result.requests, 0)) / cs.reduce((sum, c) => sum + c.result.elapsedMs, 0);
  const mean = (xs: readonly number[]): number => xs.reduce((sum, x) => sum + x, 0) / Math.max(1, xs.length);
  const f1 = (n: number): string => n.toFixed(1);
  const int = (n: number): string => Math.round(n).toLocaleString('en-US');
  process.stdout.write(
    '\n| mode | limiter store | bare req/s (rounds) | with limiter req/s (rounds) | with / bare | bare p50 / p99 ms | with limiter p50 / p99 ms | ' +
      'limiter µs/req from rates (per round) | event-loop CPU µs/req bare / with (Δ) | process CPU µs/req bare / with (Δ) | redis-server CPU µs/req | ' +
      'service heartbeat µs/req: 1/rate, event-loop CPU | limiter share of a heartbeat: time, event-loop CPU |\n' +
      '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n',
  );
  for (const r of compared) {
    const { store, bare, limited } = r.limiter as LimiterComparison;
    const rateBare = rateOf(bare);
    const rateWith = rateOf(limited);
    const costUs = (1 / rateWith - 1 / rateBare) * 1e6;
    const perRound = bare.map((b, i) => (1 / (limited[i] as Costed).result.perSecond - 1 / b.result.perSecond) * 1e6);
    const loopBare = mean(bare.map((c) => c.loopCpuUs));
    const loopWith = mean(limited.map((c) => c.loopCpuUs));
    const cpuBare = mean(bare.map((c) => c.cpuUs));
    const cpuWith = mean(limited.map((c) => c.cpuUs));
    const redisWith = limited[0]?.redisCpuUs === null ? null : mean(limited.map((c) => c.redisCpuUs ?? 0));
    const serviceUs = 1e6 / r.sustained.perSecond;
    const serviceLoopUs = r.sustainedCpu.loopCpuUs;
    const latency = (cs: readonly Costed[]): string => `${f1(mean(cs.map((c) => c.result.latencyMs.p50)))} / ${f1(mean(cs.map((c) => c.result.latencyMs.p99)))}`;
    const sign = (n: number): string => `${n >= 0 ? '+' : '−'}${f1(Math.abs(n))}`;
    process.stdout.write(
      `| ${r.mode} | ${store} | ${int(rateBare)} (${bare.map((c) => int(c.result.perSecond)).join(', ')}) | ` +
        `${int(rateWith)} (${limited.map((c) => int(c.result.perSecond)).join(', ')}) | ${Math.round((100 * rateWith) / rateBare)} % | ` +
        `${latency(bare)} | ${latency(limited)} | ${sign(costUs)} (${perRound.map(sign).join(', ')}) | ` +
        `${f1(loopBare)} / ${f1(loopWith)} (${sign(loopWith - loopBare)}) | ${f1(cpuBare)} / ${f1(cpuWith)} (${sign(cpuWith - cpuBare)}) | ` +
        `${redisWith === null ? '–' : f1(redisWith)} | ${f1(serviceUs)}, ${f1(serviceLoopUs)} | ` +
        `${f1((100 * costUs) / serviceUs)} %, ${f1((100 * (loopWith - loopBare)) / serviceLoopUs)} % |\n`,
    );
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`bench failed: ${error instanceof Error ? error.stack : String(error)}\n`);
    process.exit(1);
  },
);
