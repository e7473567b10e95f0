import type { PrivateRedis } from '../support/redis';
import type { Fault, History } from './history';
import type { ServiceProcess } from './processes';

/**
 * The fault schedule, drawn from the seed: what strikes, when, and for how long. Embedded:
 * SIGKILL of the service, restarted on the same DATA_DIR. Distributed: SIGKILL of an API
 * process, of the process holding the projector lease (it is projecting: the workload
 * writes all the time), of redis-server (restarted empty on the same port), and a Redis
 * stopped with SIGSTOP. The EventStoreDB stand-in keeps its events in memory only, so a
 * restart would be a new, empty store rather than a recovery: it is not killed.
 */

export type FaultKind = 'kill-service' | 'kill-api' | 'kill-lease-holder' | 'kill-redis' | 'pause-redis';

export interface PlannedFault {
  /** Milliseconds after the workload starts. */
  readonly at: number;
  readonly kind: FaultKind;
  /** How long what it takes away stays away. */
  readonly downMs: number;
}

export interface Topology {
  readonly services: readonly ServiceProcess[];
  readonly redis: PrivateRedis | null;
}

const KINDS: Readonly<Record<'embedded' | 'distributed', readonly FaultKind[]>> = {
  embedded: ['kill-service'],
  distributed: ['kill-api', 'kill-lease-holder', 'kill-redis', 'pause-redis'],
};

export function planFaults(mode: 'embedded' | 'distributed', rng: () => number, durationMs: number): PlannedFault[] {
  const plan: PlannedFault[] = [];
  // The first strikes once the workload is running, the last leaves it time to recover.
  let at = 1000 + rng() * 2000;
  while (at < durationMs - 2000) {
    const kinds = KINDS[mode];
    const kind = kinds[Math.floor(rng() * kinds.length)] ?? 'kill-service';
    const downMs = kind === 'pause-redis' ? 500 + rng() * 2500 : rng() * 1500;
    plan.push({ at, kind, downMs });
    at += downMs + 2500 + rng() * 4000;
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

async function killAndRestart(service: ServiceProcess, fault: Fault, downMs: number): Promise<void> {
  await service.kill();
  await sleep(downMs);
  await service.start();
  fault.recoveredAt = Date.now();
}

/** Carries out one fault and its recovery, recording both in the history. */
export async function strike(planned: PlannedFault, topology: Topology, history: History, rng: () => number): Promise<void> {
  const { services, redis } = topology;
  switch (planned.kind) {
    case 'kill-service':
    case 'kill-api': {
      const service = services[Math.floor(rng() * services.length)];
      if (service !== undefined) await killAndRestart(service, history.fault(planned.kind, service.name), planned.downMs);
      return;
    }
    case 'kill-lease-holder': {
      const holder = services.find((s) => s.holdsLease()) ?? services[0];
      if (holder !== undefined) await killAndRestart(holder, history.fault(planned.kind, holder.name), planned.downMs);
      return;
    }
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
  }
}

/** Runs the schedule until its end or until `stopped()`; returns the number of faults injected. */
export async function runSchedule(plan: readonly PlannedFault[], topology: Topology, history: History, rng: () => number, stopped: () => boolean): Promise<void> {
  const start = Date.now();
  for (const planned of plan) {
    const wait = start + planned.at - Date.now();
    if (wait > 0) await sleep(wait);
    if (stopped()) return;
    await strike(planned, topology, history, rng);
  }
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
