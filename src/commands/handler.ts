import { randomUUID } from 'node:crypto';
import type { Actor, Command, Decider, DomainEvent, EventMetadata } from '../domain/messages';
import { ConflictError } from '../domain/errors';
import {
  type AppendResult,
  type EventStore,
  type ExpectedRevision,
  type GlobalPosition,
  type NewEvent,
  type ReadStreamOptions,
  WrongExpectedRevisionError,
} from '../infra/eventstore/port';
import { passedSnapshotPoint, type SnapshotStore } from './snapshots';

/** Who asked, and on behalf of which request: becomes the metadata of every event appended. */
export interface CommandContext {
  readonly actor: Actor;
  readonly requestId: string;
  readonly correlationId: string;
  /** Id of the command; also the causationId of the events it produces. */
  readonly commandId: string;
}

export interface Clock {
  now(): Date;
}

export const systemClock: Clock = { now: () => new Date() };

export function newCommandContext(actor: Actor, requestId: string): CommandContext {
  return { actor, requestId, correlationId: requestId, commandId: randomUUID() };
}

export interface HandledCommand<State, E extends DomainEvent> {
  readonly state: State;
  readonly events: readonly E[];
  /** Revision of the stream after the command (-1n when the stream is still empty). */
  readonly revision: bigint;
  /** Position of the last appended event, or null when the command appended nothing. */
  readonly position: GlobalPosition | null;
}

/** A folded stream: its state and the revision of the last event folded into it. */
export interface FoldedStream<State> {
  readonly state: State;
  readonly revision: bigint;
}

/** Revisions below this are handed out as one shared bigint each (see `sharedRevision`). */
export const SHARED_REVISIONS = 4096;
const SHARED_BELOW = BigInt(SHARED_REVISIONS);
const revisions = new Array<bigint | undefined>(SHARED_REVISIONS).fill(undefined);

/**
 * The one bigint of this value, for a revision below `SHARED_REVISIONS`; any other as it is.
 * Each bigint the event store hands out is an object of its own (24 bytes): a fold kept for
 * every connected device, or a session that notes the revision it was checked at, would
 * otherwise hold a copy each of the same few small numbers. At most `SHARED_REVISIONS` of them
 * are ever made (128 KB), only as revisions that high are seen.
 */
export function sharedRevision(revision: bigint): bigint {
  if (revision < 0n || revision >= SHARED_BELOW) return revision;
  const index = Number(revision);
  const known = revisions[index];
  if (known !== undefined) return known;
  revisions[index] = revision;
  return revision;
}

/**
 * Folded states by stream name. Streams are append-only, so a cached fold plus the events
 * appended since is the current state: a command then reads only those events, not the
 * whole stream. Safe across processes (another process's appends are simply read).
 */
export interface StateCache<State> {
  get(streamName: string): FoldedStream<State> | undefined;
  set(streamName: string, folded: FoldedStream<State>): void;
  /** Drops a fold that may be stale (the stream changed elsewhere): the next use reads it. */
  forget(streamName: string): void;
}

/**
 * A cache that forgets the least recently used stream beyond `maxEntries`. `keep` is what is
 * kept of a fold given to `set` (the fold itself when it has nothing to leave out; e.g. a
 * deleted device without its personal data, src/privacy/kept-folds.ts).
 */
export function createStateCache<State>(maxEntries: number, keep: (folded: FoldedStream<State>) => FoldedStream<State> = (folded) => folded): StateCache<State> {
  const entries = new Map<string, FoldedStream<State>>();
  return {
    get(streamName) {
      const folded = entries.get(streamName);
      if (folded !== undefined) {
        entries.delete(streamName);
        entries.set(streamName, folded);
      }
      return folded;
    },
    set(streamName, folded) {
      const known = entries.get(streamName);
      if (known !== undefined && known.revision > folded.revision) return;
      entries.delete(streamName);
      entries.set(streamName, keep(folded));
      if (entries.size > maxEntries) entries.delete(entries.keys().next().value as string);
    },
    forget(streamName) {
      entries.delete(streamName);
    },
  };
}

export interface HandleOptions<State = unknown> {
  /** How many times to re-read and re-decide after a concurrent append. */
  readonly maxRetries?: number;
  /** Start from a cached fold and read only the events appended since. */
  readonly cache?: StateCache<State>;
  /** Without a cached fold, start from the stream's newest snapshot; write one every `every` events. */
  readonly snapshots?: SnapshotStore<State>;
  /**
   * Called with the state a decision was made on and its revision (-1: no stream), before its
   * events are appended (again at each retry, with the newer state): what must hold before the
   * append (a reservation claimed for the value the events set) is made to hold for exactly
   * that state. A rejection ends the command.
   */
  readonly beforeAppend?: (state: State, revision: bigint) => Promise<void>;
}

export function eventMetadata(ctx: CommandContext, occurredAt: string): EventMetadata {
  return {
    occurredAt,
    actor: ctx.actor,
    requestId: ctx.requestId,
    causationId: ctx.commandId,
    correlationId: ctx.correlationId,
  };
}

export function toNewEvents(events: readonly DomainEvent[], ctx: CommandContext, occurredAt: string): NewEvent[] {
  const metadata = eventMetadata(ctx, occurredAt);
  return events.map((e) => ({ id: randomUUID(), type: e.type, data: e.data, metadata }));
}

/** What folding a stream takes: a decider's `initialState`, `evolve` and, if it has one, `evolveAll`. */
export type Fold<State, E extends DomainEvent> = Pick<Decider<State, Command, E>, 'initialState' | 'evolve' | 'evolveAll'>;

