/**
 * The live projector across read-model generations (steps 2 to 4 of the switch described at
 * the top of read-models.ts): it projects into the current generation, and while a rebuilt
 * one is pending into both at once, completes the switch once the new one has caught up and
 * keeps the previous one current for a grace period after it.
 */
import type { EventStore, GlobalPosition } from '../infra/eventstore/port';
import { comparePositions, formatPosition, parsePosition } from '../infra/eventstore/port';
import type { GenerationRecord, GenerationRegistry } from '../infra/readstore/generations';
import type { CheckpointWrite, ReadStore } from '../infra/readstore/port';
import type { GenerationStores } from './generation-stores';
import type { Projection } from './projection';
import { CHECKPOINT_NAME, startProjector, type Projector, type ProjectorOptions } from './projector';

export interface GenerationalProjectorContext {
  readonly eventStore: EventStore;
  readonly registry: GenerationRegistry;
  readonly generations: GenerationStores;
  /** How long the previous generation is kept current after a switch. */
  readonly graceMs: number;
  readonly now: () => Date;
  /** Acts on a registry record in this process (serves its generation, tells the supervisor). */
  readonly onRecord: (record: GenerationRecord) => void;
  /** Sets who is told of every registry record from now on (`null`: nobody). */
  readonly supervise: (supervisor: ((record: GenerationRecord) => void) | null) => void;
}

function sameGenerations(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((g, i) => g === b[i]);
}

interface Target {
  readonly store: ReadStore;
  /** Its checkpoint when the projector started: events up to it are already there. */
  readonly start: GlobalPosition | null;
}

/**
 * Several generations fed by one projector: each event goes to every target that does not
 * have it yet, and checkpoints are written to all of them after the writes. The projector
 * starts at the lowest checkpoint.
 */
async function multiTarget(stores: readonly ReadStore[], projections: readonly Projection[]): Promise<{ store: ReadStore; projections: Projection[] }> {
  const targets: Target[] = [];
  for (const store of stores) {
    const stored = await store.getCheckpoint(CHECKPOINT_NAME);
    targets.push({ store, start: stored === null ? null : parsePosition(stored) });
  }
  const store: ReadStore = {
    collection: () => {
      throw new Error('a multi-generation projector writes through its projections only');
    },
    getCheckpoint: async (name) => {
      let lowest: GlobalPosition | null = null;
      for (const target of targets) {
        const stored = await target.store.getCheckpoint(name);
        if (stored === null) return null;
        const position = parsePosition(stored);
        if (lowest === null || comparePositions(position, lowest) < 0) lowest = position;
      }
      return lowest === null ? null : formatPosition(lowest);
    },
    setCheckpoint: async (name, value) => {
      for (const target of targets) await target.store.setCheckpoint(name, value);
    },
    advanceCheckpoint: async (name, value, guard) => {
      // A newer epoch in any generation fences this projector; a position further on is harmless.
      let result: CheckpointWrite = 'written';
      for (const target of targets) if ((await target.store.advanceCheckpoint(name, value, guard)) === 'fenced') result = 'fenced';
      return result;
    },
    ping: async () => {
      for (const target of targets) await target.store.ping();
    },
    close: async () => undefined,
  };
  const wrapped = projections.map(
    (projection): Projection => ({
      name: projection.name,
      streamPrefixes: projection.streamPrefixes,
      init: async () => {
        for (const target of targets) await projection.init(target.store);
      },
      applyBatch: async (events) => {
        for (const target of targets) {
          const start = target.start;
          const missing = start === null ? events : events.filter((event) => comparePositions(event.position, start) > 0);
          if (missing.length > 0) await projection.applyBatch(missing, target.store);
        }
      },
    }),
  );
  return { store, projections: wrapped };
}

