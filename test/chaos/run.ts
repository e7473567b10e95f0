/**
 * `npm run chaos -- [--mode embedded|distributed|both] [--seed N] [--duration S]`
 *
 * A mixed workload against the real service, run as separate processes, while a fault
 * schedule drawn from the seed kills and stalls them (faults.ts); then, once the faults
 * have stopped and the service has settled, the invariants (invariants.ts) printed as a
 * table. A violation prints the seed and the shortest history that shows it, and the
 * exit code is 1. Same seed, same workload and schedule (timing still varies).
 */
import { parseArgs } from 'node:util';
import { mulberry32 } from '../support/prng';
import { armTargetedFaults, planFaults, runSchedule } from './faults';
import { History, formatHistory, type Operation } from './history';
import { checkDevices, checkNoDuplicates, checkPresence, checkRebuild, checkServerErrors, checkUsers, checkUuidRaces, INVARIANTS, type Reader } from './invariants';
import { heartbeat } from './operations';
import { createAdmin, makeActor, OFFLINE_AFTER_SECONDS, populate, startTopology, type Mode, type Running } from './setup';
import { checkReconnected, closePair, type TunnelPair } from './tunnel';
import { storedModels } from './stored-models';
import { runWorker } from './workload';
import { acknowledgedDeletes, checkAcks, watch, type Watchers } from './watchers';
import { emptyWorld, sendUntilAnswered, violation, type Actor, type World } from './world';

const WORKERS = 4;
/** A 503 is allowed while a store or process is down and this long after it is back. */
const OUTAGE_GRACE_MS = 10_000;
const SETTLE_TIMEOUT_MS = 90_000;

interface Options {
  readonly modes: readonly Mode[];
  readonly seed: number;
  readonly durationS: number;
}

function options(): Options {
  const { values } = parseArgs({
    options: { mode: { type: 'string', default: 'both' }, seed: { type: 'string' }, duration: { type: 'string', default: '30' } },
  });
  const modes: Mode[] = values.mode === 'both' ? ['embedded', 'distributed'] : [values.mode as Mode];
  if (!modes.every((m) => m === 'embedded' || m === 'distributed')) throw new Error('--mode is embedded, distributed or both');
  const seed = values.seed === undefined ? Math.floor(Math.random() * 2 ** 31) : Number(values.seed);
  const durationS = Number(values.duration);
  if (!Number.isInteger(seed) || !(durationS > 0)) throw new Error('--seed is an integer and --duration a number of seconds');
  return { modes, seed, durationS };
}

function readerFor(actor: Actor, adminToken: string): Reader {
  const request = (method: string, path: string, token: string): Promise<Operation> =>
    sendUntilAnswered(actor, { kind: 'check', entity: 'check', method, path, token });
  return {
    get: async (path, token = adminToken) => nullIfUnanswered(await request('GET', path, token)),
    post: async (path, token) => nullIfUnanswered(await request('POST', path, token)),
  };
}

const nullIfUnanswered = (op: Operation): Operation | null => (op.status === null ? null : op);

/** Every process up again, Redis answering, and every process ready (projector caught up). */
async function settle(running: Running): Promise<void> {
  running.redis?.resume();
  for (const proxies of running.links.values()) for (const proxy of Object.values(proxies)) proxy.heal();
  for (const service of running.services) if (!service.alive()) await service.start();
  const deadline = Date.now() + SETTLE_TIMEOUT_MS;
  for (const service of running.services) {
    while (Date.now() < deadline) {
      const res = await fetch(`${service.baseUrl}/health/ready`, { signal: AbortSignal.timeout(3000) }).catch(() => null);
      if (res?.status === 200) break;
      await new Promise((r) => setTimeout(r, 250));
    }
  }
  // Every heartbeat of the run is now older than the offline window: all expiries are due.
  await new Promise((r) => setTimeout(r, OFFLINE_AFTER_SECONDS * 1000 + 3000));
}

async function checkTunnel(world: World, pairs: readonly TunnelPair[]): Promise<void> {
  for (const pair of pairs) {
    const problem = await checkReconnected(pair, 30_000);
    if (problem !== null) violation(world, 'tunnel reconnected and relayed', problem, `device:${pair.deviceUuid}`);
  }
}

async function checkAll(running: Running, history: History, world: World, actors: readonly Actor[], adminActor: Actor, adminToken: string, pairs: readonly TunnelPair[]): Promise<void> {
  const read = readerFor(adminActor, adminToken);
  await checkUsers(world, read);
  await checkDevices(world, read);
  await checkNoDuplicates(world, read);
  await checkUuidRaces(world, read);
  await checkRebuild(world, read, adminToken, running.mongoUri === null ? null : storedModels(running.mongoUri));
  const byWorker = (worker: number): Actor => actors[worker] ?? adminActor;
  await checkPresence(world, read, (device) => byWorker(device.owner.worker), heartbeat);
  await checkTunnel(world, pairs);
  checkServerErrors(world, history, OUTAGE_GRACE_MS);
}

