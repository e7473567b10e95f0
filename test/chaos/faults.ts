import type { PrivateRedis } from '../support/redis';
import type { Fault, History } from './history';
import type { ServiceProcess } from './processes';
import type { TcpProxy } from '../support/tcp-proxy';

/**
 * The fault schedule, drawn from the seed: what strikes, when, and for how long. Embedded:
 * SIGKILL of the service, restarted on the same DATA_DIR. Distributed: SIGKILL of an API
 * process, of the process holding the projector lease (it is projecting: the workload
 * writes all the time), of the process holding the hubs' sockets (apps on the other one keep
 * talking to them), of redis-server (restarted empty on the same port), a Redis stopped with
 * SIGSTOP, and per-process network faults through the TCP proxies in front of each process's
 * Redis, MongoDB and EventStoreDB connections: a partition (traffic dropped silently, the
 * connections left open) and a slow link (every chunk delayed). The EventStoreDB stand-in
 * keeps its events in memory only, so a restart would be a new, empty store rather than a
 * recovery: it is not killed.
 *
 * The first faults of a run are one of each kind, in a seeded order and with short
 * durations, so that a 30 s run (CI) strikes every kind: during that round a killed process
 * restarts in the background (the next fault may strike elsewhere meanwhile; one on the same
 * process waits for it). The rest are drawn at random, each after the previous one recovered.
 */

export type FaultKind =
  | 'kill-service'
  | 'kill-api'
  | 'kill-lease-holder'
  | 'kill-hub-holder'
  | 'kill-redis'
  | 'pause-redis'
  | 'partition'
  | 'slow-link';

export type LinkName = 'redis' | 'mongodb' | 'eventstore';
export const LINK_NAMES: readonly LinkName[] = ['redis', 'mongodb', 'eventstore'];

export interface PlannedFault {
  /** Milliseconds after the workload starts. */
  readonly at: number;
  readonly kind: FaultKind;
  /** How long what it takes away stays away. */
  readonly downMs: number;
  /** One of the first round (one of each kind): the schedule goes on while a killed process restarts. */
  readonly first: boolean;
}

export interface Topology {
  readonly services: readonly ServiceProcess[];
  readonly redis: PrivateRedis | null;
  /** Distributed mode: each process's proxies, by process name. */
  readonly links: ReadonlyMap<string, Readonly<Record<LinkName, TcpProxy>>>;
  /** The process the hubs' sockets connect to. */
  readonly hubHolder: ServiceProcess | null;
}

const KINDS: Readonly<Record<'embedded' | 'distributed', readonly FaultKind[]>> = {
  embedded: ['kill-service'],
  distributed: ['kill-api', 'kill-lease-holder', 'kill-hub-holder', 'kill-redis', 'pause-redis', 'partition', 'slow-link'],
};

/** How long a fault lasts: `short` for the first round (every kind within 30 s). */
function downtime(kind: FaultKind, rng: () => number, short: boolean): number {
  switch (kind) {
    case 'pause-redis':
      return short ? 500 + rng() * 1000 : 500 + rng() * 2500;
    case 'partition':
      // Long ones outlast the projector lease (3 s in the runs) and the tunnel's liveness key (12 s).
      return short ? 1500 + rng() * 1500 : 1000 + rng() * 19_000;
    case 'slow-link':
      return short ? 1500 + rng() * 1000 : 2000 + rng() * 8000;
    case 'kill-hub-holder':
      // Long ones outlast the 30 s within which the hubs of a dead process must read as gone.
      return short ? 1000 + rng() * 1000 : 5000 + rng() * 35_000;
    default:
      return rng() * (short ? 500 : 1500);
  }
}

