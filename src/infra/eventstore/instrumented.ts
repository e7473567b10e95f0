import type { Histogram } from 'prom-client';
import type { EventStore } from './port';

/** The same store, with every append's latency observed (decisions §8: event-store append latency). */
export function instrumentEventStore(store: EventStore, appendSeconds: Histogram): EventStore {
  return {
    async append(streamName, events, expected) {
      const end = appendSeconds.startTimer();
      try {
        return await store.append(streamName, events, expected);
      } finally {
        end();
      }
    },
    readStream: (streamName, options) => store.readStream(streamName, options),
    subscribe: (options) => store.subscribe(options),
    setStreamMaxAge: (streamName, seconds) => store.setStreamMaxAge(streamName, seconds),
    headPosition: () => store.headPosition(),
    close: () => store.close(),
  };
}
