import { randomUUID } from 'node:crypto';
import type { EventStore, NewEvent } from '../../src/infra/eventstore/port';
import {
  createMemoryGenerationRegistry,
  createMongoGenerationRegistry,
  type GenerationRegistry,
} from '../../src/infra/readstore/generations';
import { createMemoryReadStore } from '../../src/infra/readstore/memory';
import type { ReadStore } from '../../src/infra/readstore/port';
import { allProjections } from '../../src/projections';
import { USERS_COLLECTION, type UserDoc } from '../../src/projections/users';
import { CHECKPOINT_NAME } from '../../src/projections/projector';
import { openReadModels, type ReadModels } from '../../src/projections/read-models';
import { openEventStore } from '../support/adapters';
import { startJongodb, type Jongodb } from '../support/jongodb';

/** Generations of the read models: the registry's rules, and the live projector following them. */

describe.each<['memory' | 'mongodb']>([['memory'], ['mongodb']])('generation registry (%s)', (kind) => {
  let jongodb: Jongodb | undefined;
  let registry: GenerationRegistry;

  beforeAll(async () => {
    if (kind === 'mongodb') jongodb = await startJongodb();
  });
  afterAll(async () => {
    await jongodb?.stop();
  });
  beforeEach(async () => {
    registry =
      kind === 'memory'
        ? createMemoryGenerationRegistry()
        : await createMongoGenerationRegistry(jongodb?.uri ?? '', { dbName: `gen_${randomUUID().slice(0, 8)}`, pollMs: 20 });
  });
  afterEach(async () => {
    await registry.close();
  });

  test('starts at generation 0; reserved numbers are never handed out twice', async () => {
    expect(await registry.read()).toEqual({ generation: 0, pending: null, switchedAt: null });
    const reserved = await Promise.all([registry.reserve(), registry.reserve(), registry.reserve()]);
    expect(new Set(reserved).size).toBe(3);
    expect(Math.min(...reserved)).toBeGreaterThan(0);
  });

  test('a switch is requested from the served generation only, one at a time, and completed only when pending', async () => {
    const next = await registry.reserve();
    expect(await registry.completeSwitch(next, '2026-01-01T00:00:00.000Z')).toBe(false);
    expect(await registry.requestSwitch(5, next)).toBe(false);
    expect(await registry.requestSwitch(0, next)).toBe(true);
    expect(await registry.requestSwitch(0, next + 1)).toBe(false);
    expect(await registry.read()).toEqual({ generation: 0, pending: next, switchedAt: null });
    const [a, b] = await Promise.all([registry.completeSwitch(next, '2026-01-01T00:00:00.000Z'), registry.completeSwitch(next, '2026-01-01T00:00:01.000Z')]);
    expect([a, b].filter(Boolean)).toHaveLength(1);
    expect(await registry.read()).toEqual({ generation: next, pending: null, switchedAt: expect.any(String) });
  });

  test('watchers hear of changes', async () => {
    const seen: number[] = [];
    const stop = registry.watch((record) => seen.push(record.pending ?? record.generation));
    await registry.requestSwitch(0, await registry.reserve());
    const deadline = Date.now() + 2000;
    while (!seen.includes(1) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    stop();
    expect(seen).toContain(1);
  });
});

describe('the live projector follows the registry', () => {
  const GRACE_MS = 2000;
  let events: EventStore;
  let cleanup: () => Promise<void>;
  let registry: GenerationRegistry;
  let stores: Map<number, ReadStore>;
  /** Generations whose store the read models closed: the grace period after a switch is over. */
  let retired: Set<number>;
  let readModels: ReadModels;

  const meta = { occurredAt: '2026-01-01T00:00:00.000Z', actor: { type: 'crm', id: 't' }, requestId: 'r', causationId: 'c', correlationId: 'c' } as const;
  const synced = (userId: string): NewEvent => ({
    id: randomUUID(),
    type: 'UserSynced',
    data: {
      userId,
      created: true,
      syncId: 1,
      email: `${userId}@example.com`,
      firstName: 'A',
      lastName: 'B',
      isEmailVerified: false,
      profile: { avatar: null, timezone: 'UTC', language: null },
      crm: { userId: null, companyName: null, userType: null, mrr: null, contractLanguage: null, createdBy: null, status: null },
      syncedAt: meta.occurredAt,
    },
    metadata: meta,
  });
  const addUser = async (): Promise<string> => {
    const id = randomUUID();
    await events.append(`user-${id}`, [synced(id)], 'no_stream');
    return id;
  };
  const users = (store: ReadStore | undefined) => (store as ReadStore).collection<UserDoc>(USERS_COLLECTION);
  const until = async (check: () => Promise<boolean>): Promise<void> => {
    const deadline = Date.now() + 20_000;
    while (!(await check())) {
      if (Date.now() > deadline) throw new Error('timed out');
      await new Promise((r) => setTimeout(r, 10));
    }
  };

  beforeEach(async () => {
    const opened = await openEventStore('embedded');
    events = opened.value;
    cleanup = opened.cleanup;
    registry = createMemoryGenerationRegistry();
    stores = new Map();
    retired = new Set();
    readModels = await openReadModels({
      eventStore: events,
      registry,
      openStore: async (generation) => {
        let store = stores.get(generation);
        if (store === undefined) {
          store = createMemoryReadStore();
          stores.set(generation, store);
        }
        const inner = store;
        return {
          ...inner,
          close: async () => {
            retired.add(generation);
            await inner.close();
          },
        };
      },
      staging: 'direct',
      // Long enough that an event added right after the switch lands inside it on a loaded
      // machine; its end is observed (the previous generation's store retired), not slept on.
      graceMs: GRACE_MS,
      pollMs: 10,
      retireDelayMs: 0,
    });
  });
  afterEach(async () => {
    await readModels.close();
    await cleanup();
  });

  test('a pending generation is fed with the current one, each from its own checkpoint, switched to, and then fed alone', async () => {
    const first = await addUser();
    const projector = await readModels.startProjector(allProjections());
    await projector.caughtUp;
    const current = stores.get(0) as ReadStore;

    // Generation 1, as a rebuild left it: caught up to `first`, then events went on.
    const next = await registry.reserve();
    const built = createMemoryReadStore();
    stores.set(next, built);
    await users(built).load([{ doc: (await users(current).get(first)) as UserDoc, guard: (await users(current).getGuard(first)) as string }]);
    await built.setCheckpoint(CHECKPOINT_NAME, (await current.getCheckpoint(CHECKPOINT_NAME)) as string);
    const second = await addUser();
    await until(async () => (await users(current).get(second)) !== null);
    expect(await users(built).get(second)).toBeNull();

    await registry.requestSwitch(0, next);
    await until(async () => readModels.generation() === next);
    expect((await users(readModels.readStore).find()).map((u) => u.id).sort()).toEqual([first, second].sort());

    // During the grace period both generations get every event; after it, only the new one.
    const third = await addUser();
    await until(async () => (await users(built).get(third)) !== null);
    expect(await users(current).get(third)).not.toBeNull();
    await until(async () => retired.has(0));
    const left = await current.getCheckpoint(CHECKPOINT_NAME);
    const fourth = await addUser();
    await until(async () => (await users(built).get(fourth)) !== null);
    await until(async () => (await built.getCheckpoint(CHECKPOINT_NAME)) !== left);
    expect(await users(current).get(fourth)).toBeNull();
    expect(await current.getCheckpoint(CHECKPOINT_NAME)).toBe(left);
    await projector.stop();
  });

  test('a switch pending when the projector starts is completed by it, even over an empty log', async () => {
    await registry.requestSwitch(0, await registry.reserve());
    const projector = await readModels.startProjector(allProjections());
    await projector.caughtUp;
    await until(async () => readModels.generation() === 1);
    expect(await registry.read()).toMatchObject({ generation: 1, pending: null });
    await projector.stop();
  });

  test('a rebuild with no live projector in the way catches up and switches by itself', async () => {
    const ids = [await addUser(), await addUser()];
    const report = await readModels.rebuild(allProjections());
    expect(report).toMatchObject({ generation: 1, previousGeneration: 0, events: 2, collections: { users: 2 } });
    expect(readModels.generation()).toBe(1);
    expect((await users(readModels.readStore).find()).map((u) => u.id).sort()).toEqual(ids.sort());
  });
});
