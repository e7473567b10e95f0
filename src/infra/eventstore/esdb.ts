import {
  BACKWARDS,
  END,
  EventStoreDBClient,
  FORWARDS,
  START,
  StreamNotFoundError,
  WrongExpectedVersionError,
  excludeSystemEvents,
  jsonEvent,
  streamNameFilter,
  type AllStreamResolvedEvent,
  type AllStreamSubscription,
  type JSONType,
  type Position,
  type ResolvedEvent,
  type StreamingRead,
} from '@eventstore/db-client';
import { Readable } from 'node:stream';
import type { EventMetadata } from '../../domain/messages';
import {
  comparePositions,
  type AppendResult,
  type EventStore,
  type ExpectedRevision,
  type GlobalPosition,
  type NewEvent,
  type ReadStreamOptions,
  type RecordedEvent,
  type SubscribeOptions,
  type Subscription,
  type SubscriptionItem,
  WrongExpectedRevisionError,
} from './port';
import { isStoredMetadata, restoreMetadata, trimMetadata } from './stored-metadata';

type ClientRecordedEvent = NonNullable<ResolvedEvent['event']>;

/** Pushed into the client's subscription stream, in order, where the server said "caught up". */
const CAUGHT_UP_MARKER = Object.freeze({ caughtUpMarker: true });
type CaughtUpMarker = typeof CAUGHT_UP_MARKER;

const HEAD_PAGE_SIZE = 100;

function isSystem(streamName: string, type: string): boolean {
  return streamName.startsWith('$') || type.startsWith('$');
}

function toPosition(position: Position): GlobalPosition {
  return { commit: position.commit, prepare: position.prepare };
}

function toRecordedEvent(event: ClientRecordedEvent): RecordedEvent {
  const position = 'position' in event && event.position !== undefined ? toPosition(event.position) : null;
  if (position === null) throw new Error(`Event ${event.id} in ${event.streamId} came without a position`);
  return {
    id: event.id,
    streamName: event.streamId,
    revision: event.revision,
    position,
    type: event.type,
    data: event.data,
    metadata: toEventMetadata(event),
  };
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !(value instanceof Uint8Array) && !Array.isArray(value);
}

/** Metadata is stored trimmed (see stored-metadata.ts); older events carry all of it, which reads the same. */
function toEventMetadata(event: ClientRecordedEvent): EventMetadata {
  if (!isRecord(event.metadata) || !isStoredMetadata(event.metadata)) {
    throw new Error(`Event ${event.id} (${event.streamId}@${event.revision}) has no valid event metadata`);
  }
  return restoreMetadata(event.metadata);
}

/** Reads of at most this many events are drained rather than cancelled when left early. */
const DRAIN_LIMIT = 1000;

/**
 * Yields a client read; when left early (break, return, error), ends the gRPC call so that
 * nothing stays open: the client pipes the call into the read, and once the read is destroyed
 * an unfinished call is paused forever (and `client.dispose()` would wait for it).
 *
 * A `bounded` read (at most DRAIN_LIMIT events) is drained to its end, never cancelled: every
 * cancel resets an HTTP/2 stream, and HTTP/2 servers may close a connection whose client
 * resets streams in bulk ("rapid reset" mitigations, CVE-2023-44487). Under the stand-in
 * (nghttp2) a few thousand `maxCount: 1` reads left after their event brought the client's
 * session down.
 */
async function* consume<T>(read: StreamingRead<T>, bounded = false): AsyncGenerator<T> {
  let source: Readable | undefined;
  /** The call has its status: it is over, whatever is still buffered. */
  let finished = false;
  const onPipe = (...args: unknown[]): void => {
    const [piped] = args;
    if (piped instanceof Readable) {
      source = piped;
      piped.once('status', () => {
        finished = true;
      });
    }
  };
  read.once('pipe', onPipe);
  let completed = false;
  let failed = false;
  try {
    for await (const item of read) yield item;
    completed = true;
  } catch (error) {
    // The read failed by itself (e.g. stream not found): its call ends on its own.
    failed = true;
    throw error;
  } finally {
    read.off('pipe', onPipe);
    if (!completed) {
      // Nobody iterates any more: a late error must not become an unhandled 'error' event.
      read.on('error', () => undefined);
      // Only a long read still streaming is cancelled; see above.
      if (!failed && !finished && !bounded) await read.cancel().catch(() => undefined);
      // A call already answered drains to its end. Unpipe first: a source left without
      // destinations is paused by Node, which would otherwise undo the resume a tick later.
      source?.unpipe();
      source?.resume();
    }
  }
}

