import { randomUUID } from 'node:crypto';
import {
  BACKWARDS,
  END,
  EventStoreDBClient,
  MaxAppendSizeExceededError,
  NO_STREAM,
  START,
  StreamNotFoundError,
  WrongExpectedVersionError,
  jsonEvent,
} from '@eventstore/db-client';
import type { EventMetadata } from '../../src/domain/messages';
import { createEsdbEventStore } from '../../src/infra/eventstore/esdb';
import {
  comparePositions,
  type EventStore,
  type NewEvent,
  type RecordedEvent,
  type Subscription,
  type SubscriptionItem,
  WrongExpectedRevisionError,
} from '../../src/infra/eventstore/port';
import { startEsdbStandin, type EsdbStandin } from '../support/esdb-standin';

const metadata: EventMetadata = {
  occurredAt: '2025-01-01T00:00:00.000Z',
  actor: { type: 'system', id: 'test' },
  requestId: 'req-1',
  causationId: 'cause-1',
  correlationId: 'corr-1',
};

function newEvent(type: string, data: unknown = {}): NewEvent {
  return { id: randomUUID(), type, data, metadata };
}

async function collect<T>(iterable: AsyncIterable<T>): Promise<T[]> {
  const items: T[] = [];
  for await (const item of iterable) items.push(item);
  return items;
}

