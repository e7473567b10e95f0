import { randomUUID } from 'node:crypto';
import { EventStoreDBClient, jsonEvent, START } from '@eventstore/db-client';
import type { EventMetadata } from '../../src/domain/messages';
import { createEsdbEventStore } from '../../src/infra/eventstore/esdb';
import type { EventStore, NewEvent } from '../../src/infra/eventstore/port';
import { startEsdbStandin, type EsdbStandin } from '../support/esdb-standin';

/** What the EventStoreDB adapter writes as metadata (against the wire-level stand-in), and what it reads back. */

async function collect<T>(iterable: AsyncIterable<T>): Promise<T[]> {
  const items: T[] = [];
  for await (const item of iterable) items.push(item);
  return items;
}

function heartbeat(metadata: Partial<EventMetadata> = {}): NewEvent {
  const id = randomUUID();
  const requestId = randomUUID();
  return {
    id,
    type: 'HeartbeatReceived',
    data: { uuid: randomUUID(), receivedAt: '2026-01-01T00:00:00.000Z' },
    metadata: {
      occurredAt: '2026-01-01T00:00:00.000Z',
      actor: { type: 'device', id: randomUUID() },
      requestId,
      causationId: requestId,
      correlationId: requestId,
      ...metadata,
    },
  };
}

describe('EventStoreDB adapter: stored metadata', () => {
  let standin: EsdbStandin;
  let store: EventStore;
  let raw: EventStoreDBClient;

  beforeAll(async () => {
    standin = await startEsdbStandin({});
    store = createEsdbEventStore(standin.url);
    raw = EventStoreDBClient.connectionString(standin.url);
  });

  afterAll(async () => {
    await raw?.dispose();
    await store?.close();
    await standin?.stop();
  });

  async function rawMetadata(stream: string): Promise<unknown[]> {
    const events = await collect(raw.readStream(stream, { fromRevision: START }));
    return events.map((resolved) => resolved.event?.metadata);
  }

  it('leaves out causation and correlation ids equal to the request id, and restores them on read', async () => {
    const stream = `heartbeat-${randomUUID()}`;
    const event = heartbeat();

    await store.append(stream, [event], 'no_stream');

    const { occurredAt, actor, requestId } = event.metadata;
    expect(await rawMetadata(stream)).toEqual([{ occurredAt, actor, requestId }]);
    expect((await collect(store.readStream(stream)))[0]?.metadata).toEqual(event.metadata);
  });

  it('keeps ids that differ from the request id', async () => {
    const stream = `device-${randomUUID()}`;
    const event = heartbeat({ causationId: randomUUID() });

    await store.append(stream, [event], 'no_stream');

    const { occurredAt, actor, requestId, causationId } = event.metadata;
    expect(await rawMetadata(stream)).toEqual([{ occurredAt, actor, requestId, causationId }]);
    expect((await collect(store.readStream(stream)))[0]?.metadata).toEqual(event.metadata);
  });

  it('reads events written with the full metadata (by earlier versions) as before', async () => {
    const stream = `device-${randomUUID()}`;
    const event = heartbeat({ correlationId: randomUUID() });
    await raw.appendToStream(stream, [jsonEvent({ id: event.id, type: event.type, data: { at: 1 }, metadata: { ...event.metadata } })]);

    expect((await collect(store.readStream(stream)))[0]?.metadata).toEqual(event.metadata);
  });
});
