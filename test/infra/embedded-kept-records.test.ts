import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import type { EventStore, RecordedEvent } from '../../src/infra/eventstore/port';

/**
 * The records the embedded log keeps after reading them from a segment file (reads.ts): a
 * stream read again hands out the very events of the first read, decoded once.
 */

let dir: string;
beforeEach(() => (dir = mkdtempSync(join(tmpdir(), 'hhc-kept-records-'))));
afterEach(() => rmSync(dir, { recursive: true, force: true }));

async function readAll(store: EventStore, stream: string): Promise<RecordedEvent[]> {
  const events: RecordedEvent[] = [];
  for await (const event of store.readStream(stream)) events.push(event);
  return events;
}

test('a stream read twice after a restart is decoded once: the second read hands out the same events', async () => {
  const first = await openEmbeddedEventStore(dir);
  const metadata = { occurredAt: new Date(0).toISOString(), actor: { type: 'system', id: 'test' }, requestId: 'r', causationId: 'c', correlationId: 'c' } as const;
  await first.append('thing-1', [1, 2, 3].map((n) => ({ id: `00000000-0000-4000-8000-00000000000${n}`, type: 'Thing', data: { n }, metadata })), 'no_stream');
  await first.close();
  // A restart: the records are read from the segment file, not from the last commits.
  const store = await openEmbeddedEventStore(dir);
  try {
    const once = await readAll(store, 'thing-1');
    const again = await readAll(store, 'thing-1');
    expect(once.map((e) => e.data)).toEqual([{ n: 1 }, { n: 2 }, { n: 3 }]);
    expect(again.every((event, i) => event === once[i])).toBe(true);
  } finally {
    await store.close();
  }
});
