/** Full garbage collections for tests of what a process keeps reachable. */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import type { EventStore } from '../../src/infra/eventstore/port';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** A few turns of the event loop, each followed by a full collection. */
export async function collectGarbage(turns = 3): Promise<void> {
  for (let i = 0; i < turns; i++) {
    await new Promise((resolve) => setImmediate(resolve));
    gc();
  }
}

/** A weak reference to the data of the stream's last event (read in a frame of its own, gone once it returns). */
export async function lastDataRef(store: EventStore, stream: string): Promise<WeakRef<object> | null> {
  let ref: WeakRef<object> | null = null;
  for await (const event of store.readStream(stream)) ref = new WeakRef(event.data as object);
  return ref;
}
