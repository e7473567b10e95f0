import type { RecordedEvent, SubscriptionItem } from '../infra/eventstore/port';

/** How much one batch may hold; also how far the subscription is read ahead of the projector. */
export interface BatchLimits {
  readonly maxEvents: number;
  /** Bytes of event data (as JSON), roughly: bounds the memory a batch holds. */
  readonly maxBytes: number;
}

export const DEFAULT_BATCH_LIMITS: BatchLimits = { maxEvents: 1000, maxBytes: 4 * 1024 * 1024 };

/** Events in log order; `caughtUp` when the subscription said "history replayed" right after them. */
export interface Batch {
  readonly events: readonly RecordedEvent[];
  readonly caughtUp: boolean;
}

interface Queued {
  readonly item: SubscriptionItem;
  readonly bytes: number;
}

/** Microtask hops a lone live event waits for company: a few items of a synchronous burst. */
const GATHER_HOPS = 8;

const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/**
 * Groups a subscription's items into batches. The subscription is read ahead into a queue
 * (up to the limits) while the previous batch is being written, so under load a batch is
 * whatever arrived meanwhile; a batch ends at a `caught-up` item, so "caught up" is never
 * delayed behind later events. A live event arriving alone is taken within the same turn of
 * the event loop (with what arrives alongside it), never held for a batch to fill.
 */
export async function* batchesOf(subscription: AsyncIterable<SubscriptionItem>, limits: BatchLimits = DEFAULT_BATCH_LIMITS): AsyncGenerator<Batch> {
  const iterator = subscription[Symbol.asyncIterator]();
  let queue: Queued[] = [];
  let queuedBytes = 0;
  let ended = false;
  /** History has been replayed (the subscription said so): from now on writes wait for each batch. */
  let live = false;
  /** The consumer left (the projector stopped or failed): the pump stops reading ahead. */
  let left = false;
  let failure: { readonly error: unknown } | null = null;
  let wakeConsumer: (() => void) | null = null;
  let wakePump: (() => void) | null = null;
  const wake = (which: 'consumer' | 'pump'): void => {
    const resolve = which === 'consumer' ? wakeConsumer : wakePump;
    if (which === 'consumer') wakeConsumer = null;
    else wakePump = null;
    resolve?.();
  };
  const full = (): boolean => queue.length >= limits.maxEvents || queuedBytes >= limits.maxBytes;

  void (async () => {
    try {
      for (;;) {
        while (full() && !left) await new Promise<void>((resolve) => (wakePump = resolve));
        if (left) break;
        const next = await iterator.next();
        if (next.done === true) break;
        const bytes = next.value.kind === 'event' ? sizeOf(next.value.event) : 0;
        queue.push({ item: next.value, bytes });
        queuedBytes += bytes;
        wake('consumer');
      }
    } catch (error) {
      failure = { error };
    }
    ended = true;
    wake('consumer');
  })();

  try {
    for (;;) {
      if (queue.length === 0) {
        if (failure !== null) throw (failure as { readonly error: unknown }).error;
        if (ended) return;
        await new Promise<void>((resolve) => (wakeConsumer = resolve));
        // Replaying history, nobody waits for an event: what else arrives by the next turn
        // joins the batch. Live, writes wait for it (read-your-writes), and under load a turn
        // of the event loop is milliseconds: only what comes in the same turn joins.
        if (live) for (let hop = 0; hop < GATHER_HOPS; hop++) await Promise.resolve();
        else await nextTurn();
        continue;
      }
      const taken = take(queue, limits);
      if (taken.batch.caughtUp) live = true;
      queue = queue.slice(taken.count);
      queuedBytes -= taken.bytes;
      wake('pump');
      yield taken.batch;
    }
  } finally {
    left = true;
    wake('pump');
  }
}

/** The batch at the head of the queue: up to the limits, ending after a `caught-up`. */
function take(queue: readonly Queued[], limits: BatchLimits): { batch: Batch; count: number; bytes: number } {
  const events: RecordedEvent[] = [];
  let bytes = 0;
  let count = 0;
  for (const { item, bytes: size } of queue) {
    if (events.length >= limits.maxEvents || bytes >= limits.maxBytes) break;
    count++;
    bytes += size;
    if (item.kind === 'caught-up') return { batch: { events, caughtUp: true }, count, bytes };
    events.push(item.event);
  }
  return { batch: { events, caughtUp: false }, count, bytes };
}

function sizeOf(event: RecordedEvent): number {
  return 200 + (event.data === undefined ? 0 : JSON.stringify(event.data).length);
}
