import type { Collection } from 'mongodb';
import { connectMongo } from '../mongo';

/**
 * Which generation of the read models is served. A rebuild fills a fresh generation (in
 * MongoDB: the same collections under a new prefix) while the current one keeps serving,
 * marks it `pending` once it has caught up, and the live projector completes the switch
 * (see src/projections/read-models.ts). Adapters: in process (embedded mode) and a small
 * document in MongoDB that every API process polls.
 */
export interface GenerationRecord {
  /** The generation every query is served from. */
  readonly generation: number;
  /** A rebuilt generation, caught up, waiting for the live projector to switch to it. */
  readonly pending: number | null;
  readonly switchedAt: string | null;
}

export interface GenerationRegistry {
  read(): Promise<GenerationRecord>;
  /** A generation number never handed out before, for a rebuild to fill. */
  reserve(): Promise<number>;
  /** Marks `to` pending, only when `from` is served and nothing is pending. */
  requestSwitch(from: number, to: number): Promise<boolean>;
  /** Serves `to`, only when `to` is pending. */
  completeSwitch(to: number, at: string): Promise<boolean>;
  /** Calls `listener` with the record whenever it changes (in this process at once, elsewhere by polling). */
  watch(listener: (record: GenerationRecord) => void): () => void;
  close(): Promise<void>;
}

/** Generation 0 is the unprefixed collections a service has always used; later ones are `g<n>_…`. */
export function generationPrefix(generation: number): string {
  return generation === 0 ? '' : `g${generation}_`;
}

const INITIAL: GenerationRecord = { generation: 0, pending: null, switchedAt: null };

/** Embedded mode: one process, so the record lives in memory and listeners hear of changes at once. */
export function createMemoryGenerationRegistry(): GenerationRegistry {
  let record = INITIAL;
  let reserved = 0;
  const listeners = new Set<(record: GenerationRecord) => void>();
  const set = (next: GenerationRecord): void => {
    record = next;
    for (const listener of [...listeners]) listener(record);
  };
  return {
    read: async () => record,
    reserve: async () => {
      reserved = Math.max(reserved, record.generation) + 1;
      return reserved;
    },
    requestSwitch: async (from, to) => {
      if (record.generation !== from || record.pending !== null) return false;
      set({ ...record, pending: to });
      return true;
    },
    completeSwitch: async (to, at) => {
      if (record.pending !== to) return false;
      set({ generation: to, pending: null, switchedAt: at });
      return true;
    },
    watch: (listener) => {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    close: async () => listeners.clear(),
  };
}

export const GENERATION_COLLECTION = 'readmodel_generation';
const RECORD_ID = 'current';

interface GenerationDoc {
  _id: string;
  generation: number;
  /** The collection prefix of `generation`, for whoever looks at the database. */
  prefix: string;
  pending: number | null;
  lastReserved: number;
  switchedAt: string | null;
}

function toRecord(doc: GenerationDoc | null): GenerationRecord {
  if (doc === null) return INITIAL;
  return { generation: doc.generation, pending: doc.pending ?? null, switchedAt: doc.switchedAt ?? null };
}

/**
 * Distributed mode: the document `{_id: 'current', generation, prefix, pending, …}` in the
 * unprefixed collection `readmodel_generation` of the read models' database. Every change is
 * a conditional update, so two processes can never both move it.
 */
export async function createMongoGenerationRegistry(
  uri: string,
  options: { readonly dbName?: string; readonly pollMs?: number } = {},
): Promise<GenerationRegistry> {
  const { client, db } = await connectMongo(uri, options.dbName);
  const collection: Collection<GenerationDoc> = db.collection<GenerationDoc>(GENERATION_COLLECTION);
  const pollMs = options.pollMs ?? 1000;
  const timers = new Set<NodeJS.Timeout>();

  const ensureDoc = async (): Promise<void> => {
    try {
      await collection.updateOne(
        { _id: RECORD_ID },
        { $setOnInsert: { generation: 0, prefix: generationPrefix(0), pending: null, lastReserved: 0, switchedAt: null } },
        { upsert: true },
      );
    } catch (error) {
      // Two first upserts raced: the document exists now, which is all this wanted.
      if (!(typeof error === 'object' && error !== null && 'code' in error && error.code === 11000)) throw error;
    }
  };

  return {
    read: async () => toRecord(await collection.findOne({ _id: RECORD_ID })),
    reserve: async () => {
      await ensureDoc();
      for (;;) {
        const doc = await collection.findOne({ _id: RECORD_ID });
        const current = doc?.lastReserved ?? 0;
        const next = Math.max(current, doc?.generation ?? 0) + 1;
        const result = await collection.updateOne({ _id: RECORD_ID, lastReserved: current }, { $set: { lastReserved: next } });
        if (result.modifiedCount === 1) return next;
      }
    },
    requestSwitch: async (from, to) => {
      await ensureDoc();
      const result = await collection.updateOne({ _id: RECORD_ID, generation: from, pending: null }, { $set: { pending: to } });
      return result.modifiedCount === 1;
    },
    completeSwitch: async (to, at) => {
      const result = await collection.updateOne(
        { _id: RECORD_ID, pending: to },
        { $set: { generation: to, prefix: generationPrefix(to), pending: null, switchedAt: at } },
      );
      return result.modifiedCount === 1;
    },
    watch: (listener) => {
      let last = '';
      let reading = false;
      const timer = setInterval(() => {
        if (reading) return;
        reading = true;
        collection
          .findOne({ _id: RECORD_ID })
          .then((doc) => {
            const record = toRecord(doc);
            const key = JSON.stringify(record);
            if (key !== last) {
              last = key;
              listener(record);
            }
          })
          .catch(() => undefined)
          .finally(() => {
            reading = false;
          });
      }, pollMs);
      timer.unref();
      timers.add(timer);
      return () => {
        clearInterval(timer);
        timers.delete(timer);
      };
    },
    close: async () => {
      for (const timer of timers) clearInterval(timer);
      timers.clear();
      await client.close();
    },
  };
}
