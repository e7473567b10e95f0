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
 *
 * This file composes the parts and opens them for each mode: the generations' stores and what
 * queries read (generation-stores.ts, over read-store-wrappers.ts), the live projector
 * (generational-projector.ts) and the rebuild (rebuild.ts).
 */
import type { EventStore } from '../infra/eventstore/port';
import {
  createMemoryGenerationRegistry,
  createMongoGenerationRegistry,
  generationPrefix,
  type GenerationRecord,
  type GenerationRegistry,
} from '../infra/readstore/generations';
import { createMemoryReadStore, type MemoryReadStore, type MemoryStoreState } from '../infra/readstore/memory';
import { createMongoReadStore } from '../infra/readstore/mongo';
import type { ReadStore } from '../infra/readstore/port';
import { startGenerationalProjector, type GenerationalProjectorContext } from './generational-projector';
import { openGenerationStores } from './generation-stores';
import type { Projection } from './projection';
import type { Projector, ProjectorOptions } from './projector';
import { createRebuild, type RebuildReport } from './rebuild';

export { RebuildInProgressError, type RebuildReport } from './rebuild';

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

export async function openReadModels(options: ReadModelsOptions): Promise<ReadModels> {
  const { eventStore, registry } = options;
  const now = options.now ?? (() => new Date());

  // ---- what queries read
  const initial = await registry.read();
  let closed = false;
  const generations = await openGenerationStores({
    openStore: options.openStore,
    initial: initial.generation,
    retireDelayMs: options.retireDelayMs ?? 10_000,
    onClose: () => close(),
  });

  // ---- following the registry: serve its generation, and tell the live projector (if any)
  let supervisor: ((record: GenerationRecord) => void) | null = null;
  const onRecord = (record: GenerationRecord): void => {
    void generations.serve(record.generation);
    supervisor?.(record);
  };
  const unwatch = registry.watch(onRecord);

  // ---- the live projector
  let projectorRunning = false;
  const projectorContext: GenerationalProjectorContext = {
    eventStore,
    registry,
    generations,
    graceMs: options.graceMs,
    now,
    onRecord,
    supervise: (next) => {
      supervisor = next;
    },
  };

  // ---- rebuilds
  const rebuild = createRebuild({
    eventStore,
    registry,
    generations,
    staging: options.staging,
    pollMs: options.pollMs,
    ...(options.switchTimeoutMs !== undefined ? { switchTimeoutMs: options.switchTimeoutMs } : {}),
    isLocalProjectorRunning: () => projectorRunning,
    ...(options.isProjectorRunning !== undefined ? { isProjectorRunning: options.isProjectorRunning } : {}),
    now,
    onRecord,
  });

  const close = async (): Promise<void> => {
    if (closed) return;
    closed = true;
    unwatch();
    await generations.close();
    await registry.close();
  };

  return {
    readStore: generations.readStore,
    generation: generations.served,
    startProjector: async (projections, projectorOptions) => {
      const projector = await startGenerationalProjector(projectorContext, projections, projectorOptions);
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
  let resumeIndexing = (): void => undefined;
  const readModels = await openReadModels({
    eventStore,
    registry: createMemoryGenerationRegistry(),
    openStore: async (generation) => {
      const store = createMemoryReadStore(generation === 0 ? initial : undefined);
      // The start's replay indexes each document once, when the projector has caught up (or at a first query before).
      if (generation === 0) resumeIndexing = store.deferIndexing();
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
  return {
    ...readModels,
    startProjector: async (projections, options) => {
      const projector = await readModels.startProjector(projections, options);
      // Caught up, failed or stopped: from then on each write indexes at once, as a live store does.
      void projector.caughtUp.then(() => resumeIndexing());
      void projector.done.catch(() => undefined).finally(() => resumeIndexing());
      return projector;
    },
    exportServed: () => opened.get(readModels.generation())?.exportState() ?? null,
  };
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
