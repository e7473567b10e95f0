import type { EventStore, ReadStreamOptions, RecordedEvent } from '../../src/infra/eventstore/port';

/** An event store that counts, per stream, the reads asked for and the events they handed out. */
export interface CountedReads {
  readonly store: EventStore;
  /** Events handed out, by stream. */
  readonly read: Map<string, number>;
  /** Reads asked for, by stream. */
  readonly calls: Map<string, number>;
}

/**
 * `store` with its `append` or `readStream` replaced, every other call passed on as it is
 * (`streamEnd` too, unless `knowsLength` is false: a store that does not know stream lengths).
 */
export function wrapStore(store: EventStore, replaced: Partial<Pick<EventStore, 'append' | 'readStream'>>, knowsLength = true): EventStore {
  return {
    append: replaced.append ?? ((streamName, events, expected) => store.append(streamName, events, expected)),
    readStream: replaced.readStream ?? ((streamName, options) => store.readStream(streamName, options)),
    ...(knowsLength && store.streamEnd !== undefined ? { streamEnd: store.streamEnd } : {}),
    subscribe: (options) => store.subscribe(options),
    setStreamMaxAge: (streamName, seconds) => store.setStreamMaxAge(streamName, seconds),
    headPosition: () => store.headPosition(),
    close: () => store.close(),
  };
}

/**
 * `knowsLength`: whether the counting store passes on `streamEnd` (the embedded log's, without
 * I/O) when `store` has it; without it a fold learns a stream is long by reading it.
 */
export function countingReads(store: EventStore, knowsLength = true): CountedReads {
  const read = new Map<string, number>();
  const calls = new Map<string, number>();
  const bump = (map: Map<string, number>, key: string): void => void map.set(key, (map.get(key) ?? 0) + 1);
  return {
    read,
    calls,
    store: wrapStore(
      store,
      {
        async *readStream(streamName: string, options?: ReadStreamOptions): AsyncGenerator<RecordedEvent> {
          bump(calls, streamName);
          for await (const event of store.readStream(streamName, options)) {
            bump(read, streamName);
            yield event;
          }
        },
      },
      knowsLength,
    ),
  };
}
