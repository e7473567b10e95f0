import type { Histogram } from 'prom-client';
import type { EventStore, GlobalPosition } from './port';

export interface AppendObserver {
  /** Latency of every append (decisions §8: event-store append latency). */
  readonly appendSeconds: Histogram;
  /** Told of every acknowledged append: `count` events ending at `position` (projector lag). */
  readonly onAppended?: (position: GlobalPosition, count: number) => void;
}

/** The same store, with every append observed. */
export function instrumentEventStore(store: EventStore, observer: AppendObserver): EventStore {
  return {
    async append(streamName, events, expected) {
      const end = observer.appendSeconds.startTimer();
      try {
        const result = await store.append(streamName, events, expected);
        observer.onAppended?.(result.position, events.length);
        return result;
      } finally {
        end();
      }
    },
    readStream: (streamName, options) => store.readStream(streamName, options),
    ...(store.streamEnd !== undefined ? { streamEnd: store.streamEnd } : {}),
    subscribe: (options) => store.subscribe(options),
    setStreamMaxAge: (streamName, seconds) => store.setStreamMaxAge(streamName, seconds),
    headPosition: () => store.headPosition(),
    close: () => store.close(),
  };
}
