/**
 * The read models as generations: queries are served from the current generation; a
 * rebuild fills a fresh one from the event store while the current one keeps serving, and
 * the switch happens only once the new one has caught up.
 *
 * The switch, without ever answering a read from a generation that lacks an acknowledged write:
 * 1. the rebuild fills generation N up to the head of the log and marks it `pending`;
 * 2. the live projector (the lease holder) projects every event into both the current
 *    generation G and N, from each one's own checkpoint, and advances the read-your-writes
 *    watermark only once both have it;
 * 3. once N has caught up it switches the registry to N; API processes follow (at once in
 *    this process, at their next poll elsewhere) and meanwhile G is still kept current;
 * 4. after a grace period that covers the poll, it projects into N alone, from N's checkpoint.
 */
import type { EventStore, GlobalPosition } from '../infra/eventstore/port';
import { comparePositions, formatPosition, parsePosition } from '../infra/eventstore/port';
import {
  createMemoryGenerationRegistry,
  createMongoGenerationRegistry,
  generationPrefix,
  type GenerationRecord,
  type GenerationRegistry,
} from '../infra/readstore/generations';
import { createMemoryReadStore, type MemoryReadStore, type MemoryStoreState } from '../infra/readstore/memory';
import { createMongoReadStore } from '../infra/readstore/mongo';
import type { ReadCollection, ReadDoc, ReadStore } from '../infra/readstore/port';
import type { Projection } from './projection';
import { CHECKPOINT_NAME, startProjector, type Projector, type ProjectorOptions } from './projector';

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

export interface ReadModels {
  /** What every query reads: the current generation, whichever that is at the moment. */
  readonly readStore: ReadStore;
  /** The generation this process serves now. */
  readonly generation: () => number;
  /** The live projector: follows the registry through switches (see the top of this file). */
  startProjector(projections: readonly Projection[], options?: ProjectorOptions): Promise<Projector>;
  /** Builds a fresh generation from the whole event store and switches to it once it has caught up. */
  rebuild(projections: readonly Projection[]): Promise<RebuildReport>;
  close(): Promise<void>;
}

export interface ReadModelsOptions {
  readonly eventStore: EventStore;
  readonly registry: GenerationRegistry;
  /** Opens the store of one generation (called once per generation and process). */
  readonly openStore: (generation: number) => Promise<ReadStore>;
  /**
   * `direct`: project straight into the new generation (memory). `memory`: project into
   * memory first, then bulk-load the documents and continue from there (MongoDB: one insert
   * per thousand documents instead of a round trip per event).
   */
  readonly staging: 'direct' | 'memory';
  /** How long the live projector keeps the previous generation current after a switch. */
  readonly graceMs: number;
  /** How often a rebuild looks at the registry while it waits for the switch. */
  readonly pollMs: number;
  /** How long a rebuild waits for the live projector to switch before giving up waiting. */
  readonly switchTimeoutMs?: number;
  /** Whether some process runs the live projector (which then completes the switch). */
  readonly isProjectorRunning?: () => Promise<boolean>;
  /** Close a store this process stopped using only after this delay (in-flight queries). */
  readonly retireDelayMs?: number;
  readonly now?: () => Date;
}

const LOAD_CHUNK = 1000;

function sameGenerations(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((g, i) => g === b[i]);
}

/** A store whose queries go to whichever store it currently points at. */
function switchableReadStore(initial: ReadStore, onClose: () => Promise<void>): { store: ReadStore; use: (store: ReadStore) => void } {
  let current = initial;
  // One forwarding collection per name, built once: queries ask for it on every request.
  const forwarding = new Map<string, ReadCollection<ReadDoc>>();
  const forward = <T extends ReadDoc>(name: string): ReadCollection<T> => {
    const of = (): ReadCollection<T> => current.collection<T>(name);
    return {
      get: (id) => of().get(id),
      getGuard: (id) => of().getGuard(id),
      getMany: (ids) => of().getMany(ids),
      writeMany: (changes) => of().writeMany(changes),
      find: (query) => of().find(query),
      count: (where) => of().count(where),
      put: (doc, guard) => of().put(doc, guard),
      remove: (id, guard) => of().remove(id, guard),
      load: (entries) => of().load(entries),
      ensureIndex: (fields, options) => of().ensureIndex(fields, options),
      clear: () => of().clear(),
    };
  };
  const collection = <T extends ReadDoc>(name: string): ReadCollection<T> => {
    let found = forwarding.get(name);
    if (found === undefined) {
      found = forward<ReadDoc>(name);
      forwarding.set(name, found);
    }
    return found as unknown as ReadCollection<T>;
  };
  return {
    store: {
      collection,
      getCheckpoint: (name) => current.getCheckpoint(name),
      setCheckpoint: (name, value) => current.setCheckpoint(name, value),
      ping: () => current.ping(),
      close: onClose,
    },
    use: (store) => {
      current = store;
    },
  };
}

