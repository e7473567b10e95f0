import type { RecordedEvent } from '../infra/eventstore/port';
import type { ReadDoc, ReadStore } from '../infra/readstore/port';

/**
 * A read model fed by events. `apply` must be idempotent: it writes documents through
 * the store's guard (the event's global position), so an event applied twice changes nothing.
 */
export interface Projection {
  readonly name: string;
  /** Stream name prefixes whose events this projection reads, e.g. `user-`. */
  readonly streamPrefixes: readonly string[];
  /** Declares indexes; called once before the first event. */
  init(store: ReadStore): Promise<void>;
  apply(event: RecordedEvent, store: ReadStore): Promise<void>;
}

/** A guard that orders like the global position: zero-padded so strings compare as numbers. */
export function positionGuard(event: RecordedEvent): string {
  return `${event.position.commit.toString().padStart(20, '0')}:${event.position.prepare.toString().padStart(20, '0')}`;
}

export interface DocumentProjectionSpec<T extends ReadDoc> {
  readonly name: string;
  readonly collection: string;
  readonly streamPrefixes: readonly string[];
  /** Ids of the documents this event touches (none when it does not concern this model). */
  readonly ids: (event: RecordedEvent) => readonly string[];
  /** Pure: the document after the event, or null when the event removes it. */
  readonly evolve: (doc: T | null, event: RecordedEvent, id: string) => T | null;
  readonly indexes?: ReadonlyArray<{ fields: ReadonlyArray<{ field: string; order: 'asc' | 'desc' }>; unique?: boolean }>;
}

/** The common shape: per document a pure evolve, written whole through the guard. */
export function documentProjection<T extends ReadDoc>(spec: DocumentProjectionSpec<T>): Projection {
  return {
    name: spec.name,
    streamPrefixes: spec.streamPrefixes,
    async init(store) {
      const collection = store.collection<T>(spec.collection);
      for (const index of spec.indexes ?? []) await collection.ensureIndex(index.fields, { unique: index.unique ?? false });
    },
    async apply(event, store) {
      const ids = spec.ids(event);
      if (ids.length === 0) return;
      const collection = store.collection<T>(spec.collection);
      const guard = positionGuard(event);
      for (const id of ids) {
        const current = await collection.get(id);
        const next = spec.evolve(current, event, id);
        if (next === null) {
          if (current !== null) await collection.remove(id, guard);
        } else if (next !== current) {
          await collection.put(next, guard);
        }
      }
    },
  };
}
