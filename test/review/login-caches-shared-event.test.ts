import { randomUUID } from 'node:crypto';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import { createEsdbEventStore } from '../../src/infra/eventstore/esdb';
import type { EventStore, NewEvent, RecordedEvent, Subscription } from '../../src/infra/eventstore/port';
import { startEsdbStandin, type EsdbStandin } from '../support/esdb-standin';
import { privateEventStoreEachTest } from '../support/private-event-store';

/**
 * What one reader of the log (a projection, an upcaster, the audit formatting) does to the event
 * or data it was handed never shows in what another reader is handed, or in a later read: the
 * events the reading caches share are deep-frozen, so a change is refused (it throws in strict
 * mode, or has no effect), and the other readers see the event as stored.
 */

const meta = { occurredAt: '2026-11-27T10:00:00.000Z', actor: { type: 'system' as const, id: 'test' }, requestId: 'r', causationId: 'c', correlationId: 'r' };

function synced(userId: string): NewEvent {
  return {
    id: randomUUID(),
    type: 'UserSynced',
    data: { userId, created: true, syncId: 7, email: `${userId}@example.org`, firstName: 'Ada', lastName: 'Lovelace', profile: { language: 'en' }, syncedAt: meta.occurredAt },
    metadata: meta,
  };
}

function heartbeat(uuid: string): NewEvent {
  return { id: randomUUID(), type: 'DeviceUpdated', data: { uuid, changes: { port: '8123' }, source: 'heartbeat', updatedAt: meta.occurredAt }, metadata: meta };
}

async function readAll(store: EventStore, stream: string): Promise<RecordedEvent[]> {
  const out: RecordedEvent[] = [];
  for await (const e of store.readStream(stream)) out.push(e);
  return out;
}

/** The first `n` events a subscription started now hands out after it caught up. */
async function nextEvents(subscription: Subscription, n: number, onLive: () => void): Promise<RecordedEvent[]> {
  const out: RecordedEvent[] = [];
  let live = false;
  for await (const item of subscription) {
    if (item.kind !== 'event') {
      if (!live) onLive();
      live = true;
      continue;
    }
    if (!live) continue;
    out.push(item.event);
    if (out.length >= n) break;
  }
  await subscription.close();
  return out;
}

/**
 * A reader that tries to change what it was handed, as a careless projection would. Whether the
 * change was refused (thrown) or went through, the reader itself must see no change either.
 */
function scribble(event: RecordedEvent): void {
  const shown = (): string => JSON.stringify({ data: event.data, metadata: event.metadata });
  const before = shown();
  try {
    change(event);
  } catch (error) {
    expect(error).toBeInstanceOf(TypeError);
  }
  expect(shown()).toBe(before);
}

function change(event: RecordedEvent): void {
  const data = event.data as Record<string, unknown>;
  data.changedByAReader = true;
  delete data.userId;
  delete data.uuid;
  const profile = data.profile as Record<string, unknown> | undefined;
  if (profile !== undefined) profile.language = 'xx';
  ((event.metadata as unknown as Record<string, unknown>).actor as Record<string, unknown>).id = 'scribbled';
}

const PRIVATE_STORE_READ_TWICE =
  'private store: a sealed event read twice while its key is held; the first reader changing the opened data leaves the second read as stored';

async function sealedEventReadTwice(store: EventStore): Promise<void> {
  const userId = randomUUID();
  const written = synced(userId);
  await store.append(`user-${userId}`, [written], 'any');
  const [first] = await readAll(store, `user-${userId}`);
  scribble(first as RecordedEvent);
  const [second] = await readAll(store, `user-${userId}`);
  expect(second?.data).toEqual(written.data);
}

describe('readers of the log never share mutable events', () => {
  const t = privateEventStoreEachTest('hhc-review-shared-', (dir) => openEmbeddedEventStore(dir));

  test('embedded log: a stream read twice; the first reader changing its event leaves the second read as stored', async () => {
    const uuid = randomUUID();
    const written = heartbeat(uuid);
    await t.raw.append(`device-${uuid}`, [written], 'any');
    const [first] = await readAll(t.raw, `device-${uuid}`);
    scribble(first as RecordedEvent);
    const [second] = await readAll(t.raw, `device-${uuid}`);
    expect(second?.data).toEqual(written.data);
    expect(second?.metadata.actor.id).toBe('test');
  });

  test('embedded log: two subscriptions of one commit; one changing its event leaves the other as stored', async () => {
    const uuid = randomUUID();
    const written = heartbeat(uuid);
    let live = 0;
    let bothLive: () => void = () => undefined;
    const ready = new Promise<void>((resolve) => (bothLive = resolve));
    const onLive = (): void => {
      if (++live === 2) bothLive();
    };
    const a = nextEvents(t.raw.subscribe(), 1, onLive);
    const b = nextEvents(t.raw.subscribe(), 1, onLive);
    await ready;
    await t.raw.append(`device-${uuid}`, [written], 'any');
    const [fromA] = await a;
    scribble(fromA as RecordedEvent);
    const [fromB] = await b;
    expect(fromB?.data).toEqual(written.data);
    // And a later read of the stream too.
    expect((await readAll(t.raw, `device-${uuid}`))[0]?.data).toEqual(written.data);
  });

  test(PRIVATE_STORE_READ_TWICE, () => sealedEventReadTwice(t.store));
});

describe('readers of the log never share mutable events (distributed: EventStoreDB stand-in)', () => {
  jest.setTimeout(60_000);
  let esdb: EsdbStandin;

  beforeAll(async () => {
    esdb = await startEsdbStandin({ statsIntervalMs: 0 });
  });
  afterAll(() => esdb.stop());

  const t = privateEventStoreEachTest('hhc-review-shared-esdb-', () => createEsdbEventStore(esdb.url));

  test(PRIVATE_STORE_READ_TWICE, () => sealedEventReadTwice(t.store));
});