/** A store that remembers which collections were used (to copy them after staging). */
function recordingStore(inner: ReadStore, names: Set<string>): ReadStore {
  return {
    collection: <T extends ReadDoc>(name: string) => {
      names.add(name);
      return inner.collection<T>(name);
    },
    getCheckpoint: (name) => inner.getCheckpoint(name),
    setCheckpoint: (name, value) => inner.setCheckpoint(name, value),
    ping: () => inner.ping(),
    close: () => inner.close(),
  };
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

export async function openReadModels(options: ReadModelsOptions): Promise<ReadModels> {
  const { eventStore, registry } = options;
  const now = options.now ?? (() => new Date());
  const retireDelayMs = options.retireDelayMs ?? 10_000;
  const stores = new Map<number, Promise<ReadStore>>();
  const storeFor = (generation: number): Promise<ReadStore> => {
    let store = stores.get(generation);
    if (store === undefined) {
      store = options.openStore(generation);
      stores.set(generation, store);
      // A failed open is not cached: the next use tries again.
      store.catch(() => stores.delete(generation));
    }
    return store;
  };

  // ---- what queries read
  const initial = await registry.read();
  let served = initial.generation;
  let closed = false;
  const switchable = switchableReadStore(await storeFor(served), () => close());
  let apiChain: Promise<void> = Promise.resolve();
  /** Generations the live projector of this process writes to. */
  let projecting: readonly number[] = [];
  /** Generations a rebuild in this process is filling. */
  const building = new Set<number>();

  const retireUnused = (): void => {
    for (const generation of [...stores.keys()]) {
      if (generation === served || projecting.includes(generation) || building.has(generation)) continue;
      const store = stores.get(generation);
      stores.delete(generation);
      const timer = setTimeout(() => {
        store?.then((s) => s.close()).catch(() => undefined);
      }, retireDelayMs);
      timer.unref();
    }
  };

  const serve = (generation: number): Promise<void> => {
    apiChain = apiChain
      .then(async () => {
        if (closed || generation === served) return;
        switchable.use(await storeFor(generation));
        served = generation;
        retireUnused();
      })
      .catch(() => undefined);
    return apiChain;
  };

  let supervisor: ((record: GenerationRecord) => void) | null = null;
  const onRecord = (record: GenerationRecord): void => {
    void serve(record.generation);
    supervisor?.(record);
  };
  const unwatch = registry.watch(onRecord);

  // ---- the live projector
  const startGenerationalProjector = async (projections: readonly Projection[], projectorOptions: ProjectorOptions = {}): Promise<Projector> => {
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
      supervisor = null;
      resolveCaughtUp();
      settleDone.reject(error);
    };
    const enqueue = (step: () => Promise<void>): void => {
      chain = chain.then(() => (stopped ? undefined : step())).catch(fail);
    };

    const completeSwitch = async (to: number): Promise<void> => {
      await registry.completeSwitch(to, now().toISOString());
      // Whether this process or another one completed it, act on what the registry says now.
      onRecord(await registry.read());
    };

    /** Starts projecting into these generations; becomes the phase before anything can observe it. */
    const startPhase = async (generations: readonly number[]): Promise<void> => {
      const targets = await Promise.all(generations.map(storeFor));
      projecting = generations;
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
      retireUnused();
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
          }, options.graceMs);
          graceTimer.unref();
        }
        return;
      }
      await replacePhase(desired);
    };
    const finishGrace = async (desired: readonly number[]): Promise<void> => {
      if (phase !== null && phase.generations.length === 2 && phase.generations[1] === desired[0]) await replacePhase(desired);
    };

    supervisor = (record) => enqueue(() => sync(record));
    enqueue(async () => sync(await registry.read()));
    await chain;
    if (stopped) throw await done.catch((error: unknown) => error);

    return {
      caughtUp,
      done,
      progress: () =>
        phase?.projector.progress() ?? { position: null, caughtUp: false, eventsApplied: 0, lastEventAt: null },
      stop: async () => {
        if (!stopped) {
          stopped = true;
          supervisor = null;
        }
        if (graceTimer !== undefined) clearTimeout(graceTimer);
        await chain;
        const last = phase;
        phase = null;
        projecting = [];
        if (last !== null) await last.projector.stop();
        settleDone.resolve();
      },
    };
  };

  let projectorRunning = false;

  // ---- rebuilds
  let rebuilding = false;
  const rebuild = async (projections: readonly Projection[]): Promise<RebuildReport> => {
    if (rebuilding) throw new RebuildInProgressError();
    rebuilding = true;
    try {
      const started = Date.now();
      const generation = await registry.reserve();
      building.add(generation);
      const target = await storeFor(generation);
      const names = new Set<string>();
      let events = 0;
      let projectMs = 0;
      let loadMs = 0;

      if (options.staging === 'memory') {
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
      const phases = options.staging === 'memory' ? { projectMs, loadMs, catchUpMs, switchMs } : { projectMs: catchUpMs, loadMs: 0, catchUpMs: 0, switchMs };
      return { generation, previousGeneration, position, events, durationMs: Date.now() - started, phases, collections };
    } finally {
      rebuilding = false;
      building.clear();
      retireUnused();
    }
  };

  const deadline = (): number => Date.now() + (options.switchTimeoutMs ?? 60_000);

  /** Marks the generation pending (after any other pending switch has completed); returns the one it replaces. */
  const requestSwitch = async (generation: number): Promise<number> => {
    const until = deadline();
    for (;;) {
      const record = await registry.read();
      if (record.pending === null && (await registry.requestSwitch(record.generation, generation))) return record.generation;
      if (Date.now() > until) throw new Error(`Generation ${String(record.pending)} is still waiting to be switched to; try again later`);
      await sleep(options.pollMs);
    }
  };

  const awaitSwitch = async (generation: number, projections: readonly Projection[]): Promise<void> => {
    const until = deadline();
    for (;;) {
      const record = await registry.read();
      // Serve it here at once: whoever asked for the rebuild reads it next (elsewhere: at the next poll).
      if (record.generation === generation) return serve(generation);
      if (record.pending !== generation) throw new Error(`The switch to generation ${generation} was abandoned`);
      const running = projectorRunning || ((await options.isProjectorRunning?.()) ?? false);
      if (!running) {
        // Nobody projects, so nothing moves the current generation: catch up and switch here.
        await projectToHead(eventStore, await storeFor(generation), projections);
        await registry.completeSwitch(generation, now().toISOString());
        onRecord(await registry.read());
        continue;
      }
      if (Date.now() > until) {
        throw new Error(`Generation ${generation} is built and pending; the live projector switches to it (it has not yet)`);
      }
      await sleep(options.pollMs);
    }
  };

  const close = async (): Promise<void> => {
    if (closed) return;
    closed = true;
    unwatch();
    await apiChain;
    const opened = [...stores.values()];
    stores.clear();
    await Promise.all(opened.map((store) => store.then((s) => s.close()).catch(() => undefined)));
    await registry.close();
  };

  return {
    readStore: switchable.store,
    generation: () => served,
    startProjector: async (projections, projectorOptions) => {
      const projector = await startGenerationalProjector(projections, projectorOptions);
      projectorRunning = true;
      void projector.done.catch(() => undefined).finally(() => (projectorRunning = false));
      return {
        ...projector,
        stop: async () => {
          projectorRunning = false;
          await projector.stop();
        },
      };
    },
    rebuild,
    close,
  };
}

