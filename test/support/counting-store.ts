import type { DocChange, ReadCollection, ReadDoc, ReadStore } from '../../src/infra/readstore/port';

/**
 * A read store as it is, counting the calls a batched projector makes (getMany, writeMany,
 * checkpoints); `failWrite` may make a writeMany throw after writing part of its changes,
 * as a crash in the middle of a batch would; `beforeWrite` is awaited before each writeMany
 * (a store that stops answering).
 */
export interface Calls {
  getMany: number;
  writeMany: number;
  checkpoints: number;
  /** Changes per writeMany call, in order. */
  readonly batches: number[];
}

export function counted(
  inner: ReadStore,
  calls: Calls,
  failWrite?: (collection: string, changes: ReadonlyArray<DocChange<ReadDoc>>) => number | null,
  beforeWrite?: () => Promise<void>,
): ReadStore {
  return {
    collection: <T extends ReadDoc>(name: string): ReadCollection<T> => {
      const c = inner.collection<T>(name);
      return {
        get: (id) => c.get(id),
        getGuard: (id) => c.getGuard(id),
        find: (query) => c.find(query),
        count: (where) => c.count(where),
        put: (doc, guard) => c.put(doc, guard),
        remove: (id, guard) => c.remove(id, guard),
        load: (entries) => c.load(entries),
        ensureIndex: (fields, options) => c.ensureIndex(fields, options),
        clear: () => c.clear(),
        getMany: (ids) => {
          calls.getMany++;
          return c.getMany(ids);
        },
        writeMany: async (changes) => {
          calls.writeMany++;
          calls.batches.push(changes.length);
          await beforeWrite?.();
          const cut = failWrite?.(name, changes as ReadonlyArray<DocChange<ReadDoc>>) ?? null;
          if (cut === null) return c.writeMany(changes);
          await c.writeMany(changes.slice(0, cut));
          throw new Error('crash in the middle of a batch');
        },
      };
    },
    getCheckpoint: (name) => inner.getCheckpoint(name),
    setCheckpoint: (name, value) => {
      calls.checkpoints++;
      return inner.setCheckpoint(name, value);
    },
    advanceCheckpoint: (name, value, guard) => {
      calls.checkpoints++;
      return inner.advanceCheckpoint(name, value, guard);
    },
    ping: () => inner.ping(),
    close: () => inner.close(),
  };
}

export const newCalls = (): Calls => ({ getMany: 0, writeMany: 0, checkpoints: 0, batches: [] });
