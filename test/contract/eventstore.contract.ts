import { randomUUID } from 'node:crypto';
import type { EventMetadata } from '../../src/domain/messages';
import {
  WrongExpectedRevisionError,
  comparePositions,
  type AppendResult,
  type EventStore,
  type GlobalPosition,
  type NewEvent,
  type RecordedEvent,
  type Subscription,
  type SubscriptionItem,
} from '../../src/infra/eventstore/port';

export interface EventStoreContractOptions {
  /**
   * Whether every `open()` gives a store with no user events yet. Only then can the
   * behaviour of an empty store be checked; set false when running against a shared server.
   * Every other test works on a shared store: it uses stream names unique to the test.
   */
  readonly opensEmptyStore?: boolean;
}

/**
 * The event store contract, run against every adapter. Semantics pinned here (they are
 * EventStoreDB's):
 * - revisions are 0-based; positions increase with gaps, in append order across streams;
 * - an append retried with the same event ids and a `no_stream` or revision expectation
 *   whose events are already there is answered with the original result, not written again;
 * - a subscription starts strictly after `fromPosition`, replays, yields `caught-up` once,
 *   then goes live; it never hands out `$`-prefixed (system) streams;
 * - `headPosition` is the position of the newest user event (what subscriptions hand out).
 */
export function eventStoreContract(
  name: string,
  open: () => Promise<{ store: EventStore; cleanup: () => Promise<void> }>,
  contractOptions: EventStoreContractOptions = {},
): void {
  describe(`EventStore contract: ${name}`, () => {
    let store: EventStore;
    let cleanup: () => Promise<void>;
    /** Unique per test, so a shared store's other streams never match. */
    let prefix: string;

    beforeEach(async () => {
      ({ store, cleanup } = await open());
      prefix = `ct${randomUUID().replace(/-/g, '').slice(0, 10)}`;
    });

    afterEach(async () => {
      await cleanup();
    });

    const streamNamed = (suffix: string): string => `${prefix}-${suffix}`;

    describe('append and read', () => {
      it('reads back what was appended, with revisions, positions, data and metadata', async () => {
        const stream = streamNamed('roundtrip');
        const first = newEvent('DeviceRegistered', { name: 'Kitchen hub', nested: { list: [1, 'two', null], flag: true } });
        const second = newEvent('DeviceUpdated', { name: 'Küche ✓' });

        const result = await store.append(stream, [first, second], 'no_stream');

        const events = await readAll(store.readStream(stream));
        expect(events.map(summary)).toEqual([
          { id: first.id, streamName: stream, revision: 0n, type: 'DeviceRegistered', data: first.data },
          { id: second.id, streamName: stream, revision: 1n, type: 'DeviceUpdated', data: second.data },
        ]);
        expect(events.map((event) => event.metadata)).toEqual([first.metadata, second.metadata]);
        expect(result.nextExpectedRevision).toBe(1n);
        expect(events[1]?.position).toEqual(result.position);
      });

      it('continues revisions across appends', async () => {
        const stream = streamNamed('revisions');
        await store.append(stream, [newEvent('A')], 'no_stream');
        const result = await store.append(stream, [newEvent('B'), newEvent('C')], 0n);

        expect(result.nextExpectedRevision).toBe(2n);
        const events = await readAll(store.readStream(stream));
        expect(events.map((event) => [event.type, event.revision])).toEqual([
          ['A', 0n],
          ['B', 1n],
          ['C', 2n],
        ]);
      });

      it('gives strictly increasing positions, in append order across streams', async () => {
        const a = streamNamed('order-a');
        const b = streamNamed('order-b');
        const results: AppendResult[] = [];
        results.push(await store.append(a, [newEvent('A1')], 'any'));
        results.push(await store.append(b, [newEvent('B1')], 'any'));
        results.push(await store.append(a, [newEvent('A2'), newEvent('A3')], 'any'));
        results.push(await store.append(b, [newEvent('B2')], 'any'));

        const positions = results.map((result) => result.position);
        for (let i = 1; i < positions.length; i++) {
          expect(comparePositions(at(positions, i - 1), at(positions, i))).toBeLessThan(0);
        }
        const eventsOfA = await readAll(store.readStream(a));
        const eventsOfB = await readAll(store.readStream(b));
        const inLogOrder = [...eventsOfA, ...eventsOfB].sort((x, y) => comparePositions(x.position, y.position));
        expect(inLogOrder.map((event) => event.type)).toEqual(['A1', 'B1', 'A2', 'A3', 'B2']);
        for (let i = 1; i < inLogOrder.length; i++) {
          expect(comparePositions(at(inLogOrder, i - 1).position, at(inLogOrder, i).position)).toBeLessThan(0);
        }
        expect([at(eventsOfA, 0), at(eventsOfB, 0), at(eventsOfA, 2), at(eventsOfB, 1)].map((e) => e.position)).toEqual(
          positions,
        );
      });

      it('reads an absent stream as empty, in both directions', async () => {
        const stream = streamNamed('absent');
        expect(await readAll(store.readStream(stream))).toEqual([]);
        expect(await readAll(store.readStream(stream, { direction: 'backwards' }))).toEqual([]);
        expect(await readAll(store.readStream(stream, { fromRevision: 3n, maxCount: 2 }))).toEqual([]);
      });

      it('reads forwards from a revision, with a maximum count', async () => {
        const stream = await streamWithTypes(['E0', 'E1', 'E2', 'E3', 'E4']);

        expect(await typesOf(store.readStream(stream, { fromRevision: 2n }))).toEqual(['E2', 'E3', 'E4']);
        expect(await typesOf(store.readStream(stream, { maxCount: 2 }))).toEqual(['E0', 'E1']);
        expect(await typesOf(store.readStream(stream, { fromRevision: 1n, maxCount: 3 }))).toEqual(['E1', 'E2', 'E3']);
        expect(await typesOf(store.readStream(stream, { fromRevision: 5n }))).toEqual([]);
      });

      it('reads backwards, from the end or from a revision, with a maximum count', async () => {
        const stream = await streamWithTypes(['E0', 'E1', 'E2', 'E3', 'E4']);

        expect(await typesOf(store.readStream(stream, { direction: 'backwards' }))).toEqual(['E4', 'E3', 'E2', 'E1', 'E0']);
        expect(await typesOf(store.readStream(stream, { direction: 'backwards', maxCount: 1 }))).toEqual(['E4']);
        expect(await typesOf(store.readStream(stream, { direction: 'backwards', fromRevision: 3n, maxCount: 2 }))).toEqual([
          'E3',
          'E2',
        ]);
        const backwards = await readAll(store.readStream(stream, { direction: 'backwards', fromRevision: 1n }));
        expect(backwards.map((event) => event.revision)).toEqual([1n, 0n]);
      });

      it('accepts a max age and still serves recent events', async () => {
        const stream = await streamWithTypes(['Beat1', 'Beat2']);

        await store.setStreamMaxAge(stream, 3600);

        expect(await typesOf(store.readStream(stream))).toEqual(['Beat1', 'Beat2']);
        const result = await store.append(stream, [newEvent('Beat3')], 1n);
        expect(result.nextExpectedRevision).toBe(2n);
        expect(await typesOf(store.readStream(stream, { direction: 'backwards', maxCount: 1 }))).toEqual(['Beat3']);
      });
    });

    describe('expected revision', () => {
      it("'no_stream' creates a stream and refuses an existing one", async () => {
        const stream = streamNamed('no-stream');
        const created = await store.append(stream, [newEvent('First')], 'no_stream');
        expect(created.nextExpectedRevision).toBe(0n);

        const error = await appendError(stream, [newEvent('Second')], 'no_stream');
        expect(error).toBeInstanceOf(WrongExpectedRevisionError);
        expect(error.streamName).toBe(stream);
        expect(error.actual).toBe(0n);
        expect(await typesOf(store.readStream(stream))).toEqual(['First']);
      });

      it("'stream_exists' refuses an absent stream and accepts an existing one", async () => {
        const stream = streamNamed('exists');
        const error = await appendError(stream, [newEvent('Orphan')], 'stream_exists');
        expect(error).toBeInstanceOf(WrongExpectedRevisionError);
        expect(error.actual).toBe('no_stream');
        expect(await readAll(store.readStream(stream))).toEqual([]);

        await store.append(stream, [newEvent('First')], 'no_stream');
        const result = await store.append(stream, [newEvent('Second')], 'stream_exists');
        expect(result.nextExpectedRevision).toBe(1n);
        expect(await typesOf(store.readStream(stream))).toEqual(['First', 'Second']);
      });

      it("'any' appends whether or not the stream exists", async () => {
        const stream = streamNamed('any');
        expect((await store.append(stream, [newEvent('First')], 'any')).nextExpectedRevision).toBe(0n);
        expect((await store.append(stream, [newEvent('Second')], 'any')).nextExpectedRevision).toBe(1n);
        expect(await typesOf(store.readStream(stream))).toEqual(['First', 'Second']);
      });

      it('a revision must be the last revision of the stream', async () => {
        const stream = streamNamed('revision');
        await store.append(stream, [newEvent('E0'), newEvent('E1')], 'no_stream');

        const stale = await appendError(stream, [newEvent('Stale')], 0n);
        expect(stale).toBeInstanceOf(WrongExpectedRevisionError);
        expect(stale.expected).toBe(0n);
        expect(stale.actual).toBe(1n);
        const ahead = await appendError(stream, [newEvent('Ahead')], 5n);
        expect(ahead).toBeInstanceOf(WrongExpectedRevisionError);

        const result = await store.append(stream, [newEvent('E2')], 1n);
        expect(result.nextExpectedRevision).toBe(2n);
        expect(await typesOf(store.readStream(stream))).toEqual(['E0', 'E1', 'E2']);
      });

      it('a revision on an absent stream is a conflict', async () => {
        const stream = streamNamed('revision-absent');
        const error = await appendError(stream, [newEvent('E0')], 0n);
        expect(error).toBeInstanceOf(WrongExpectedRevisionError);
        expect(error.actual).toBe('no_stream');
        expect(await readAll(store.readStream(stream))).toEqual([]);
      });

      it('of two appends expecting the same revision, exactly one wins', async () => {
        const stream = streamNamed('race');
        await store.append(stream, [newEvent('E0')], 'no_stream');

        const outcomes = await Promise.allSettled([
          store.append(stream, [newEvent('Left')], 0n),
          store.append(stream, [newEvent('Right')], 0n),
        ]);

        const rejected = outcomes.filter((outcome) => outcome.status === 'rejected');
        expect(outcomes.filter((outcome) => outcome.status === 'fulfilled')).toHaveLength(1);
        expect(rejected).toHaveLength(1);
        expect(rejected[0]?.status === 'rejected' && rejected[0].reason).toBeInstanceOf(WrongExpectedRevisionError);
        expect(await readAll(store.readStream(stream))).toHaveLength(2);
      });
    });

    describe('idempotent retries', () => {
      it('a retry with the same ids and revision is answered with the original result, written once', async () => {
        const stream = streamNamed('retry-revision');
        await store.append(stream, [newEvent('E0')], 'no_stream');
        const batch = [newEvent('E1'), newEvent('E2')];

        const original = await store.append(stream, batch, 0n);
        const retried = await store.append(stream, batch, 0n);

        expect(retried.nextExpectedRevision).toBe(original.nextExpectedRevision);
        expect(retried.position).toEqual(original.position);
        const events = await readAll(store.readStream(stream));
        expect(events.map((event) => event.id)).toEqual([events[0]?.id, batch[0]?.id, batch[1]?.id]);
      });

      it("a retry with the same ids and 'no_stream' is written once, even after later appends", async () => {
        const stream = streamNamed('retry-no-stream');
        const creation = newEvent('Created');
        const original = await store.append(stream, [creation], 'no_stream');
        await store.append(stream, [newEvent('Later')], 0n);

        const retried = await store.append(stream, [creation], 'no_stream');

        expect(retried).toEqual(original);
        expect(await typesOf(store.readStream(stream))).toEqual(['Created', 'Later']);
      });

      it('the same revision with other ids is still a conflict', async () => {
        const stream = streamNamed('retry-other-ids');
        await store.append(stream, [newEvent('E0')], 'no_stream');
        await store.append(stream, [newEvent('E1')], 0n);

        const error = await appendError(stream, [newEvent('E1-bis')], 0n);

        expect(error).toBeInstanceOf(WrongExpectedRevisionError);
        expect(await typesOf(store.readStream(stream))).toEqual(['E0', 'E1']);
      });
    });

    describe('headPosition', () => {
      if (contractOptions.opensEmptyStore ?? true) {
        it('is null on an empty store', async () => {
          expect(await store.headPosition()).toBeNull();
        });
      }

      it('reaches the newest append and moves with every append', async () => {
        const first = await store.append(streamNamed('head-a'), [newEvent('A')], 'any');
        const headAfterFirst = await store.headPosition();
        expect(headAfterFirst).not.toBeNull();
        expect(comparePositions(headAfterFirst ?? zero, first.position)).toBeGreaterThanOrEqual(0);

        const second = await store.append(streamNamed('head-b'), [newEvent('B')], 'any');
        const headAfterSecond = await store.headPosition();
        expect(comparePositions(headAfterSecond ?? zero, second.position)).toBeGreaterThanOrEqual(0);
        expect(comparePositions(headAfterSecond ?? zero, headAfterFirst ?? zero)).toBeGreaterThan(0);
      });
    });

    describe('subscribe', () => {
      it('replays history from the start, then signals caught-up', async () => {
        const results = await appendInTurns([
          [streamNamed('sub-a'), 'A1'],
          [streamNamed('sub-b'), 'B1'],
          [streamNamed('sub-a'), 'A2'],
        ]);
        const subscription = store.subscribe({ streamPrefixes: [prefix] });

        const items = await takeUntil(subscription, caughtUp);
        await subscription.close();

        expect(items.map(itemLabel)).toEqual(['A1', 'B1', 'A2', 'caught-up']);
        expect(eventsIn(items).map((event) => event.position)).toEqual(results.map((result) => result.position));
        expect(eventsIn(items).map((event) => event.streamName)).toEqual([
          streamNamed('sub-a'),
          streamNamed('sub-b'),
          streamNamed('sub-a'),
        ]);
      });

      it('starts strictly after the given position', async () => {
        const results = await appendInTurns([
          [streamNamed('from-a'), 'E1'],
          [streamNamed('from-b'), 'E2'],
          [streamNamed('from-a'), 'E3'],
          [streamNamed('from-b'), 'E4'],
        ]);
        const subscription = store.subscribe({ fromPosition: at(results, 1).position, streamPrefixes: [prefix] });

        const items = await takeUntil(subscription, caughtUp);
        await subscription.close();

        expect(items.map(itemLabel)).toEqual(['E3', 'E4', 'caught-up']);
      });

      it('from the last position, replays nothing and goes live', async () => {
        const results = await appendInTurns([[streamNamed('last'), 'Old']]);
        const subscription = store.subscribe({ fromPosition: at(results, 0).position, streamPrefixes: [prefix] });

        const beforeLive = await takeUntil(subscription, caughtUp);
        await store.append(streamNamed('last'), [newEvent('New')], 0n);
        const live = await takeUntil(subscription, (items) => items.length === 1);
        await subscription.close();

        expect(beforeLive.map(itemLabel)).toEqual(['caught-up']);
        expect(live.map(itemLabel)).toEqual(['New']);
      });

      it('delivers live events after caught-up, in order, with no second caught-up', async () => {
        await appendInTurns([[streamNamed('live'), 'History']]);
        const subscription = store.subscribe({ streamPrefixes: [prefix] });
        const history = await takeUntil(subscription, caughtUp);

        await store.append(streamNamed('live'), [newEvent('Live1'), newEvent('Live2')], 0n);
        await store.append(streamNamed('live-other'), [newEvent('Live3')], 'no_stream');
        const live = await takeUntil(subscription, (items) => items.length === 3);
        await subscription.close();

        expect(history.map(itemLabel)).toEqual(['History', 'caught-up']);
        expect(live.map(itemLabel)).toEqual(['Live1', 'Live2', 'Live3']);
      });

      it('signals caught-up at once on an empty history and then goes live', async () => {
        const subscription = store.subscribe({ streamPrefixes: [prefix] });
        const history = await takeUntil(subscription, caughtUp);

        await store.append(streamNamed('fresh'), [newEvent('First')], 'no_stream');
        const live = await takeUntil(subscription, (items) => items.length === 1);
        await subscription.close();

        expect(history.map(itemLabel)).toEqual(['caught-up']);
        expect(live.map(itemLabel)).toEqual(['First']);
      });

      it('delivers every event exactly once, in order, while appends race the switch from replay to live', async () => {
        const streams = [streamNamed('race-a'), streamNamed('race-b'), streamNamed('race-c')];
        for (let batch = 0; batch < 30; batch++) {
          const stream = at(streams, batch % streams.length);
          await store.append(
            stream,
            Array.from({ length: 10 }, (_, i) => newEvent(`History-${batch}-${i}`)),
            'any',
          );
        }
        const historyCount = 300;
        const liveWritersCount = 3;
        const liveAppendsPerWriter = 60;

        const subscription = store.subscribe({ streamPrefixes: [prefix] });
        const collecting = takeUntil(
          subscription,
          (items) => eventsIn(items).length === historyCount + liveWritersCount * liveAppendsPerWriter,
          30_000,
        );
        // Writers start with the subscription, so appends land during replay, at the
        // moment it catches up, and after it went live.
        await Promise.all(
          streams.map(async (stream, writer) => {
            for (let i = 0; i < liveAppendsPerWriter; i++) {
              await store.append(stream, [newEvent(`Live-${writer}-${i}`)], 'any');
            }
          }),
        );
        const items = await collecting;
        await store.append(at(streams, 0), [newEvent('Sentinel')], 'any');
        const afterwards = await takeUntil(subscription, (more) => more.length === 1);
        await subscription.close();

        const expected = (await Promise.all(streams.map((stream) => readAll(store.readStream(stream)))))
          .flat()
          .filter((event) => event.type !== 'Sentinel')
          .sort((a, b) => comparePositions(a.position, b.position))
          .map((event) => event.id);
        const delivered = eventsIn(items).map((event) => event.id);
        expect(delivered).toEqual(expected);
        expect(new Set(delivered).size).toBe(delivered.length);
        expect(items.filter((item) => item.kind === 'caught-up')).toHaveLength(1);
        expect(afterwards.map(itemLabel)).toEqual(['Sentinel']);
      }, 60_000);

      it('filters by stream prefixes', async () => {
        await appendInTurns([
          [streamNamed('kept-1'), 'K1'],
          [streamNamed('dropped-1'), 'D1'],
          [streamNamed('also-2'), 'A2'],
          [streamNamed('kept-3'), 'K3'],
        ]);
        const subscription = store.subscribe({ streamPrefixes: [streamNamed('kept'), streamNamed('also')] });

        const history = await takeUntil(subscription, caughtUp);
        await store.append(streamNamed('dropped-1'), [newEvent('D2')], 'any');
        await store.append(streamNamed('kept-1'), [newEvent('K4')], 'any');
        const live = await takeUntil(subscription, (items) => items.length === 1);
        await subscription.close();

        expect(history.map(itemLabel)).toEqual(['K1', 'A2', 'K3', 'caught-up']);
        expect(live.map(itemLabel)).toEqual(['K4']);
      });

      it('without a filter, hands out user events in order and never system streams', async () => {
        const stream = streamNamed('unfiltered');
        await store.append(stream, [newEvent('U1')], 'no_stream');
        await store.setStreamMaxAge(stream, 3600);
        await store.append(stream, [newEvent('U2')], 0n);
        const subscription = store.subscribe();

        const items = await takeUntil(subscription, caughtUp, 30_000);
        await subscription.close();

        const events = eventsIn(items);
        expect(events.filter((event) => event.streamName.startsWith('$'))).toEqual([]);
        expect(events.filter((event) => event.streamName === stream).map((event) => event.type)).toEqual(['U1', 'U2']);
        for (let i = 1; i < events.length; i++) {
          expect(comparePositions(at(events, i - 1).position, at(events, i).position)).toBeLessThan(0);
        }
      }, 60_000);

      it('close ends the iteration of a live subscription', async () => {
        const subscription = store.subscribe({ streamPrefixes: [prefix] });
        const seen: SubscriptionItem[] = [];
        let signalCaughtUp: () => void = () => undefined;
        const reachedLive = new Promise<void>((resolve) => {
          signalCaughtUp = resolve;
        });
        const consuming = (async () => {
          for await (const item of subscription) {
            seen.push(item);
            if (item.kind === 'caught-up') signalCaughtUp();
          }
          return 'ended';
        })();
        await withTimeout(reachedLive, 10_000, 'the subscription to catch up');

        await subscription.close();

        await expect(withTimeout(consuming, 10_000, 'the iteration to end')).resolves.toBe('ended');
        await store.append(streamNamed('after-close'), [newEvent('Late')], 'any');
        expect(seen.map(itemLabel)).toEqual(['caught-up']);
      });
    });

    async function appendError(
      stream: string,
      events: readonly NewEvent[],
      expected: Parameters<EventStore['append']>[2],
    ): Promise<WrongExpectedRevisionError> {
      try {
        await store.append(stream, events, expected);
      } catch (error) {
        if (error instanceof WrongExpectedRevisionError) return error;
        throw error;
      }
      throw new Error(`append to ${stream} expecting ${String(expected)} was accepted`);
    }

    async function streamWithTypes(types: readonly string[]): Promise<string> {
      const stream = streamNamed(`typed-${randomUUID().slice(0, 8)}`);
      await store.append(
        stream,
        types.map((type) => newEvent(type)),
        'no_stream',
      );
      return stream;
    }

    async function typesOf(events: AsyncIterable<RecordedEvent>): Promise<string[]> {
      return (await readAll(events)).map((event) => event.type);
    }

    /** One append at a time, so the append order is the position order. */
    async function appendInTurns(appends: ReadonlyArray<readonly [string, string]>): Promise<AppendResult[]> {
      const results: AppendResult[] = [];
      for (const [stream, type] of appends) results.push(await store.append(stream, [newEvent(type)], 'any'));
      return results;
    }
  });
}

