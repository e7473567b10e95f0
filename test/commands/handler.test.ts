import { randomUUID } from 'node:crypto';
import { ConflictError } from '../../src/domain/errors';
import type { Command, Decider, DomainEvent } from '../../src/domain/messages';
import { createStateCache, handleCommand, newCommandContext, type Clock } from '../../src/commands/handler';
import type { EventStore } from '../../src/infra/eventstore/port';
import { openEventStore, unique, type EventStoreKind } from '../support/adapters';

type CounterEvent = DomainEvent<'Incremented', { by: number }>;
type CounterCommand = Command<'Increment', { by: number; max: number }>;

const counter: Decider<number, CounterCommand, CounterEvent> = {
  initialState: () => 0,
  evolve: (state, event) => state + event.data.by,
  decide: (command, state) => {
    if (state + command.data.by > command.data.max) throw new ConflictError('Counter limit reached');
    return [{ type: 'Incremented', data: { by: command.data.by } }];
  },
};

const clock: Clock = { now: () => new Date('2026-01-01T00:00:00.000Z') };
const ctx = () => newCommandContext({ type: 'user', id: 'u-1' }, `req-${randomUUID()}`);

describe.each<EventStoreKind>(['embedded', 'esdb'])('command handler over the %s event store', (kind) => {
  let store: EventStore;
  let cleanup: () => Promise<void>;

  beforeAll(async () => {
    const opened = await openEventStore(kind);
    store = opened.value;
    cleanup = opened.cleanup;
  }, 30_000);
  afterAll(() => cleanup());

  test('reads, folds, decides and appends with metadata from the context', async () => {
    const stream = unique('counter-');
    const context = ctx();
    const first = await handleCommand(store, counter, stream, { type: 'Increment', data: { by: 2, max: 10 } }, context, clock);
    const second = await handleCommand(store, counter, stream, { type: 'Increment', data: { by: 3, max: 10 } }, context, clock);
    expect(first.state).toBe(2);
    expect(second.state).toBe(5);
    expect(second.revision).toBe(1n);
    const recorded = [];
    for await (const e of store.readStream(stream)) recorded.push(e);
    expect(recorded.map((e) => e.data)).toEqual([{ by: 2 }, { by: 3 }]);
    expect(recorded[0]?.metadata).toEqual({
      occurredAt: '2026-01-01T00:00:00.000Z',
      actor: { type: 'user', id: 'u-1' },
      requestId: context.requestId,
      causationId: context.commandId,
      correlationId: context.requestId,
    });
  });

  test('concurrent commands on one stream are all applied exactly once (retry on conflict)', async () => {
    const stream = unique('counter-');
    await Promise.all(
      Array.from({ length: 8 }, () => handleCommand(store, counter, stream, { type: 'Increment', data: { by: 1, max: 100 } }, ctx(), clock)),
    );
    let total = 0;
    for await (const e of store.readStream(stream)) total += (e.data as { by: number }).by;
    expect(total).toBe(8);
  });

  test('a business rule re-checked after a conflict holds under concurrency', async () => {
    const stream = unique('counter-');
    const results = await Promise.allSettled(
      Array.from({ length: 6 }, () => handleCommand(store, counter, stream, { type: 'Increment', data: { by: 1, max: 3 } }, ctx(), clock)),
    );
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(3);
    const rejected = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    expect(rejected).toHaveLength(3);
    for (const r of rejected) expect(r.reason).toBeInstanceOf(ConflictError);
  });

  test('gives up with a 409 conflict after the bounded number of retries', async () => {
    const stream = unique('counter-');
    // A decider that appends behind the handler's back every time it decides.
    let sneaky = 0;
    const racing: Decider<number, CounterCommand, CounterEvent> = {
      ...counter,
      decide: (command, state) => {
        sneaky++;
        void store.append(stream, [{ id: randomUUID(), type: 'Incremented', data: { by: 0 }, metadata: { occurredAt: '', actor: { type: 'system', id: 't' }, requestId: 'r', causationId: 'c', correlationId: 'c' } }], 'any');
        return counter.decide(command, state);
      },
    };
    const slowStore: EventStore = {
      ...store,
      readStream: (name, options) => store.readStream(name, options),
      append: async (name, events, expected) => {
        await new Promise((r) => setTimeout(r, 30));
        return store.append(name, events, expected);
      },
      subscribe: (o) => store.subscribe(o),
      setStreamMaxAge: (n, s) => store.setStreamMaxAge(n, s),
      headPosition: () => store.headPosition(),
      close: () => store.close(),
    };
    await expect(
      handleCommand(slowStore, racing, stream, { type: 'Increment', data: { by: 1, max: 100 } }, ctx(), clock, { maxRetries: 2 }),
    ).rejects.toThrow(ConflictError);
    expect(sneaky).toBe(3);
  });

  test('with a state cache, reads only the events appended since the cached fold, wherever they came from', async () => {
    const stream = unique('counter-');
    const reads: Array<bigint | undefined> = [];
    const counting: EventStore = {
      ...store,
      readStream: (name, options) => {
        reads.push(options?.fromRevision);
        return store.readStream(name, options);
      },
      append: (name, events, expected) => store.append(name, events, expected),
      subscribe: (o) => store.subscribe(o),
      setStreamMaxAge: (n, s) => store.setStreamMaxAge(n, s),
      headPosition: () => store.headPosition(),
      close: () => store.close(),
    };
    const cache = createStateCache<number>(10);
    const increment = (by: number) => handleCommand(counting, counter, stream, { type: 'Increment', data: { by, max: 100 } }, ctx(), clock, { cache });
    await increment(1);
    await increment(2);
    // Another process appends behind this one's back: the cached fold catches up on it.
    await handleCommand(store, counter, stream, { type: 'Increment', data: { by: 10, max: 100 } }, ctx(), clock);
    const last = await increment(4);
    expect(last.state).toBe(17);
    expect(last.revision).toBe(3n);
    expect(reads).toEqual([undefined, 1n, 2n]);
    expect(cache.get(stream)).toEqual({ state: 17, revision: 3n });
    // A business rule still sees the whole state.
    await expect(handleCommand(counting, counter, stream, { type: 'Increment', data: { by: 5, max: 20 } }, ctx(), clock, { cache })).rejects.toThrow(
      'Counter limit reached',
    );
  });
});

describe('state cache', () => {
  test('forgets the least recently used stream and never goes back to an older fold', () => {
    const cache = createStateCache<string>(2);
    cache.set('a', { state: 'a1', revision: 1n });
    cache.set('b', { state: 'b1', revision: 1n });
    expect(cache.get('a')?.state).toBe('a1'); // a is now the most recently used
    cache.set('c', { state: 'c1', revision: 1n });
    expect(cache.get('b')).toBeUndefined();
    cache.set('a', { state: 'a0', revision: 0n });
    expect(cache.get('a')).toEqual({ state: 'a1', revision: 1n });
  });
});