/** Starts the live projector; it follows the registry (through `supervise`) until stopped. */
export async function startGenerationalProjector(
  context: GenerationalProjectorContext,
  projections: readonly Projection[],
  projectorOptions: ProjectorOptions = {},
): Promise<Projector> {
  const { eventStore, registry, generations: stores } = context;
  interface Phase {
    readonly generations: readonly number[];
    readonly projector: Projector;
  }
  let phase: Phase | null = null;
  let stopped = false;
  let graceTimer: NodeJS.Timeout | undefined;
  let chain: Promise<void> = Promise.resolve();
  let resolveCaughtUp: () => void = () => undefined;
  const caughtUp = new Promise<void>((resolve) => (resolveCaughtUp = resolve));
  let settleDone: { resolve: () => void; reject: (error: unknown) => void } = { resolve: () => undefined, reject: () => undefined };
  const done = new Promise<void>((resolve, reject) => (settleDone = { resolve, reject }));
  done.catch(() => undefined);

  const fail = (error: unknown): void => {
    if (stopped) return;
    stopped = true;
    context.supervise(null);
    resolveCaughtUp();
    settleDone.reject(error);
  };
  /** Since when the step running now (a phase starting or ending, a switch) has been at work. */
  let stepSince: number | null = null;
  const enqueue = (step: () => Promise<void>): void => {
    chain = chain
      .then(async () => {
        if (stopped) return;
        stepSince = Date.now();
        try {
          await step();
        } finally {
          stepSince = null;
        }
      })
      .catch(fail);
  };

  const completeSwitch = async (to: number): Promise<void> => {
    await registry.completeSwitch(to, context.now().toISOString());
    // Whether this process or another one completed it, act on what the registry says now.
    context.onRecord(await registry.read());
  };

  /** Starts projecting into these generations; becomes the phase before anything can observe it. */
  const startPhase = async (generations: readonly number[]): Promise<void> => {
    const targets = await Promise.all(generations.map(stores.storeFor));
    stores.setProjecting(generations);
    const only = targets.length === 1 ? targets[0] : undefined;
    let projector: Projector;
    if (only !== undefined) {
      projector = await startProjector(eventStore, only, projections, projectorOptions);
    } else {
      const multi = await multiTarget(targets, projections);
      projector = await startProjector(eventStore, multi.store, multi.projections, projectorOptions);
    }
    phase = { generations, projector };
    if (only === undefined) {
      const to = generations[generations.length - 1] as number;
      // Switch once the new generation has caught up (the current one was all along).
      void projector.caughtUp.then(() => {
        if (phase?.projector === projector) enqueue(() => completeSwitch(to));
      });
    }
    void projector.caughtUp.then(resolveCaughtUp);
    projector.done.catch((error: unknown) => {
      if (phase?.projector === projector) fail(error);
    });
  };

  const replacePhase = async (generations: readonly number[]): Promise<void> => {
    if (graceTimer !== undefined) clearTimeout(graceTimer);
    graceTimer = undefined;
    const previous = phase;
    phase = null;
    if (previous !== null) await previous.projector.stop();
    await startPhase(generations);
    stores.retireUnused();
  };

  const sync = async (record: GenerationRecord): Promise<void> => {
    const desired = record.pending !== null ? [record.generation, record.pending] : [record.generation];
    if (phase !== null && sameGenerations(phase.generations, desired)) return;
    const switched = phase !== null && phase.generations.length === 2 && desired.length === 1 && phase.generations[1] === desired[0];
    if (switched) {
      // Processes still reading the previous generation stay right until they follow.
      if (graceTimer === undefined) {
        graceTimer = setTimeout(() => {
          graceTimer = undefined;
          enqueue(() => finishGrace(desired));
        }, context.graceMs);
        graceTimer.unref();
      }
      return;
    }
    await replacePhase(desired);
  };
  const finishGrace = async (desired: readonly number[]): Promise<void> => {
    if (phase !== null && phase.generations.length === 2 && phase.generations[1] === desired[0]) await replacePhase(desired);
  };

  context.supervise((record) => enqueue(() => sync(record)));
  enqueue(async () => sync(await registry.read()));
  await chain;
  if (stopped) throw await done.catch((error: unknown) => error);

  return {
    caughtUp,
    done,
    progress: () => {
      const current = phase?.projector.progress() ?? { position: null, caughtUp: false, eventsApplied: 0, lastEventAt: null, pendingSince: null };
      const since = [current.pendingSince, stepSince].filter((t): t is number => t !== null);
      return { ...current, pendingSince: since.length === 0 ? null : Math.min(...since) };
    },
    stop: async () => {
      if (!stopped) {
        stopped = true;
        context.supervise(null);
      }
      if (graceTimer !== undefined) clearTimeout(graceTimer);
      await chain;
      const last = phase;
      phase = null;
      stores.setProjecting([]);
      if (last !== null) await last.projector.stop();
      settleDone.resolve();
    },
  };
}