const zero: GlobalPosition = { commit: 0n, prepare: 0n };

export function newEvent(type: string, data: unknown = { at: type }): NewEvent {
  const id = randomUUID();
  const metadata: EventMetadata = {
    occurredAt: new Date().toISOString(),
    actor: { type: 'system', id: 'contract-test' },
    requestId: `req-${id}`,
    causationId: `cause-${id}`,
    correlationId: `corr-${id}`,
  };
  return { id, type, data, metadata };
}

export async function readAll<T>(iterable: AsyncIterable<T>): Promise<T[]> {
  const items: T[] = [];
  for await (const item of iterable) items.push(item);
  return items;
}

function summary(event: RecordedEvent): Pick<RecordedEvent, 'id' | 'streamName' | 'revision' | 'type' | 'data'> {
  return { id: event.id, streamName: event.streamName, revision: event.revision, type: event.type, data: event.data };
}

function at<T>(items: readonly T[], index: number): T {
  const item = items[index];
  if (item === undefined) throw new Error(`No item at index ${index} (of ${items.length})`);
  return item;
}

function caughtUp(items: readonly SubscriptionItem[]): boolean {
  return items.some((item) => item.kind === 'caught-up');
}

function itemLabel(item: SubscriptionItem): string {
  return item.kind === 'caught-up' ? 'caught-up' : item.event.type;
}

