/**
 * `npm run bench:read`: `GET /devices` (page 1 of 20, online devices only, newest first: what
 * an app's device list asks) with BENCH_DEVICES devices (100,000) in the read model in
 * embedded mode (memory read models), and in distributed mode against MongoDB (jongodb, the
 * test stand-in) with BENCH_MONGO_DEVICES (10,000: jongodb's every insert and query costs
 * time in proportion to the collection's size, so 100k would take most of an hour to load
 * and seconds per query), next to a bare Express JSON GET measured in the same run: the same
 * requests, the same access-token check (a key built once), and the very body the service
 * must answer, looked up in a map and serialized with `res.json` — everything but the query.
 *
 * The read model is filled directly: device documents built by the projection's own pure
 * `evolveDeviceDoc` from the events the deciders emit (DeviceRegistered, UserLinked for each
 * link, DeviceWentOnline/-Offline), bulk-loaded into the service's devices collection. The
 * read path reads only that collection; writing 100k devices and their links through the
 * command layer would take minutes (and hours through jongodb's per-write cost) without
 * changing what a GET does.
 *
 * Who owns the devices (seeded, the same every run):
 * - households: 1 device (45 %), 2 (25 %), 3 (15 %), 4 (8 %), 5–10 (7 %); 40 % of households
 *   have a second member linked to every device (editor or viewer);
 * - 10 users at the owner cap (MAX_DEVICES_PER_USER = 100 devices each);
 * - one fleet account (an installer, a support desk) linked as viewer to 10,000 of the
 *   household devices;
 * - 80 % of devices online, 15 % offline after having been seen, 5 % never seen.
 * Each kind of caller is measured on its own: household members (a sample of 5,000 of them,
 * round robin), the capped owners, the fleet account.
 *
 * Each caller class is measured in BENCH_ROUNDS (3) alternating rounds, the bare server before
 * the first and after each service run; the table gives medians (a neighbour's burst on a shared
 * machine spoils a round, not the result), each round's ratio, and the CPU time the server
 * spent per answered request, which a busy machine disturbs less than the rate.
 * Bounded: BENCH_SECONDS (5) of closed-loop load per measurement after 1 s of warm-up, on
 * BENCH_CONNECTIONS (16) keep-alive connections from a child process (bench/http-load.ts).
 * BENCH_MODES=embedded,distributed; BENCH_CALLERS=household,owner,fleet. BENCH_PROFILE=<dir>
 * writes a CPU profile of this process (the service) for each service run.
 */
import { join } from 'node:path';
import express from 'express';
import { bearerToken, type Tokens } from '../src/auth/tokens';
import type { DeviceRole } from '../src/domain/device';
import type { RecordedEvent } from '../src/infra/eventstore/port';
import { DEVICES_COLLECTION, evolveDeviceDoc, type DeviceDoc } from '../src/projections/devices';
import { startTestService, type Mode, type TestService } from '../test/support/harness';
import type { LoadJob, LoadRequest, LoadResult } from './http-load';
import { runInChild } from './http-open-load';
import { listenOnLoopback, type LoopbackServer } from './loopback';
import { profiled } from './profile';
import { median } from './stats';
import { mulberry32 } from '../test/support/prng';

const DEVICES = Number(process.env.BENCH_DEVICES ?? 100_000);
/** jongodb's every write and query costs time in proportion to the collection's size: see the README. */
const MONGO_DEVICES = Number(process.env.BENCH_MONGO_DEVICES ?? 10_000);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 16);
const MEASURE_MS = Number(process.env.BENCH_SECONDS ?? 5) * 1000;
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const MODES = (process.env.BENCH_MODES ?? 'embedded,distributed').split(',').map((m) => m.trim()) as Mode[];
const PROFILE_DIR = process.env.BENCH_PROFILE;
/** Which callers to measure, by the first word of their name: household, owner, fleet. */
const CALLERS = (process.env.BENCH_CALLERS ?? 'household,owner,fleet').split(',').map((c) => c.trim());
const CAPPED_USERS = 10;
const CAP = 100;
const HOUSEHOLD_SAMPLE = 5_000;
const PAGE = 20;
const QUERY = `/api/v1/devices?page=1&limit=${PAGE}&online=true&sort=createdAt&order=desc`;
const BASE_TIME = Date.parse('2026-11-01T00:00:00.000Z');

