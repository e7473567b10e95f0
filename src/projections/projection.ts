import type { GlobalPosition, RecordedEvent } from '../infra/eventstore/port';
import type { DocChange, ReadDoc, ReadStore } from '../infra/readstore/port';

/**
 * A read model fed by events. `applyBatch` must be idempotent: it writes documents through
 * the store's guard (the event's global position), so an event applied twice changes nothing,
 * and a batch applied again after a crash (some collections written, the checkpoint not)
 * changes nothing either.
 */
export interface Projection {
  readonly name: string;
  /** Stream name prefixes whose events this projection reads, e.g. `user-`. */
  readonly streamPrefixes: readonly string[];
  /** Declares indexes; called once before the first event. */
  init(store: ReadStore): Promise<void>;
  /** Applies events of its streams, in log order (one event is a batch of one). */
  applyBatch(events: readonly RecordedEvent[], store: ReadStore): Promise<void>;
}

/** A guard that orders like the global position: zero-padded so strings compare as numbers. */
export function positionGuard(event: RecordedEvent): string {
  return positionOrder(event.position);
}

/** A global position as a string that compares like it. */
export function positionOrder(position: GlobalPosition): string {
  return `${position.commit.toString().padStart(20, '0')}:${position.prepare.toString().padStart(20, '0')}`;
}

export interface DocumentProjectionSpec<T extends ReadDoc> {
  readonly name: string;
  readonly collection: string;
  readonly streamPrefixes: readonly string[];
  /** Ids of the documents this event touches (none when it does not concern this model). */
  readonly ids: (event: RecordedEvent) => readonly string[];
  /** Pure: the document after the event, or null when the event removes it. */
  readonly evolve: (doc: T | null, event: RecordedEvent, id: string) => T | null;
  /**
   * Whether the event removes the document: its tombstone is written even when the document
   * is not there to remove (a projector that lost its lease may still be writing it).
   */
  readonly removes?: (event: RecordedEvent) => boolean;
  readonly indexes?: ReadonlyArray<{ fields: ReadonlyArray<{ field: string; order: 'asc' | 'desc' }>; unique?: boolean }>;
}

/** The events of a batch that touch each document, in order, with their guards. */
function eventsById<T extends ReadDoc>(spec: DocumentProjectionSpec<T>, events: readonly RecordedEvent[]): Map<string, Array<{ event: RecordedEvent; guard: string }>> {
  const touched = new Map<string, Array<{ event: RecordedEvent; guard: string }>>();
  for (const event of events) {
    const ids = spec.ids(event);
    if (ids.length === 0) continue;
    const guard = positionGuard(event);
    for (const id of ids) {
      let list = touched.get(id);
      if (list === undefined) touched.set(id, (list = []));
      list.push({ event, guard });
    }
  }
  return touched;
}

/**
 * The change a batch makes to one document: its events after the stored guard folded over
 * the stored document, written with the guard of the last event that changed it (as one
 * event at a time would have left it). Null when nothing changes.
 */
function changeOf<T extends ReadDoc>(
  spec: DocumentProjectionSpec<T>,
  id: string,
  stored: { readonly doc: T; readonly guard: string } | undefined,
  touching: ReadonlyArray<{ event: RecordedEvent; guard: string }>,
): DocChange<T> | null {
  let doc: T | null = stored?.doc ?? null;
  let changedBy: string | null = null;
  for (const { event, guard } of touching) {
    // Already in the stored document: a batch applied again after a crash skips it.
    if (stored !== undefined && guard <= stored.guard) continue;
    const next = spec.evolve(doc, event, id);
    if (next !== doc || (next === null && spec.removes?.(event) === true)) changedBy = guard;
    doc = next;
  }
  if (changedBy === null) return null;
  // Removed: a tombstone, even for a document created and removed within the batch.
  if (doc === null) return { kind: 'remove', id, guard: changedBy };
  return { kind: 'put', doc, guard: changedBy };
}

/**
 * The common shape: per document a pure evolve, written whole through the guard. A batch
 * reads each document it touches once (one `getMany`) and writes every change with one
 * `writeMany`.
 */
export function documentProjection<T extends ReadDoc>(spec: DocumentProjectionSpec<T>): Projection {
  return {
    name: spec.name,
    streamPrefixes: spec.streamPrefixes,
    async init(store) {
      const collection = store.collection<T>(spec.collection);
      for (const index of spec.indexes ?? []) await collection.ensureIndex(index.fields, { unique: index.unique ?? false });
    },
    async applyBatch(events, store) {
      const touched = eventsById(spec, events);
      if (touched.size === 0) return;
      const collection = store.collection<T>(spec.collection);
      const stored = await collection.getMany([...touched.keys()]);
      const changes: Array<DocChange<T>> = [];
      for (const [id, touching] of touched) {
        const change = changeOf(spec, id, stored.get(id), touching);
        if (change !== null) changes.push(change);
      }
      await collection.writeMany(changes);
    },
  };
}