function report(mode: Mode, seed: number, history: History, world: World, start: number, steps: number, pairs: readonly TunnelPair[], watched: string): boolean {
  const faults = new Map<string, number>();
  for (const f of history.faults) faults.set(f.kind, (faults.get(f.kind) ?? 0) + 1);
  const relayed = pairs.reduce((sum, p) => sum + p.relayed, 0);
  const answered = pairs.reduce((sum, p) => sum + p.answered, 0);
  process.stdout.write(
    `\nchaos ${mode} seed ${seed}: ${history.faults.length} faults (${[...faults].map(([k, n]) => `${k} ${n}`).join(', ') || 'none'}); ` +
      `${steps} steps, ${history.operations.length} requests, ${history.acknowledged()} acknowledged, ${history.indeterminate()} without answer, ` +
      `${history.operations.filter((op) => op.status === 503).length} answered 503; ` +
      `tunnel ${relayed} relayed, ${answered} answered; ${watched}\n\n`,
  );
  const width = Math.max(...INVARIANTS.map((i) => i.length));
  process.stdout.write(`  ${'invariant'.padEnd(width)}  result\n  ${'-'.repeat(width)}  ------\n`);
  for (const invariant of INVARIANTS) {
    const count = world.violations.filter((v) => v.invariant === invariant).length;
    process.stdout.write(`  ${invariant.padEnd(width)}  ${count === 0 ? 'ok' : `VIOLATED (${count})`}\n`);
  }
  for (const note of world.notes) process.stdout.write(`  (${note})\n`);
  if (world.violations.length === 0) return true;
  process.stdout.write(`\n${world.violations.length} violation(s), seed ${seed}, mode ${mode}. Shortest histories:\n`);
  // A few of each kind: the first of an invariant is usually the clearest.
  const shown = INVARIANTS.flatMap((invariant) => world.violations.filter((v) => v.invariant === invariant).slice(0, 3));
  for (const v of shown) {
    process.stdout.write(`\n[${v.invariant}] ${v.entity ?? ''}: ${v.message}\n`);
    if (v.entity !== null) process.stdout.write(`${formatHistory(history.of(v.entity), history.faults, start)}\n`);
  }
  return false;
}

async function runMode(mode: Mode, seed: number, durationS: number): Promise<boolean> {
  const history = new History();
  const world = emptyWorld();
  const running = await startTopology(mode);
  const pairs: TunnelPair[] = [];
  let stopped = false;
  try {
    const adminToken = await createAdmin(running, history, world);
    const adminActor = makeActor(-1, seed, running, history, world);
    const actors = Array.from({ length: WORKERS }, (_, w) => makeActor(w, seed, running, history, world));
    for (const actor of actors) pairs.push(await populate(actor, running));

    const start = Date.now();
    const deadline = start + durationS * 1000;
    const faultRng = mulberry32(seed);
    armTargetedFaults(running, history, () => stopped);
    const watchers: Watchers = watch({ world, history, services: running.services, mongoUri: running.mongoUri, targets: running.targets, adminToken });
    const faults = runSchedule(planFaults(mode, faultRng, durationS * 1000), running, history, faultRng, () => stopped || Date.now() > deadline);
    const limits = { deadline, maxSteps: durationS * 60, pauseMs: 20 };
    const steps = (await Promise.all(actors.map((actor, i) => runWorker(actor, pairs[i], limits)))).reduce((a, b) => a + b, 0);
    stopped = true;
    await faults;

    await settle(running);
    await watchers.stop();
    const acks = checkAcks(world, pairs, history.faults, running.hubHolder?.name ?? null);
    await checkAll(running, history, world, actors, adminActor, adminToken, pairs);
    const counts = watchers.counts();
    const watched =
      `watched: ${acks} acks delivered, ${counts.tenures} lease tenures, ${counts.checkpointReads} checkpoint reads, ` +
      `${counts.deletedReads} reads of ${acknowledgedDeletes(history)} deleted devices`;
    const problems = running.services.flatMap((s) => s.problems);
    if (problems.length > 0) process.stdout.write(`\nservice error log lines (${problems.length}), first: ${problems[0] ?? ''}\n`);
    return report(mode, seed, history, world, start, steps, pairs, watched);
  } finally {
    stopped = true;
    for (const pair of pairs) closePair(pair);
    await running.stop();
  }
}

async function main(): Promise<void> {
  const { modes, seed, durationS } = options();
  let passed = true;
  for (const mode of modes) passed = (await runMode(mode, seed, durationS)) && passed;
  process.exit(passed ? 0 : 1);
}

main().catch((error: unknown) => {
  process.stderr.write(`chaos run failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(2);
});
