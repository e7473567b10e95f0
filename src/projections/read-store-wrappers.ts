/**
 * Read stores that wrap other read stores, for the read-model generations (read-models.ts):
 * a switchable store, which queries read while the generation behind it changes, and a
 * recording store, which notes the collections a rebuild writes.
 */
import type { ReadCollection, ReadDoc, ReadStore } from '../infra/readstore/port';

/** A store whose queries go to whichever store it currently points at. */
export function switchableReadStore(initial: ReadStore, onClose: () => Promise<void>): { store: ReadStore; use: (store: ReadStore) => void } {
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
      advanceCheckpoint: (name, value, guard) => current.advanceCheckpoint(name, value, guard),
      ping: () => current.ping(),
      close: onClose,
    },
    use: (store) => {
      current = store;
    },
  };
}

/** A store that remembers which collections were used (to copy them after staging). */
export function recordingStore(inner: ReadStore, names: Set<string>): ReadStore {
  return {
    collection: <T extends ReadDoc>(name: string) => {
      names.add(name);
      return inner.collection<T>(name);
    },
    getCheckpoint: (name) => inner.getCheckpoint(name),
    setCheckpoint: (name, value) => inner.setCheckpoint(name, value),
    advanceCheckpoint: (name, value, guard) => inner.advanceCheckpoint(name, value, guard),
    ping: () => inner.ping(),
    close: () => inner.close(),
  };
}
