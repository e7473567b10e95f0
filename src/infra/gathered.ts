import type { ReadCollection, ReadDoc } from './readstore/port';

/** Keys read together by one gathered read, at most (a bound on one query's size). */
export const GATHERED_MAX_KEYS = 256;

/**
 * Reads of one value by key, gathered over one turn of the event loop and made as one read of
 * many (`readMany`: a single `$in` query on MongoDB). Made for reads that come in crowds from
 * unrelated callers: after a process dies, its hubs reconnect to the others by the thousand,
 * and each handshake reads its device's presence and data key; one query each was a round
 * trip, a command to write and a cursor to build per hub, on both sides. Every caller gets
 * what its key's entry in the batch's answer is (absent: null); a failed batch fails each of
 * its callers with the same error. A read is never held longer than the turn it was asked in.
 */
export function gathered<V>(readMany: (keys: readonly string[]) => Promise<ReadonlyMap<string, V>>, maxKeys = GATHERED_MAX_KEYS): (key: string) => Promise<V | null> {
  interface Waiter {
    readonly resolve: (value: V | null) => void;
    readonly reject: (error: unknown) => void;
  }
  let gathering: Map<string, Waiter[]> | null = null;

  const read = async (batch: Map<string, Waiter[]>): Promise<void> => {
    try {
      const found = await readMany([...batch.keys()]);
      for (const [key, waiters] of batch) {
        const value = found.get(key) ?? null;
        for (const waiter of waiters) waiter.resolve(value);
      }
    } catch (error) {
      for (const waiters of batch.values()) for (const waiter of waiters) waiter.reject(error);
    }
  };

  return (key) =>
    new Promise<V | null>((resolve, reject) => {
      let batch = gathering;
      if (batch === null || (batch.size >= maxKeys && !batch.has(key))) {
        const started = new Map<string, Waiter[]>();
        gathering = batch = started;
        setImmediate(() => {
          if (gathering === started) gathering = null;
          void read(started);
        });
      }
      const waiters = batch.get(key);
      if (waiters === undefined) batch.set(key, [{ resolve, reject }]);
      else waiters.push({ resolve, reject });
    });
}

/** `get` of a read-model collection, gathered (`gathered`): the reads of one turn are one `getMany`. */
export function gatheredGet<T extends ReadDoc>(collection: () => ReadCollection<T>, maxIds = GATHERED_MAX_KEYS): (id: string) => Promise<T | null> {
  return gathered(async (ids) => {
    const found = await collection().getMany(ids);
    const docs = new Map<string, T>();
    for (const [id, guarded] of found) docs.set(id, guarded.doc);
    return docs;
  }, maxIds);
}