/** Events folded at once by a decider's `evolveAll` (bounds what a long stream's fold holds). */
const FOLD_BATCH = 512;

/**
 * Reads a stream and folds it; returns the state and the stream's revision (-1n when empty).
 * Given an earlier fold of the same stream (`from`), reads only the events after it. Without
 * one, given snapshots (src/commands/snapshots.ts): a stream shorter than their interval
 * (which has none) is read whole in one call, as without; a longer one goes on from its
 * newest snapshot. A store that knows a stream's length (`streamEnd`: the embedded log) goes
 * there at once, so a cold fold reads the snapshot and fewer than the interval's events;
 * others first read the interval's first events to learn it is long (fewer than twice).
 */
export async function foldStream<State, E extends DomainEvent>(
  store: EventStore,
  fold: Fold<State, E>,
  streamName: string,
  options: { readonly from?: FoldedStream<State>; readonly snapshots?: SnapshotStore<State> } = {},
): Promise<FoldedStream<State>> {
  const { from, snapshots } = options;
  let state = from?.state ?? fold.initialState();
  let revision = from?.revision ?? -1n;
  const evolveAll = fold.evolveAll;
  const read = async (readOptions: ReadStreamOptions): Promise<number> => {
    let count = 0;
    const batch: E[] = [];
    for await (const recorded of store.readStream(streamName, readOptions)) {
      const event = { type: recorded.type, data: recorded.data } as E;
      if (evolveAll === undefined) state = fold.evolve(state, event);
      else if (batch.push(event) === FOLD_BATCH) state = evolveAll(state, batch.splice(0));
      revision = recorded.revision;
      count++;
    }
    if (evolveAll !== undefined && batch.length > 0) state = evolveAll(state, batch);
    return count;
  };
  if (from === undefined && snapshots !== undefined) {
    // A store that knows the stream's length says whether it is long; others are asked by reading its first events.
    const end = store.streamEnd?.(streamName);
    const long = end !== undefined ? end >= snapshots.every : (await read({ maxCount: snapshots.every })) >= snapshots.every;
    if (end === undefined && !long) return { state, revision: sharedRevision(revision) };
    if (long) {
      const snapshot = await snapshots.load(streamName);
      if (snapshot !== null && snapshot.revision > revision) ({ state, revision } = snapshot);
    }
  }
  await read(revision >= 0n ? { fromRevision: revision + 1n } : {});
  // Nothing new since the fold it started from: that fold itself, not a copy (it is kept in caches).
  if (from !== undefined && revision === from.revision) return from;
  return { state, revision: sharedRevision(revision) };
}

/** `foldStream` with a decider's `evolve` and `initialState` given one by one. */
export function loadAggregate<State, E extends DomainEvent>(
  store: EventStore,
  evolve: (state: State, event: E) => State,
  initialState: () => State,
  streamName: string,
  from?: FoldedStream<State>,
  snapshots?: SnapshotStore<State>,
): Promise<FoldedStream<State>> {
  return foldStream(store, { evolve, initialState }, streamName, { from, snapshots });
}

/**
 * The one command handler: read the stream, fold, decide, append with the expected
 * revision. On a concurrent append it starts over, a bounded number of times, then
 * answers 409. `decide` may throw domain errors; they pass through untouched.
 */
export async function handleCommand<State, C extends Command, E extends DomainEvent>(
  store: EventStore,
  decider: Decider<State, C, E>,
  streamName: string,
  command: C,
  ctx: CommandContext,
  clock: Clock,
  options: HandleOptions<State> = {},
): Promise<HandledCommand<State, E>> {
  const maxRetries = options.maxRetries ?? 10;
  const cache = options.cache;
  for (let attempt = 0; ; attempt++) {
    const current = await foldStream(store, decider, streamName, { from: cache?.get(streamName), snapshots: options.snapshots });
    const { state, revision } = current;
    if (revision >= 0n) cache?.set(streamName, current);
    const events = decider.decide(command, state);
    if (events.length === 0) return { state, events, revision, position: null };

    await options.beforeAppend?.(state, revision);
    const expected: ExpectedRevision = revision < 0n ? 'no_stream' : revision;
    const snapshots = options.snapshots;
    // What the snapshot due after this append needs and may not make once it is written (src/commands/snapshots.ts).
    const snapshotReady = snapshots !== undefined && passedSnapshotPoint(revision, revision + BigInt(events.length), snapshots.every) && (await (snapshots.prepare?.(streamName) ?? true));
    let result: AppendResult;
    try {
      result = await store.append(streamName, toNewEvents(events, ctx, clock.now().toISOString()), expected);
    } catch (error) {
      if (error instanceof WrongExpectedRevisionError && attempt < maxRetries) {
        // Jittered backoff, so writers that collided do not collide again in lockstep.
        await new Promise((resolve) => setTimeout(resolve, Math.random() * 2 ** Math.min(attempt, 6)));
        continue;
      }
      if (error instanceof WrongExpectedRevisionError) {
        throw new ConflictError('The resource was changed concurrently, please retry');
      }
      throw error;
    }
    const newState = decider.evolveAll?.(state, events) ?? events.reduce(decider.evolve, state);
    const folded = { state: newState, revision: sharedRevision(result.nextExpectedRevision) };
    cache?.set(streamName, folded);
    // The fold up to the revision just written (the append succeeded against the revision it was folded from).
    if (snapshotReady && passedSnapshotPoint(revision, folded.revision, snapshots.every)) {
      await snapshots.save(streamName, folded, ctx, clock.now().toISOString());
    }
    return { state: newState, events, revision: folded.revision, position: result.position };
  }
}