/** Reads items until `until` says stop (inclusive), failing after a timeout. */
async function take(
  subscription: Subscription,
  until: (items: readonly SubscriptionItem[]) => boolean,
  timeoutMs = 10000,
): Promise<SubscriptionItem[]> {
  const items: SubscriptionItem[] = [];
  const iterator = subscription[Symbol.asyncIterator]();
  const deadline = Date.now() + timeoutMs;
  while (!until(items)) {
    const remaining = deadline - Date.now();
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out; got ${JSON.stringify(labels(items))}`)), remaining);
    });
    try {
      const next = await Promise.race([iterator.next(), timeout]);
      if (next.done === true) break;
      items.push(next.value);
    } finally {
      clearTimeout(timer);
    }
  }
  return items;
}

function labels(items: readonly SubscriptionItem[]): string[] {
  return items.map((item) => (item.kind === 'event' ? `${item.event.streamName}:${item.event.type}` : 'caught-up'));
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe('EventStoreDB adapter against the wire-level stand-in', () => {
  let standin: EsdbStandin;
  let store: EventStore;
  let run: string;

  beforeAll(async () => {
    standin = await startEsdbStandin({ statsIntervalMs: 200 });
    store = createEsdbEventStore(standin.url);
  });

  afterAll(async () => {
    await store?.close();
    await standin?.stop();
  });

  beforeEach(() => {
    run = randomUUID().slice(0, 8);
  });

  it('hands out $all positions that increase with gaps, never by one', async () => {
    const stream = `gap-${run}`;
    const events = [newEvent('A'), newEvent('B'), newEvent('C')];
    const result = await store.append(stream, events, 'no_stream');
    const read = await collect(store.readStream(stream));
    expect(read.map((e) => e.revision)).toEqual([0n, 1n, 2n]);
    for (let i = 1; i < read.length; i++) {
      const previous = read[i - 1] as RecordedEvent;
      const current = read[i] as RecordedEvent;
      expect(current.position.commit - previous.position.commit).toBeGreaterThan(1n);
    }
    // The append answers the last event's position.
    expect(result.position).toEqual(read[2]?.position);
    expect(result.nextExpectedRevision).toBe(2n);
  });

  it('has system events in $all, and neither subscribe nor headPosition hands them out', async () => {
    const raw = EventStoreDBClient.connectionString(standin.url);
    try {
      const streams: string[] = [];
      for await (const resolved of raw.readAll({ fromPosition: START, maxCount: 50 })) {
        if (resolved.event !== undefined) streams.push(resolved.event.streamId);
      }
      expect(streams.some((s) => s.startsWith('$'))).toBe(true);
    } finally {
      await raw.dispose();
    }

    const stream = `sys-${run}`;
    const appended = await store.append(stream, [newEvent('Visible')], 'no_stream');
    // Writes `$metadata` to `$$<stream>`: a system event after the user event.
    await store.setStreamMaxAge(stream, 3600);
    await sleep(450); // and a few `$statsCollected`
    expect(await store.headPosition()).toEqual(appended.position);

    const subscription = store.subscribe();
    try {
      const items = await take(subscription, (got) => got.some((i) => i.kind === 'caught-up'));
      for (const item of items) {
        if (item.kind !== 'event') continue;
        expect(item.event.streamName.startsWith('$')).toBe(false);
        expect(item.event.type.startsWith('$')).toBe(false);
      }
      expect(labels(items)).toContain(`${stream}:Visible`);
    } finally {
      await subscription.close();
    }
  });

  it('honours $maxAge on stream reads', async () => {
    const stream = `heartbeat-${run}`;
    await store.setStreamMaxAge(stream, 1);
    await store.append(stream, [newEvent('HeartbeatReceived')], 'any');
    expect(await collect(store.readStream(stream))).toHaveLength(1);
    await sleep(1200);
    expect(await collect(store.readStream(stream))).toHaveLength(0);
    const fresh = await store.append(stream, [newEvent('HeartbeatReceived')], 'any');
    expect(fresh.nextExpectedRevision).toBe(1n);
    const read = await collect(store.readStream(stream, { direction: 'backwards', maxCount: 1 }));
    expect(read.map((e) => e.revision)).toEqual([1n]);
  });

  it('writes an append retried with the same ids once', async () => {
    const stream = `idem-${run}`;
    const events = [newEvent('A'), newEvent('B')];
    const first = await store.append(stream, events, 'no_stream');
    const again = await store.append(stream, events, 'no_stream');
    expect(again).toEqual(first);
    const next = [newEvent('C')];
    const third = await store.append(stream, next, 1n);
    const thirdAgain = await store.append(stream, next, 1n);
    expect(thirdAgain).toEqual(third);
    expect((await collect(store.readStream(stream))).map((e) => e.type)).toEqual(['A', 'B', 'C']);
  });

  it('maps a wrong expected revision to WrongExpectedRevisionError', async () => {
    const stream = `wev-${run}`;
    await store.append(stream, [newEvent('A')], 'no_stream');
    await expect(store.append(stream, [newEvent('B')], 'no_stream')).rejects.toEqual(
      new WrongExpectedRevisionError(stream, 'no_stream', 0n),
    );
    const error: unknown = await store.append(stream, [newEvent('B')], 5n).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(WrongExpectedRevisionError);
    expect((error as WrongExpectedRevisionError).actual).toBe(0n);
    const missing: unknown = await store.append(`missing-${run}`, [newEvent('B')], 'stream_exists').catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(WrongExpectedRevisionError);
    expect((missing as WrongExpectedRevisionError).actual).toBe('no_stream');
  });

  it('speaks the real client protocol: StreamNotFound and WrongExpectedVersion on the wire', async () => {
    const raw = EventStoreDBClient.connectionString(standin.url);
    try {
      const read = async (): Promise<void> => {
        for await (const _ of raw.readStream(`nowhere-${run}`)) void _;
      };
      await expect(read()).rejects.toBeInstanceOf(StreamNotFoundError);
      await raw.appendToStream(`raw-${run}`, jsonEvent({ type: 'A', data: {} }), { expectedRevision: NO_STREAM });
      await expect(
        raw.appendToStream(`raw-${run}`, jsonEvent({ type: 'A', data: {} }), { expectedRevision: NO_STREAM }),
      ).rejects.toBeInstanceOf(WrongExpectedVersionError);
      const newest: string[] = [];
      for await (const resolved of raw.readStream(`raw-${run}`, { direction: BACKWARDS, fromRevision: END })) {
        if (resolved.event !== undefined) newest.push(resolved.event.type);
      }
      expect(newest).toEqual(['A']);
    } finally {
      await raw.dispose();
    }
    expect(await collect(store.readStream(`nowhere-${run}`))).toEqual([]);
  });

  it('reads streams forwards and backwards from a revision, with a limit', async () => {
    const stream = `rw-${run}`;
    await store.append(stream, ['A', 'B', 'C', 'D', 'E'].map((t) => newEvent(t)), 'no_stream');
    const types = async (options: Parameters<EventStore['readStream']>[1]): Promise<string[]> =>
      (await collect(store.readStream(stream, options))).map((e) => e.type);
    expect(await types({ fromRevision: 2n })).toEqual(['C', 'D', 'E']);
    expect(await types({ fromRevision: 1n, maxCount: 2 })).toEqual(['B', 'C']);
    expect(await types({ direction: 'backwards' })).toEqual(['E', 'D', 'C', 'B', 'A']);
    expect(await types({ direction: 'backwards', fromRevision: 2n, maxCount: 2 })).toEqual(['C', 'B']);
    // Leaving a read early does not leave the call hanging.
    for await (const event of store.readStream(stream)) {
      expect(event.type).toBe('A');
      break;
    }
    expect(await types({ maxCount: 1 })).toEqual(['A']);
  });

  it('subscribes from a position: after it, replay, caught-up, then live, filtered by prefix', async () => {
    const prefix = `sub${run}-`;
    const first = await store.append(`${prefix}1`, [newEvent('One')], 'no_stream');
    await store.append(`other${run}-1`, [newEvent('Elsewhere')], 'no_stream');
    await store.append(`${prefix}2`, [newEvent('Two'), newEvent('Three')], 'no_stream');

    const subscription = store.subscribe({ fromPosition: first.position, streamPrefixes: [prefix] });
    try {
      const replayed = await take(subscription, (got) => got.some((i) => i.kind === 'caught-up'));
      expect(labels(replayed)).toEqual([`${prefix}2:Two`, `${prefix}2:Three`, 'caught-up']);
      await store.append(`other${run}-1`, [newEvent('StillElsewhere')], 0n);
      await store.append(`${prefix}1`, [newEvent('Live')], 0n);
      const live = await take(subscription, (got) => got.length >= 1);
      expect(labels(live)).toEqual([`${prefix}1:Live`]);
    } finally {
      await subscription.close();
    }
  });

  it('signals caught-up at once when subscribing from the head, and close ends the iteration', async () => {
    await store.append(`head-${run}`, [newEvent('A')], 'no_stream');
    const head = await store.headPosition();
    expect(head).not.toBeNull();
    const subscription = store.subscribe({ ...(head !== null ? { fromPosition: head } : {}), streamPrefixes: [`head-${run}`] });
    const items = await take(subscription, (got) => got.length >= 1);
    expect(labels(items)).toEqual(['caught-up']);
    const rest = collect(subscription);
    await sleep(50);
    await subscription.close();
    await expect(rest).resolves.toEqual([]);
  });

  it('replays a long history in order through back-pressure', async () => {
    const prefix = `bulk${run}-`;
    const total = 1500;
    for (let i = 0; i < total; i += 100) {
      const batch = Array.from({ length: 100 }, (_, j) => newEvent('Bulk', { n: i + j }));
      await store.append(`${prefix}s`, batch, i === 0 ? 'no_stream' : BigInt(i - 1));
    }
    const subscription = store.subscribe({ streamPrefixes: [prefix] });
    try {
      const items = await take(subscription, (got) => got.some((i) => i.kind === 'caught-up'), 20000);
      const events = items.filter((i) => i.kind === 'event');
      expect(events).toHaveLength(total);
      expect(items[items.length - 1]?.kind).toBe('caught-up');
      const positions = events.map((i) => (i.kind === 'event' ? i.event.position : null));
      for (let i = 1; i < positions.length; i++) {
        const a = positions[i - 1];
        const b = positions[i];
        if (a && b) expect(comparePositions(a, b)).toBeLessThan(0);
      }
    } finally {
      await subscription.close();
    }
  });

  it('lets a second client instance see the same data, live', async () => {
    const other = createEsdbEventStore(standin.url);
    try {
      const stream = `shared-${run}`;
      const subscription = other.subscribe({ streamPrefixes: [stream] });
      try {
        await take(subscription, (got) => got.some((i) => i.kind === 'caught-up'));
        const appended = await store.append(stream, [newEvent('Shared', { x: 1 })], 'no_stream');
        const live = await take(subscription, (got) => got.length >= 1);
        const item = live[0];
        expect(item?.kind).toBe('event');
        if (item?.kind === 'event') {
          expect(item.event).toMatchObject({ streamName: stream, type: 'Shared', data: { x: 1 }, metadata, revision: 0n });
          expect(item.event.position).toEqual(appended.position);
        }
      } finally {
        await subscription.close();
      }
      const read = await collect(other.readStream(stream));
      expect(read.map((e) => e.type)).toEqual(['Shared']);
      expect(await other.headPosition()).toEqual(await store.headPosition());
    } finally {
      await other.close();
    }
  });
});

describe('EventStoreDB adapter on a fresh stand-in', () => {
  it('treats a store holding only system events as empty', async () => {
    const standin = await startEsdbStandin({ statsIntervalMs: 50 });
    const store = createEsdbEventStore(standin.url);
    try {
      await sleep(200);
      expect(await store.headPosition()).toBeNull();
      const subscription = store.subscribe();
      try {
        expect(labels(await take(subscription, (got) => got.length >= 1))).toEqual(['caught-up']);
        await store.append('first-1', [newEvent('First')], 'no_stream');
        expect(labels(await take(subscription, (got) => got.length >= 1))).toEqual(['first-1:First']);
      } finally {
        await subscription.close();
      }
    } finally {
      await store.close();
      await standin.stop();
    }
  });
});

describe('EventStoreDB adapter on a server that never sends CaughtUp (before 23.10)', () => {
  let standin: EsdbStandin;
  let store: EventStore;

  beforeAll(async () => {
    standin = await startEsdbStandin({ statsIntervalMs: 0, sendsCaughtUp: false });
    store = createEsdbEventStore(standin.url);
  });

  afterAll(async () => {
    await store?.close();
    await standin?.stop();
  });

  it('signals caught-up after the event that was the head when subscribing', async () => {
    const run = randomUUID().slice(0, 8);
    await store.append(`old-${run}`, [newEvent('A'), newEvent('B')], 'no_stream');
    const subscription = store.subscribe({ streamPrefixes: [`old-${run}`] });
    try {
      expect(labels(await take(subscription, (got) => got.some((i) => i.kind === 'caught-up')))).toEqual([
        `old-${run}:A`,
        `old-${run}:B`,
        'caught-up',
      ]);
      await store.append(`old-${run}`, [newEvent('C')], 1n);
      expect(labels(await take(subscription, (got) => got.length >= 1))).toEqual([`old-${run}:C`]);
    } finally {
      await subscription.close();
    }
  });

  it('signals caught-up at the first checkpoint past the head when the head is filtered out', async () => {
    const run = randomUUID().slice(0, 8);
    await store.append(`kept-${run}`, [newEvent('Kept')], 'no_stream');
    await store.append(`other-${run}`, [newEvent('Other')], 'no_stream');
    const subscription = store.subscribe({ streamPrefixes: [`kept-${run}`] });
    try {
      expect(labels(await take(subscription, (got) => got.length >= 1))).toEqual([`kept-${run}:Kept`]);
      // Nothing says "caught up" until the server sends a checkpoint at or past the head:
      // it does every 32 scanned events (the default search window).
      await store.append(
        `other-${run}`,
        Array.from({ length: 40 }, () => newEvent('Other')),
        0n,
      );
      expect(labels(await take(subscription, (got) => got.length >= 1))).toEqual(['caught-up']);
    } finally {
      await subscription.close();
    }
  });

  it('signals caught-up at once when subscribing from the head', async () => {
    const run = randomUUID().slice(0, 8);
    const appended = await store.append(`at-head-${run}`, [newEvent('A')], 'no_stream');
    const subscription = store.subscribe({ fromPosition: appended.position, streamPrefixes: [`at-head-${run}`] });
    try {
      expect(labels(await take(subscription, (got) => got.length >= 1))).toEqual(['caught-up']);
    } finally {
      await subscription.close();
    }
  });
});

describe('EventStoreDB stand-in limits', () => {
  it('refuses an append over 1 MiB, as the real server', async () => {
    const standin = await startEsdbStandin({ statsIntervalMs: 0 });
    const store = createEsdbEventStore(standin.url);
    try {
      const big = newEvent('Big', { blob: 'x'.repeat(1024 * 1024) });
      await expect(store.append('big-1', [big], 'any')).rejects.toBeInstanceOf(MaxAppendSizeExceededError);
      expect(await collect(store.readStream('big-1'))).toEqual([]);
    } finally {
      await store.close();
      await standin.stop();
    }
  });
});