/** Embedded mode's read models, with what a start snapshot takes of them. */
export interface MemoryReadModels extends ReadModels {
  /** The documents and checkpoint of the generation served now (src/runtime/snapshot.ts). */
  exportServed(): MemoryStoreState | null;
}

/**
 * Embedded mode: each generation is a memory store; the switch is immediate (one process).
 * `initial` (a start snapshot) fills the first generation, whose projector then goes on
 * from the snapshot's checkpoint; a rebuild always starts from an empty store.
 */
export async function openMemoryReadModels(eventStore: EventStore, initial?: MemoryStoreState): Promise<MemoryReadModels> {
  const opened = new Map<number, MemoryReadStore>();
  const readModels = await openReadModels({
    eventStore,
    registry: createMemoryGenerationRegistry(),
    openStore: async (generation) => {
      const store = createMemoryReadStore(generation === 0 ? initial : undefined);
      opened.set(generation, store);
      const close = async (): Promise<void> => {
        opened.delete(generation);
        await store.close();
      };
      return { ...store, close };
    },
    staging: 'direct',
    graceMs: 0,
    pollMs: 20,
    retireDelayMs: 0,
    isProjectorRunning: async () => false,
  });
  return { ...readModels, exportServed: () => opened.get(readModels.generation())?.exportState() ?? null };
}

export interface MongoReadModelsOptions {
  readonly dbName?: string;
  /** Whether a live projector runs somewhere (distributed mode: the projector lease is held). */
  readonly isProjectorRunning: () => Promise<boolean>;
  /** How often every process looks at `readmodel_generation` (default 1 s). */
  readonly pollMs?: number;
  /** How long the old generation stays current after a switch (default 5 s: several polls). */
  readonly graceMs?: number;
  readonly switchTimeoutMs?: number;
}

/** Distributed mode: generation n lives in the collections prefixed `g<n>_` (generation 0: unprefixed). */
export async function openMongoReadModels(uri: string, eventStore: EventStore, options: MongoReadModelsOptions): Promise<ReadModels> {
  const pollMs = options.pollMs ?? 1000;
  const registry = await createMongoGenerationRegistry(uri, { ...(options.dbName !== undefined ? { dbName: options.dbName } : {}), pollMs });
  try {
    return await openReadModels({
      eventStore,
      registry,
      openStore: (generation) =>
        createMongoReadStore(uri, { ...(options.dbName !== undefined ? { dbName: options.dbName } : {}), collectionPrefix: generationPrefix(generation) }),
      staging: 'memory',
      graceMs: options.graceMs ?? 5 * pollMs,
      pollMs,
      isProjectorRunning: options.isProjectorRunning,
      ...(options.switchTimeoutMs !== undefined ? { switchTimeoutMs: options.switchTimeoutMs } : {}),
    });
  } catch (error) {
    await registry.close();
    throw error;
  }
}
