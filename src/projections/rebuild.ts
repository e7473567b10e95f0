/**
 * A read-model rebuild (step 1 of the switch described at the top of read-models.ts): fills
 * a fresh generation from the whole event store, straight or staged in memory and then
 * bulk-loaded, marks it pending and waits until it is switched to.
 */
import type { EventStore, GlobalPosition } from '../infra/eventstore/port';
import { formatPosition } from '../infra/eventstore/port';
import type { GenerationRecord, GenerationRegistry } from '../infra/readstore/generations';
import { createMemoryReadStore } from '../infra/readstore/memory';
import type { ReadDoc, ReadStore } from '../infra/readstore/port';
import type { GenerationStores } from './generation-stores';
import type { Projection } from './projection';
import { CHECKPOINT_NAME, startProjector } from './projector';
import { recordingStore } from './read-store-wrappers';

export interface RebuildReport {
  readonly generation: number;
  readonly previousGeneration: number;
  /** The position the rebuilt generation had reached when it was switched to. */
  readonly position: string | null;
  /** Events the rebuild applied. */
  readonly events: number;
  readonly durationMs: number;
  /**
   * Where the time went: projecting the history (into memory first when staged), bulk-loading
   * the documents, catching up with what was appended meanwhile, and the switch.
   */
  readonly phases: { readonly projectMs: number; readonly loadMs: number; readonly catchUpMs: number; readonly switchMs: number };
  /** Documents per collection in the rebuilt generation. */
  readonly collections: Readonly<Record<string, number>>;
}

export class RebuildInProgressError extends Error {
  constructor() {
    super('A read-model rebuild is already running in this process');
    this.name = 'RebuildInProgressError';
  }
}

export interface RebuildContext {
  readonly eventStore: EventStore;
  readonly registry: GenerationRegistry;
  readonly generations: GenerationStores;
  /** `direct` or `memory` (see ReadModelsOptions in read-models.ts). */
  readonly staging: 'direct' | 'memory';
  /** How often a rebuild looks at the registry while it waits for the switch. */
  readonly pollMs: number;
  /** How long a rebuild waits for the live projector to switch before giving up waiting. */
  readonly switchTimeoutMs?: number;
  /** Whether the live projector runs in this process. */
  readonly isLocalProjectorRunning: () => boolean;
  /** Whether some process runs the live projector (which then completes the switch). */
  readonly isProjectorRunning?: () => Promise<boolean>;
  readonly now: () => Date;
  /** Acts on a registry record in this process (serves its generation, tells the live projector). */
  readonly onRecord: (record: GenerationRecord) => void;
}

const LOAD_CHUNK = 1000;

/** Runs a projector from the store's checkpoint to the head of the log, then stops it. */
async function projectToHead(eventStore: EventStore, store: ReadStore, projections: readonly Projection[]): Promise<{ events: number; position: GlobalPosition | null }> {
  let failure: unknown = null;
  const projector = await startProjector(eventStore, store, projections, { onError: (error) => (failure ??= error) });
  await projector.caughtUp;
  await projector.stop();
  if (failure !== null) throw failure;
  const progress = projector.progress();
  return { events: progress.eventsApplied, position: progress.position };
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** The rebuild of one process's read models: one at a time (another one meanwhile is refused). */
export function createRebuild(context: RebuildContext): (projections: readonly Projection[]) => Promise<RebuildReport> {
  const { eventStore, registry, generations: stores } = context;

  const deadline = (): number => Date.now() + (context.switchTimeoutMs ?? 60_000);

  /** Marks the generation pending (after any other pending switch has completed); returns the one it replaces. */
  const requestSwitch = async (generation: number): Promise<number> => {
    const until = deadline();
    for (;;) {
      const record = await registry.read();
      if (record.pending === null && (await registry.requestSwitch(record.generation, generation))) return record.generation;
      if (Date.now() > until) throw new Error(`Generation ${String(record.pending)} is still waiting to be switched to; try again later`);
      await sleep(context.pollMs);
    }
  };

  const awaitSwitch = async (generation: number, projections: readonly Projection[]): Promise<void> => {
    const until = deadline();
    for (;;) {
      const record = await registry.read();
      // Serve it here at once: whoever asked for the rebuild reads it next (elsewhere: at the next poll).
      if (record.generation === generation) return stores.serve(generation);
      if (record.pending !== generation) throw new Error(`The switch to generation ${generation} was abandoned`);
      const running = context.isLocalProjectorRunning() || ((await context.isProjectorRunning?.()) ?? false);
      if (!running) {
        // Nobody projects, so nothing moves the current generation: catch up and switch here.
        await projectToHead(eventStore, await stores.storeFor(generation), projections);
        await registry.completeSwitch(generation, context.now().toISOString());
        context.onRecord(await registry.read());
        continue;
      }
      if (Date.now() > until) {
        throw new Error(`Generation ${generation} is built and pending; the live projector switches to it (it has not yet)`);
      }
      await sleep(context.pollMs);
    }
  };

  let rebuilding = false;
  return async (projections) => {
    if (rebuilding) throw new RebuildInProgressError();
    rebuilding = true;
    try {
      const started = Date.now();
      const generation = await registry.reserve();
      stores.addBuilding(generation);
      const target = await stores.storeFor(generation);
      const names = new Set<string>();
      let events = 0;
      let projectMs = 0;
      let loadMs = 0;

      if (context.staging === 'memory') {
        const projectStarted = Date.now();
        const staging = createMemoryReadStore();
        const staged = await projectToHead(eventStore, recordingStore(staging, names), projections);
        events += staged.events;
        projectMs = Date.now() - projectStarted;
        const loadStarted = Date.now();
        for (const projection of projections) await projection.init(target);
        for (const name of names) {
          const source = staging.collection<ReadDoc>(name);
          const destination = target.collection<ReadDoc>(name);
          await destination.clear();
          const docs = await source.find();
          for (let i = 0; i < docs.length; i += LOAD_CHUNK) {
            const chunk = docs.slice(i, i + LOAD_CHUNK);
            const entries = await Promise.all(chunk.map(async (doc) => ({ doc, guard: (await source.getGuard(doc.id)) ?? '' })));
            await destination.load(entries);
          }
        }
        if (staged.position !== null) await target.setCheckpoint(CHECKPOINT_NAME, formatPosition(staged.position));
        await staging.close();
        loadMs = Date.now() - loadStarted;
      }
      // Direct: the whole history; after staging: what was appended meanwhile.
      const catchUpStarted = Date.now();
      const caughtUp = await projectToHead(eventStore, recordingStore(target, names), projections);
      events += caughtUp.events;
      const catchUpMs = Date.now() - catchUpStarted;

      const switchStarted = Date.now();
      const previousGeneration = await requestSwitch(generation);
      await awaitSwitch(generation, projections);
      const switchMs = Date.now() - switchStarted;

      const collections: Record<string, number> = {};
      for (const name of [...names].sort()) collections[name] = await target.collection<ReadDoc>(name).count();
      const position = await target.getCheckpoint(CHECKPOINT_NAME);
      const phases = context.staging === 'memory' ? { projectMs, loadMs, catchUpMs, switchMs } : { projectMs: catchUpMs, loadMs: 0, catchUpMs: 0, switchMs };
      return { generation, previousGeneration, position, events, durationMs: Date.now() - started, phases, collections };
    } finally {
      rebuilding = false;
      stores.clearBuilding();
      stores.retireUnused();
    }
  };
}