/**
 * The event store port over EventStoreDB / KurrentDB through `@eventstore/db-client` 6.x.
 * Events are JSON with JSON metadata. Positions are the server's $all positions.
 */
export function createEsdbEventStore(connectionString: string): EventStore {
  const client = EventStoreDBClient.connectionString(connectionString);
  const openSubscriptions = new Set<Subscription>();
  let closed = false;

  /** Position of the newest record of any kind in $all (system events included). */
  async function newestLogPosition(): Promise<GlobalPosition | null> {
    for await (const resolved of consume(client.readAll({ direction: BACKWARDS, fromPosition: END, maxCount: 1 }), true)) {
      if (resolved.event !== undefined) return toPosition(resolved.event.position);
    }
    return null;
  }

  /** The $all position of one event of a stream (for appends the server answered without one). */
  async function positionOfRevision(streamName: string, revision: bigint): Promise<GlobalPosition | null> {
    const read = client.readStream(streamName, { direction: BACKWARDS, fromRevision: revision, maxCount: 1 });
    try {
      for await (const resolved of consume(read, true)) {
        if (resolved.event !== undefined && resolved.event.revision === revision) return toRecordedEvent(resolved.event).position;
      }
    } catch (error) {
      if (!(error instanceof StreamNotFoundError)) throw error;
    }
    return null;
  }

  async function append(streamName: string, events: readonly NewEvent[], expected: ExpectedRevision): Promise<AppendResult> {
    if (events.length === 0) throw new Error('An append needs at least one event');
    try {
      const result = await client.appendToStream(
        streamName,
        events.map((e) => jsonEvent({ id: e.id, type: e.type, data: e.data as JSONType, metadata: trimMetadata(e.metadata) as unknown as JSONType })),
        { expectedRevision: expected },
      );
      // The server answers {commit: last event, prepare: first event}; the last event's own
      // $all position is {commit, commit}. A retried (idempotent) append has no position.
      const position =
        result.position !== undefined
          ? { commit: result.position.commit, prepare: result.position.commit }
          : ((await positionOfRevision(streamName, result.nextExpectedRevision)) ?? { commit: 0n, prepare: 0n });
      return { nextExpectedRevision: result.nextExpectedRevision, position };
    } catch (error) {
      if (error instanceof WrongExpectedVersionError) {
        const actual = error.actualVersion;
        throw new WrongExpectedRevisionError(streamName, expected, typeof actual === 'bigint' ? actual : 'no_stream');
      }
      throw error;
    }
  }

  async function* readStream(streamName: string, options: ReadStreamOptions = {}): AsyncGenerator<RecordedEvent> {
    if (options.maxCount !== undefined && options.maxCount <= 0) return;
    const backwards = options.direction === 'backwards';
    const read = client.readStream(streamName, {
      direction: backwards ? BACKWARDS : FORWARDS,
      fromRevision: options.fromRevision ?? (backwards ? END : START),
      ...(options.maxCount !== undefined ? { maxCount: options.maxCount } : {}),
    });
    try {
      for await (const resolved of consume(read, options.maxCount !== undefined && options.maxCount <= DRAIN_LIMIT)) {
        if (resolved.event !== undefined) yield toRecordedEvent(resolved.event);
      }
    } catch (error) {
      if (error instanceof StreamNotFoundError) return;
      throw error;
    }
  }

  function subscribe(options: SubscribeOptions = {}): Subscription {
    const prefixes = options.streamPrefixes === undefined ? undefined : [...options.streamPrefixes];
    const fromPosition = options.fromPosition;
    let subscriptionClosed = false;
    let esSubscription: AllStreamSubscription | undefined;
    let iterator: AsyncGenerator<SubscriptionItem> | undefined;

    const wanted = (event: ClientRecordedEvent): boolean =>
      !isSystem(event.streamId, event.type) &&
      (prefixes === undefined || prefixes.some((prefix) => event.streamId.startsWith(prefix)));

    async function* run(): AsyncGenerator<SubscriptionItem> {
      // Servers before 23.10 never send CaughtUp: then history counts as replayed once an
      // event or checkpoint at or past the log's head at subscription time has been seen.
      const headAtStart = await newestLogPosition();
      if (subscriptionClosed) return;
      let caughtUpSignalled = false;
      let caughtUpYielded = false;
      const reachedHead = (position: GlobalPosition): boolean =>
        headAtStart !== null && comparePositions(position, headAtStart) >= 0;

      if (headAtStart === null || (fromPosition !== undefined && reachedHead(fromPosition))) {
        caughtUpSignalled = true;
        caughtUpYielded = true;
        yield { kind: 'caught-up' };
      }

      const pushMarker = (): void => {
        if (caughtUpSignalled || subscription.destroyed) return;
        caughtUpSignalled = true;
        // Behind every event the client has already pushed, ahead of every later one.
        subscription.push(CAUGHT_UP_MARKER);
      };
      const checkpointReached = (_: unknown, position: Position): Promise<void> => {
        if (reachedHead(position)) pushMarker();
        return Promise.resolve();
      };
      const filter =
        prefixes !== undefined && prefixes.length > 0
          ? streamNameFilter({ prefixes, checkpointReached })
          : excludeSystemEvents({ checkpointReached });
      const subscription = client.subscribeToAll({ fromPosition: fromPosition ?? START, filter });
      esSubscription = subscription;
      subscription.on('caughtUp', pushMarker);
      // Errors reach the consumer through the `for await` below; this only keeps one emitted
      // after the iteration ended (closed, or left early) from becoming an uncaught exception.
      subscription.on('error', () => undefined);

      try {
        const items = subscription as AsyncIterable<AllStreamResolvedEvent | CaughtUpMarker>;
        for await (const item of items) {
          if (subscriptionClosed) return;
          if (item === CAUGHT_UP_MARKER) {
            if (!caughtUpYielded) {
              caughtUpYielded = true;
              yield { kind: 'caught-up' };
            }
            continue;
          }
          const event = 'event' in item ? item.event : undefined;
          if (event === undefined) continue;
          const atHead = !caughtUpSignalled && reachedHead(event.position);
          if (wanted(event)) yield { kind: 'event', event: toRecordedEvent(event) };
          if (atHead && !caughtUpSignalled) {
            caughtUpSignalled = true;
            caughtUpYielded = true;
            yield { kind: 'caught-up' };
          }
        }
        if (!subscriptionClosed) throw new Error('EventStoreDB subscription ended unexpectedly');
      } catch (error) {
        if (subscriptionClosed) return;
        throw error;
      } finally {
        subscriptionClosed = true;
        openSubscriptions.delete(handle);
        await stopClientSubscription(subscription);
      }
    }

    const handle: Subscription = {
      [Symbol.asyncIterator]() {
        iterator ??= run();
        return iterator;
      },
      async close() {
        if (subscriptionClosed) return;
        subscriptionClosed = true;
        openSubscriptions.delete(handle);
        if (esSubscription !== undefined) await stopClientSubscription(esSubscription);
      },
    };
    openSubscriptions.add(handle);
    return handle;
  }

  async function stopClientSubscription(subscription: AllStreamSubscription): Promise<void> {
    if (subscription.destroyed) return;
    await subscription.unsubscribe().catch(() => undefined);
    // Ends a pending `for await` over it (the client does not end the stream on cancel).
    subscription.destroy();
  }

  async function setStreamMaxAge(streamName: string, maxAgeSeconds: number): Promise<void> {
    await client.setStreamMetadata(streamName, { maxAge: maxAgeSeconds });
  }

  async function headPosition(): Promise<GlobalPosition | null> {
    let cursor: GlobalPosition | null = null;
    for (;;) {
      const read = client.readAll({
        direction: BACKWARDS,
        fromPosition: cursor ?? END,
        maxCount: HEAD_PAGE_SIZE,
      });
      let progressed = false;
      let found: GlobalPosition | null = null;
      for await (const resolved of consume(read, true)) {
        const event = resolved.event;
        if (event === undefined) continue;
        const position = toPosition(event.position);
        if (cursor !== null && comparePositions(position, cursor) >= 0) continue;
        progressed = true;
        cursor = position;
        if (!isSystem(event.streamId, event.type)) {
          found = position;
          break;
        }
      }
      if (found !== null) return found;
      if (!progressed) return null;
    }
  }

  async function close(): Promise<void> {
    if (closed) return;
    closed = true;
    await Promise.allSettled([...openSubscriptions].map((s) => s.close()));
    await client.dispose();
  }

  return { append, readStream, subscribe, setStreamMaxAge, headPosition, close };
}
