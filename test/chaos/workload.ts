import { doubleRefresh, refresh, reuse } from './families';
import { changeEmail, deleteDevice, heartbeat, link, register, registerRace, renameDevice, renameUser, stealEmail, unlink } from './operations';
import { ping, type TunnelPair } from './tunnel';
import type { Actor } from './world';

/**
 * The mixed workload: what each worker does next, drawn from its seeded generator with
 * these weights, one request (or one small race) at a time, until the deadline or its
 * operation budget. The weights lean on heartbeats and renames, as real traffic does.
 */

const BACKOFF_MS = 200;

type Step = (actor: Actor, pair: TunnelPair | undefined) => Promise<unknown>;

const STEPS: ReadonlyArray<readonly [number, string, Step]> = [
  [20, 'heartbeat', (a) => heartbeat(a)],
  [14, 'rename-device', (a) => renameDevice(a)],
  [10, 'rename-user', (a) => renameUser(a)],
  [8, 'refresh', (a) => refresh(a)],
  [8, 'tunnel', (_a, pair) => (pair === undefined ? Promise.resolve() : ping(pair))],
  [7, 'link', (a) => link(a)],
  [5, 'unlink', (a) => unlink(a)],
  [5, 'register', (a) => register(a)],
  [4, 'change-email', (a) => changeEmail(a)],
  [3, 'double-refresh', (a) => doubleRefresh(a)],
  [2, 'reuse', (a) => reuse(a)],
  [2, 'steal-email', (a) => stealEmail(a)],
  [2, 'delete-device', (a) => deleteDevice(a)],
  [1, 'register-race', (a) => registerRace(a)],
];
const TOTAL_WEIGHT = STEPS.reduce((sum, [w]) => sum + w, 0);

function nextStep(rng: () => number): Step {
  let roll = rng() * TOTAL_WEIGHT;
  for (const [weight, , step] of STEPS) {
    roll -= weight;
    if (roll < 0) return step;
  }
  return STEPS[0]?.[2] ?? (() => Promise.resolve());
}

export interface WorkloadLimits {
  readonly deadline: number;
  readonly maxSteps: number;
  /** Pause between steps, so that a worker stays a client and not a load generator. */
  readonly pauseMs: number;
}

/** Runs one worker until the deadline; returns how many steps it took. */
export async function runWorker(actor: Actor, pair: TunnelPair | undefined, limits: WorkloadLimits): Promise<number> {
  let steps = 0;
  while (Date.now() < limits.deadline && steps < limits.maxSteps) {
    const before = actor.history.operations.length;
    await nextStep(actor.rng)(actor, pair);
    steps += 1;
    // No answer: the service is down or restarting; a client backs off rather than spin.
    const unanswered = actor.history.operations.slice(before).some((op) => op.worker === actor.worker && op.status === null);
    await new Promise((r) => setTimeout(r, unanswered ? BACKOFF_MS : actor.rng() * limits.pauseMs));
  }
  return steps;
}