export function planFaults(mode: 'embedded' | 'distributed', rng: () => number, durationMs: number): PlannedFault[] {
  const plan: PlannedFault[] = [];
  const kinds = KINDS[mode];
  // One of each kind first, in a seeded order.
  const first = [...kinds];
  for (let i = first.length - 1; i > 0; i--) {
    const j = Math.floor(rng() * (i + 1));
    [first[i], first[j]] = [first[j] as FaultKind, first[i] as FaultKind];
  }
  // The first strikes once the workload is running, the last leaves it time to recover.
  let at = 1000 + rng() * 1000;
  while (at < durationMs - 2000) {
    const short = first.length > 0;
    const kind = first.shift() ?? kinds[Math.floor(rng() * kinds.length)] ?? 'kill-service';
    const downMs = downtime(kind, rng, short);
    plan.push({ at, kind, downMs, first: short });
    at += short ? downMs + 300 + rng() * 700 : downMs + 2500 + rng() * 4000;
  }
  return plan;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function restartRedis(redis: PrivateRedis, fault: Fault, downMs: number): Promise<void> {
  await redis.kill();
  await sleep(downMs);
  await redis.restart();
  fault.recoveredAt = Date.now();
}

/** Restarts in progress, by process: a later fault on the same process waits for its restart. */
const restarts = new Map<ServiceProcess, Promise<void>>();

/** Kills the process; resolves once it is killed, and `restarted` once it serves again. */
async function killAndRestart(service: ServiceProcess, fault: Fault, downMs: number): Promise<{ restarted: Promise<void> }> {
  await service.kill();
  const restart = (async () => {
    await sleep(downMs);
    await service.start();
    fault.recoveredAt = Date.now();
  })();
  restarts.set(service, restart);
  void restart.catch(() => undefined).finally(() => {
    if (restarts.get(service) === restart) restarts.delete(service);
  });
  return { restarted: restart };
}

/** Until the process is not being restarted by an earlier fault. */
async function settled(service: ServiceProcess): Promise<void> {
  for (let pending = restarts.get(service); pending !== undefined; pending = restarts.get(service)) await pending.catch(() => undefined);
}

/** Carries out one fault and its recovery, recording both in the history. */
export async function strike(planned: PlannedFault, topology: Topology, history: History, rng: () => number): Promise<void> {
  const { services, redis } = topology;
  const onService = async (service: ServiceProcess | undefined, kind: string): Promise<void> => {
    if (service === undefined) return;
    await settled(service);
    const { restarted } = await killAndRestart(service, history.fault(kind, service.name), planned.downMs);
    if (!planned.first) await restarted;
  };
  switch (planned.kind) {
    case 'kill-service':
    case 'kill-api': {
      // In the first round, a process that is not restarting (the round must not wait for one).
      const free = planned.first ? services.filter((s) => !restarts.has(s)) : [];
      const from = free.length > 0 ? free : services;
      return onService(from[Math.floor(rng() * from.length)], planned.kind);
    }
    case 'kill-lease-holder':
      if (!planned.first) for (const service of services) await settled(service);
      return onService(services.find((s) => s.holdsLease() && !restarts.has(s)) ?? services.find((s) => !restarts.has(s)) ?? services[0], planned.kind);
    case 'kill-hub-holder':
      return onService(topology.hubHolder ?? services[services.length - 1], planned.kind);
    case 'kill-redis':
      if (redis !== null) await restartRedis(redis, history.fault(planned.kind, 'redis'), planned.downMs);
      return;
    case 'pause-redis': {
      if (redis === null) return;
      const fault = history.fault(planned.kind, 'redis');
      redis.pause();
      await sleep(planned.downMs);
      redis.resume();
      fault.recoveredAt = Date.now();
      return;
    }
    case 'partition':
    case 'slow-link': {
      const service = services[Math.floor(rng() * services.length)];
      const proxies = service === undefined ? undefined : topology.links.get(service.name);
      if (service === undefined || proxies === undefined) return;
      // One link or all three of them.
      const roll = Math.floor(rng() * (LINK_NAMES.length + 1));
      const names = roll === LINK_NAMES.length ? LINK_NAMES : [LINK_NAMES[roll] as LinkName];
      const delayMs = 50 + Math.floor(rng() * 450);
      const reset = rng() < 0.3;
      const what = planned.kind === 'partition' ? `${names.join('+')} cut off${reset ? ', connections reset after' : ''}` : `${names.join('+')} +${delayMs} ms`;
      const fault = history.fault(planned.kind, `${service.name}: ${what}`);
      for (const name of names) {
        if (planned.kind === 'partition') proxies[name].blackhole();
        else proxies[name].delay(delayMs);
      }
      await sleep(planned.downMs);
      for (const name of names) proxies[name].heal({ reset: planned.kind === 'partition' && reset });
      fault.recoveredAt = Date.now();
      return;
    }
  }
}

/** Runs the schedule until its end or until `stopped()`, then waits for the restarts it began. */
export async function runSchedule(plan: readonly PlannedFault[], topology: Topology, history: History, rng: () => number, stopped: () => boolean): Promise<void> {
  const start = Date.now();
  for (const planned of plan) {
    const wait = start + planned.at - Date.now();
    if (wait > 0) await sleep(wait);
    if (stopped()) break;
    await strike(planned, topology, history, rng);
  }
  for (const service of topology.services) await settled(service);
}

// ---------------------------------------------------------------------------------------
// HOOK POINT: targeted faults.
//
// The schedule above strikes at random moments under load, so a kill lands in whatever the
// service happens to be doing, background work included: in embedded mode the service writes
// a start snapshot every few hundred events (setup.ts), so random kills can land before, during or
// after those writes. (Reclamation of old heartbeats only rewrites sealed 8 MiB segments,
// which a chaos run does not fill: its crash points are proven one by one in
// test/infra/embedded-compaction-crash.test.ts.) To aim at one moment, add an entry here:
// when a service process writes a log line matching `line`, it is killed with SIGKILL at
// once (and restarted by the run like any other kill), e.g.
//   { name: 'kill after a snapshot write', line: /"msg":"start snapshot written"/ }
// (at LOG_LEVEL=info).
export interface TargetedFault {
  readonly name: string;
  readonly line: RegExp;
}

export const TARGETED_FAULTS: readonly TargetedFault[] = [];

/** Arms the targeted faults on every service process; each strikes at most `limit` times. */
export function armTargetedFaults(topology: Topology, history: History, stopped: () => boolean, limit = 3): void {
  for (const targeted of TARGETED_FAULTS) {
    let fired = 0;
    for (const service of topology.services) {
      service.onLine((line) => {
        if (stopped() || fired >= limit || !targeted.line.test(line) || !service.alive()) return;
        fired += 1;
        void killAndRestart(service, history.fault(`targeted: ${targeted.name}`, service.name), 200);
      });
    }
  }
}
