import type { EventStore, RecordedEvent } from '../../src/infra/eventstore/port';
import { allProjections } from '../../src/projections';

/** Every event some read model reads, in log order, as the projector's subscription hands them over. */
export async function projectedHistory(store: EventStore): Promise<RecordedEvent[]> {
  const events: RecordedEvent[] = [];
  const prefixes = [...new Set(allProjections().flatMap((p) => p.streamPrefixes))];
  const subscription = store.subscribe({ streamPrefixes: prefixes });
  for await (const item of subscription) {
    if (item.kind === 'caught-up') break;
    events.push(item.event);
  }
  await subscription.close();
  return events;
}