function eventsIn(items: readonly SubscriptionItem[]): RecordedEvent[] {
  return items.flatMap((item) => (item.kind === 'event' ? [item.event] : []));
}

const iterators = new WeakMap<Subscription, AsyncIterator<SubscriptionItem>>();

/**
 * Pulls items until `done(items)` holds; the subscription stays open so a later call
 * continues where this one stopped. Fails with what it saw when the items do not come.
 */
export async function takeUntil(
  subscription: Subscription,
  done: (items: readonly SubscriptionItem[]) => boolean,
  timeoutMs = 10_000,
): Promise<SubscriptionItem[]> {
  let iterator = iterators.get(subscription);
  if (iterator === undefined) {
    iterator = subscription[Symbol.asyncIterator]();
    iterators.set(subscription, iterator);
  }
  const items: SubscriptionItem[] = [];
  const deadline = Date.now() + timeoutMs;
  while (!done(items)) {
    const next = await withTimeout(
      iterator.next(),
      Math.max(deadline - Date.now(), 1),
      `subscription items (got ${items.length}: ${items.slice(-5).map(itemLabel).join(', ')})`,
    );
    if (next.done) throw new Error(`Subscription ended after ${items.length} items`);
    items.push(next.value);
  }
  return items;
}

export async function withTimeout<T>(promise: Promise<T>, timeoutMs: number, waitingFor: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`Timed out after ${timeoutMs} ms waiting for ${waitingFor}`)), timeoutMs);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
