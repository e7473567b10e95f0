/**
 * The stores of the read-model generations one process uses (read-models.ts): each opened
 * once, the served one behind the switchable store that queries read, and those no longer
 * served, projected into or rebuilt closed after a delay (queries may still be in flight).
 */
import type { ReadStore } from '../infra/readstore/port';
import { switchableReadStore } from './read-store-wrappers';

export interface GenerationStores {
  /** What every query reads: the store of the served generation, whichever that is at the moment. */
  readonly readStore: ReadStore;
  /** The generation this process serves now. */
  readonly served: () => number;
  /** The store of a generation, opened on its first use (a failed open is tried again at the next). */
  readonly storeFor: (generation: number) => Promise<ReadStore>;
  /** Serves this generation from now on (in turn with earlier calls; none once closed). */
  readonly serve: (generation: number) => Promise<void>;
  /** Generations the live projector of this process writes to (kept open). */
  readonly setProjecting: (generations: readonly number[]) => void;
  /** A generation a rebuild in this process is filling (kept open until `clearBuilding`). */
  readonly addBuilding: (generation: number) => void;
  readonly clearBuilding: () => void;
  /** Closes, after the delay, the stores of generations nothing in this process uses any more. */
  readonly retireUnused: () => void;
  /** Waits for the serving in progress, then closes every store at once. */
  readonly close: () => Promise<void>;
}

export interface GenerationStoresOptions {
  /** Opens the store of one generation (called once per generation and process). */
  readonly openStore: (generation: number) => Promise<ReadStore>;
  /** The generation served first. */
  readonly initial: number;
  /** Close a store this process stopped using only after this delay (in-flight queries). */
  readonly retireDelayMs: number;
  /** What closing the read store (`readStore.close()`) does. */
  readonly onClose: () => Promise<void>;
}

export async function openGenerationStores(options: GenerationStoresOptions): Promise<GenerationStores> {
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

  let served = options.initial;
  let closed = false;
  const switchable = switchableReadStore(await storeFor(served), options.onClose);
  let servingChain: Promise<void> = Promise.resolve();
  let projecting: readonly number[] = [];
  const building = new Set<number>();

  const retireUnused = (): void => {
    for (const generation of [...stores.keys()]) {
      if (generation === served || projecting.includes(generation) || building.has(generation)) continue;
      const store = stores.get(generation);
      stores.delete(generation);
      const timer = setTimeout(() => {
        store?.then((s) => s.close()).catch(() => undefined);
      }, options.retireDelayMs);
      timer.unref();
    }
  };

  const serve = (generation: number): Promise<void> => {
    servingChain = servingChain
      .then(async () => {
        if (closed || generation === served) return;
        switchable.use(await storeFor(generation));
        served = generation;
        retireUnused();
      })
      .catch(() => undefined);
    return servingChain;
  };

  const close = async (): Promise<void> => {
    closed = true;
    await servingChain;
    const opened = [...stores.values()];
    stores.clear();
    await Promise.all(opened.map((store) => store.then((s) => s.close()).catch(() => undefined)));
  };

  return {
    readStore: switchable.store,
    served: () => served,
    storeFor,
    serve,
    setProjecting: (generations) => {
      projecting = generations;
    },
    addBuilding: (generation) => {
      building.add(generation);
    },
    clearBuilding: () => {
      building.clear();
    },
    retireUnused,
    close,
  };
}