function log(message: string): void {
  process.stdout.write(`${new Date().toISOString().slice(11, 19)} ${message}\n`);
}

// ---------------------------------------------------------------------------------------
// The population


let random = mulberry32(1);
const int = (below: number): number => Math.floor(random() * below);

function uuid(): string {
  const hex = Array.from({ length: 32 }, () => int(16).toString(16)).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-4${hex.slice(13, 16)}-${'89ab'[int(4)]}${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}

const iso = (ms: number): string => new Date(ms).toISOString();

let position = 0n;
function recorded(uuidOfDevice: string, type: string, data: Record<string, unknown>): RecordedEvent {
  position++;
  return {
    id: uuid(),
    streamName: `device-${uuidOfDevice}`,
    revision: 0n,
    position: { commit: position, prepare: position },
    type,
    data: { uuid: uuidOfDevice, ...data },
    metadata: { occurredAt: iso(BASE_TIME), actor: { type: 'system', id: 'bench' }, requestId: 'bench', causationId: 'bench', correlationId: 'bench' },
  };
}

interface Link {
  readonly userId: string;
  readonly role: DeviceRole;
}

const NAMES = ['Living room', 'Kitchen', 'Garage', 'Cellar', 'Office', 'Garden', 'Attic', 'Hallway'];

/** A device document as the projection builds it from the device's events. */
function deviceDoc(index: number, links: readonly Link[]): DeviceDoc {
  const id = uuid();
  const createdAt = BASE_TIME - int(2 * 365 * 24 * 3600 * 1000);
  let doc = evolveDeviceDoc(
    null,
    recorded(id, 'DeviceRegistered', {
      id: uuid(),
      deviceId: `HUB-${String(index).padStart(6, '0')}`,
      name: `${NAMES[index % NAMES.length] as string} hub ${index}`,
      ipAddress: `192.168.${int(256)}.${int(256)}`,
      port: '8080',
      metadata: { fw: '1.4.2', model: 'HH-2' },
      gen: 0,
      registeredAt: iso(createdAt),
    }),
  );
  for (const link of links) {
    doc = evolveDeviceDoc(doc, recorded(id, 'UserLinked', { linkId: uuid(), userId: link.userId, role: link.role, reactivated: false, createdAt: iso(createdAt), linkedAt: iso(createdAt) }));
  }
  const presence = random();
  if (presence < 0.95) {
    const seen = presence < 0.8 ? BASE_TIME - int(60_000) : BASE_TIME - 3_600_000 - int(30 * 24 * 3_600_000);
    doc = evolveDeviceDoc(doc, recorded(id, 'DeviceWentOnline', { lastSeenAt: iso(Math.max(seen, createdAt)) }));
    if (presence >= 0.8) {
      doc = evolveDeviceDoc(doc, recorded(id, 'DeviceWentOffline', { reason: 'heartbeat-timeout', lastSeenAt: iso(Math.max(seen, createdAt)), wentOfflineAt: iso(seen + 300_000) }));
    }
  }
  if (doc === null) throw new Error('the projection dropped a device');
  return doc;
}

interface Population {
  readonly docs: DeviceDoc[];
  /** Per user, the devices they have an active link to. */
  readonly byUser: Map<string, DeviceDoc[]>;
  readonly households: string[];
  readonly capped: string[];
  readonly fleet: string;
}

/** The fleet account is linked to a tenth of the devices, at most 10,000. */
function fleetLinksFor(devices: number): number {
  return Math.min(10_000, Math.floor(devices / 10));
}

function householdSize(): number {
  const r = random();
  if (r < 0.45) return 1;
  if (r < 0.7) return 2;
  if (r < 0.85) return 3;
  if (r < 0.93) return 4;
  return 5 + int(6);
}

function buildPopulation(devices: number): Population {
  random = mulberry32(devices);
  const fleetLinks = fleetLinksFor(devices);
  const plans: Link[][] = [];
  const households: string[] = [];
  const capped = Array.from({ length: CAPPED_USERS }, uuid);
  for (const owner of capped) for (let i = 0; i < CAP; i++) plans.push([{ userId: owner, role: 'owner' }]);
  while (plans.length < devices) {
    const owner = uuid();
    households.push(owner);
    const members: Link[] = [{ userId: owner, role: 'owner' }];
    if (random() < 0.4) {
      const member = uuid();
      households.push(member);
      members.push({ userId: member, role: random() < 0.5 ? 'editor' : 'viewer' });
    }
    for (let i = householdSize(); i > 0 && plans.length < devices; i--) plans.push([...members]);
  }
  const fleet = uuid();
  // Every k-th household device gets the fleet account as a viewer.
  const step = Math.floor((devices - CAPPED_USERS * CAP) / fleetLinks);
  for (let linked = 0, i = CAPPED_USERS * CAP; linked < fleetLinks && i < plans.length; i += step, linked++) {
    (plans[i] as Link[]).push({ userId: fleet, role: 'viewer' });
  }

  const docs: DeviceDoc[] = [];
  const byUser = new Map<string, DeviceDoc[]>();
  plans.forEach((links, index) => {
    const doc = deviceDoc(index, links);
    docs.push(doc);
    for (const link of links) {
      let list = byUser.get(link.userId);
      if (list === undefined) {
        list = [];
        byUser.set(link.userId, list);
      }
      list.push(doc);
    }
  });
  return { docs, byUser, households, capped, fleet };
}

/** The body GET /devices must answer for this user: computed here, independently of the read store. */
function expectedPage(population: Population, userId: string): unknown {
  const online = (population.byUser.get(userId) ?? []).filter((d) => d.isOnline);
  online.sort((a, b) => (a.createdAt !== b.createdAt ? (a.createdAt < b.createdAt ? 1 : -1) : a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  return {
    data: online.slice(0, PAGE).map((device) => ({
      id: device.internalId,
      uuid: device.uuid,
      deviceId: device.deviceId,
      name: device.name,
      isOnline: device.isOnline,
      lastSeenAt: device.lastSeenAt,
      role: device.users.find((u) => u.userId === userId)?.role ?? null,
    })),
    meta: { total: online.length, page: 1, limit: PAGE, totalPages: Math.ceil(online.length / PAGE) },
  };
}

// ---------------------------------------------------------------------------------------
// Load

interface Caller {
  readonly userId: string;
  readonly token: string;
}

interface CallerClass {
  readonly name: string;
  readonly callers: readonly Caller[];
}

const load = (port: number, callers: readonly Caller[], durationMs: number): Promise<LoadResult> =>
  runInChild<LoadJob, LoadResult>(join(__dirname, 'http-load.ts'), {
    port,
    requests: callers.map((c): LoadRequest => ({ method: 'GET', path: QUERY, token: c.token })),
    body: '',
    connections: CONNECTIONS,
    mode: 'sustained',
    durationMs,
    maxRequests: 2_000_000,
  });

/** A load result, with the CPU time this process (the server measured) spent per answered request. */
interface Measured extends LoadResult {
  readonly cpuMicrosPerRequest: number;
}

async function measure(port: number, callers: readonly Caller[]): Promise<Measured> {
  await load(port, callers, 1000);
  const cpu = process.cpuUsage();
  const result = await load(port, callers, MEASURE_MS);
  const spent = process.cpuUsage(cpu);
  return { ...result, cpuMicrosPerRequest: (spent.user + spent.system) / Math.max(1, result.requests) };
}

/** The bare server: the same token check and the same body, without the service's query. */
async function startBare(tokens: Tokens, population: Population, callers: readonly Caller[]): Promise<LoopbackServer> {
  const pages = new Map<string, unknown>(callers.map((c) => [c.userId, expectedPage(population, c.userId)]));
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.get('/api/v1/devices', (req, res) => {
    try {
      const claims = tokens.verifyAccess(bearerToken(req.get('Authorization')));
      res.status(200).json(pages.get(claims.sub) ?? { data: [], meta: { total: 0, page: 1, limit: PAGE, totalPages: 0 } });
    } catch {
      res.status(401).json({ statusCode: 401 });
    }
  });
  return listenOnLoopback(app);
}

function summary(r: Measured): string {
  const l = r.latencyMs;
  const statuses = Object.entries(r.statuses)
    .map(([s, n]) => `${s}×${n}`)
    .join(' ');
  return `${Math.round(r.perSecond)} req/s over ${r.requests}; p50 ${l.p50.toFixed(2)} ms, p90 ${l.p90.toFixed(2)} ms, p99 ${l.p99.toFixed(2)} ms, max ${l.max.toFixed(1)} ms; ${Math.round(r.cpuMicrosPerRequest)} µs CPU per request; ${statuses}`;
}

// ---------------------------------------------------------------------------------------

async function fill(service: TestService, population: Population): Promise<number> {
  const started = Date.now();
  const collection = service.readStore.collection<DeviceDoc>(DEVICES_COLLECTION);
  const guard = `${'0'.padStart(20, '0')}:${'0'.padStart(20, '0')}`;
  for (let i = 0; i < population.docs.length; i += 1000) {
    await collection.load(population.docs.slice(i, i + 1000).map((doc) => ({ doc, guard })));
  }
  return (Date.now() - started) / 1000;
}

/** The service must answer exactly what the population says, for a sample of each class. Returns the mean latency, one request at a time. */
async function check(service: TestService, population: Population, classes: readonly CallerClass[]): Promise<number> {
  const started = performance.now();
  let count = 0;
  for (const { name, callers } of classes) {
    for (const caller of callers.slice(0, 100)) {
      count++;
      const res = await fetch(`${service.baseUrl}${QUERY}`, { headers: { Authorization: `Bearer ${caller.token}` } });
      const body: unknown = await res.json();
      if (res.status !== 200 || JSON.stringify(body) !== JSON.stringify(expectedPage(population, caller.userId))) {
        throw new Error(`${name}: GET /devices answered ${res.status} ${JSON.stringify(body).slice(0, 300)}, not the expected page`);
      }
    }
  }
  return (performance.now() - started) / count;
}

interface Row {
  readonly mode: Mode;
  readonly devices: number;
  readonly callerClass: string;
  readonly devicesPerCaller: string;
  /** One service run per round. */
  readonly services: readonly Measured[];
  /** The bare runs around them: before the first round and after each. */
  readonly bares: readonly Measured[];
}

async function benchMode(mode: Mode): Promise<Row[]> {
  const started = Date.now();
  const population = buildPopulation(mode === 'embedded' ? DEVICES : MONGO_DEVICES);
  log(
    `${mode}: population of ${population.docs.length} devices, ${population.byUser.size} users (${population.households.length} household members, ` +
      `${population.capped.length} at the cap, 1 fleet account) built in ${((Date.now() - started) / 1000).toFixed(1)} s`,
  );
  log(`${mode}: starting the service`);
  const service = await startTestService(mode, { LOG_LEVEL: 'warn' });
  const rows: Row[] = [];
  try {
    log(`${mode}: loading ${population.docs.length} device documents into the read model`);
    log(`${mode}: loaded in ${(await fill(service, population)).toFixed(1)} s`);
    const caller = (userId: string): Caller => ({ userId, token: service.tokens.signAccess({ sub: userId, email: `${userId}@example.com`, role: 'user' }) });
    const sample = population.households.filter((_, i) => i % Math.max(1, Math.floor(population.households.length / HOUSEHOLD_SAMPLE)) === 0).slice(0, HOUSEHOLD_SAMPLE);
    const classes: CallerClass[] = [
      { name: 'household member', callers: sample.map(caller) },
      { name: `owner at the cap (${CAP} devices)`, callers: population.capped.map(caller) },
      { name: 'fleet account', callers: [caller(population.fleet)] },
    ];
    const sequentialMs = await check(service, population, classes);
    const measured = classes.filter((c) => CALLERS.includes(c.name.split(' ')[0] as string));
    log(`${mode}: answers checked against the expected pages; one request at a time (fetch): ${sequentialMs.toFixed(1)} ms each on average`);
    const port = Number(new URL(service.baseUrl).port);
    for (const callerClass of measured) {
      const counts = callerClass.callers.map((c) => population.byUser.get(c.userId)?.length ?? 0);
      const devicesPerCaller =
        counts.length === 1 ? String(counts[0]) : `${Math.min(...counts)}–${Math.max(...counts)} (mean ${(counts.reduce((a, b) => a + b, 0) / counts.length).toFixed(1)})`;
      const bare = await startBare(service.tokens, population, callerClass.callers);
      try {
        // Alternating rounds, bare before and after each service run: a neighbour's burst
        // on a shared machine spoils one round, not the median.
        const bares = [await measure(bare.port, callerClass.callers)];
        log(`${mode} / ${callerClass.name}: bare: ${summary(bares[0] as Measured)}`);
        const services: Measured[] = [];
        for (let round = 1; round <= ROUNDS; round++) {
          const name = `read-${mode}-${callerClass.name.split(' ')[0] as string}-${round}`;
          const result = await profiled(PROFILE_DIR, name, () => measure(port, callerClass.callers));
          log(`${mode} / ${callerClass.name}: service, round ${round}: ${summary(result)}`);
          services.push(result);
          const after = await measure(bare.port, callerClass.callers);
          log(`${mode} / ${callerClass.name}: bare: ${summary(after)}`);
          bares.push(after);
        }
        rows.push({ mode, devices: population.docs.length, callerClass: callerClass.name, devicesPerCaller, services, bares });
      } finally {
        await bare.close();
      }
    }
  } finally {
    await service.stop();
  }
  return rows;
}

async function main(): Promise<void> {
  log(
    `read bench: ${DEVICES} devices embedded, ${MONGO_DEVICES} on jongodb, ${CONNECTIONS} connections, ${MEASURE_MS / 1000} s per measurement, GET ${QUERY}`,
  );
  const rows: Row[] = [];
  for (const mode of MODES) rows.push(...(await benchMode(mode)));

  const ms = (n: number): string => n.toFixed(1);
  process.stdout.write(
    `\nMedians over ${ROUNDS} rounds; each round's service run is compared with the mean of the bare runs just before and after it.\n` +
      '\n| mode | devices | caller | devices per caller | GET /devices req/s | bare req/s | % of bare (each round) | p50 ms | p99 ms | bare p99 ms | CPU µs per request (service, bare) | all 200 |\n' +
      '| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n',
  );
  for (const r of rows) {
    const percents = r.services.map((service, i) => {
      const around = ((r.bares[i] as Measured).perSecond + (r.bares[i + 1] as Measured).perSecond) / 2;
      return (100 * service.perSecond) / around;
    });
    const ok = r.services.every((service) => Object.keys(service.statuses).every((s) => s === '200'));
    const of = (runs: readonly Measured[], pick: (m: Measured) => number): number => median(runs.map(pick));
    process.stdout.write(
      `| ${r.mode} | ${r.devices} | ${r.callerClass} | ${r.devicesPerCaller} | ${Math.round(of(r.services, (m) => m.perSecond))} | ${Math.round(of(r.bares, (m) => m.perSecond))} | ` +
        `${Math.round(median(percents))} % (${percents.map((p) => Math.round(p)).join(', ')}) | ${ms(of(r.services, (m) => m.latencyMs.p50))} | ${ms(of(r.services, (m) => m.latencyMs.p99))} | ` +
        `${ms(of(r.bares, (m) => m.latencyMs.p99))} | ${Math.round(of(r.services, (m) => m.cpuMicrosPerRequest))}, ${Math.round(of(r.bares, (m) => m.cpuMicrosPerRequest))} | ${ok ? 'yes' : 'NO'} |\n`,
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
