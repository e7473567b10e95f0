import { createMemoryReadStore } from '../../src/infra/readstore/memory';
import type { ReadDoc } from '../../src/infra/readstore/port';
import { mulberry32 } from '../support/prng';
import { readStoreContract } from './readstore.contract';

readStoreContract('memory', async () => {
  const store = createMemoryReadStore();
  return { store, cleanup: () => store.close() };
});

// A start's replay (src/projections/read-models.ts): every write leaves the indexes for later, and every answer is still the same.
readStoreContract('memory, indexing deferred', async () => {
  const store = createMemoryReadStore();
  store.deferIndexing();
  return { store, cleanup: () => store.close() };
});

describe('memory read store', () => {
  interface Doc extends ReadDoc {
    readonly id: string;
    readonly name: string;
    readonly tags: readonly string[];
  }

  it("a start's replay: indexes declared while indexing is deferred over a snapshot's documents answer from the replay's result", async () => {
    interface Hub extends ReadDoc {
      readonly id: string;
      readonly owner: string;
      readonly seenAt: number;
    }
    const snapshot = createMemoryReadStore();
    const before = snapshot.collection<Hub>('hubs');
    for (let i = 0; i < 200; i++) await before.put({ id: `h${i}`, owner: `u${i % 4}`, seenAt: i }, '1');
    const store = createMemoryReadStore(snapshot.exportState());
    const resume = store.deferIndexing();
    const hubs = store.collection<Hub>('hubs');
    await hubs.ensureIndex([{ field: 'owner', order: 'asc' }, { field: 'seenAt', order: 'asc' }]);
    // Every hub seen again (a replay of heartbeats), the order reversed; one moved to another owner.
    for (let i = 0; i < 200; i++) await hubs.put({ id: `h${i}`, owner: i === 5 ? 'u2' : `u${i % 4}`, seenAt: 1000 - i }, '2');
    resume();
    const page = await hubs.find({ where: { owner: 'u1' }, sort: [{ field: 'seenAt', order: 'asc' }], limit: 3 });
    expect(page.map((hub) => hub.id)).toEqual(['h197', 'h193', 'h189']);
    expect(await hubs.count({ owner: 'u1' })).toBe(49);
    expect(await hubs.count({ owner: 'u2' })).toBe(51);
  });

  it('an index declared while indexing is deferred is there for a query made before the deferral ends', async () => {
    const store = createMemoryReadStore();
    store.deferIndexing();
    const docs = store.collection<Doc>('docs');
    await docs.ensureIndex([{ field: 'name', order: 'asc' }, { field: 'id', order: 'desc' }]);
    for (const id of ['a', 'b', 'c']) await docs.put({ id, name: 'n', tags: [] }, '1');
    expect((await docs.find({ where: { name: 'n' }, sort: [{ field: 'id', order: 'desc' }] })).map((d) => d.id)).toEqual(['c', 'b', 'a']);
    expect(await docs.count({ name: 'n' })).toBe(3);
  });

  it('hands out frozen documents, so a mutation fails loudly instead of silently', async () => {
    const docs = createMemoryReadStore().collection<Doc>('docs');
    await docs.put({ id: 'a', name: 'a', tags: ['x'] }, '1');
    const doc = await docs.get('a');
    expect(Object.isFrozen(doc)).toBe(true);
    expect(Object.isFrozen(doc?.tags)).toBe(true);
    expect(() => {
      (doc as unknown as { name: string }).name = 'changed';
    }).toThrow(TypeError);
  });

  it('refuses values that would not survive the trip through MongoDB as they are', async () => {
    const docs = createMemoryReadStore().collection<ReadDoc & Record<string, unknown>>('docs');
    await expect(docs.put({ id: 'a', at: new Date(0) }, '1')).rejects.toThrow(TypeError);
    await expect(docs.put({ id: 'a', big: BigInt(1) }, '1')).rejects.toThrow(TypeError);
    await expect(docs.put({ id: 'a', fn: () => undefined }, '1')).rejects.toThrow(TypeError);
    expect(await docs.get('a')).toBeNull();
  });

  // MongoDB orders strings by UTF-8 bytes, which is code point order; JavaScript's `<` is
  // UTF-16 order and differs past the BMP. Not in the contract: jongodb orders by UTF-16.
  it('orders strings by code point, as MongoDB does, also beyond the BMP', async () => {
    const docs = createMemoryReadStore().collection<Doc>('docs');
    const names = { a: '\u{1F600}', b: '\uFFFD', c: 'z', d: 'é', e: '\uE000' };
    for (const [id, name] of Object.entries(names)) await docs.put({ id, name, tags: [] }, '1');
    const sorted = await docs.find({ sort: [{ field: 'name', order: 'asc' }] });
    expect(sorted.map((doc) => doc.id)).toEqual(['c', 'd', 'e', 'b', 'a']);
    expect((await docs.find({ where: { name: { gt: '\uFFFD' } } })).map((doc) => doc.id)).toEqual(['a']);
    // Ids break ties in the same order, and guards compare the same way.
    await docs.put({ id: '\u{1F600}', name: 'same', tags: [] }, '1');
    await docs.put({ id: '\uFFFD', name: 'same', tags: [] }, '1');
    expect((await docs.find({ where: { name: 'same' } })).map((doc) => doc.id)).toEqual(['\uFFFD', '\u{1F600}']);
    expect(await docs.put({ id: 'a', name: 'x', tags: [] }, '\uFFFD')).toBe(true);
    expect(await docs.put({ id: 'a', name: 'y', tags: [] }, '\u{1F600}')).toBe(true);
  });

  it('keeps a field named __proto__ as data', async () => {
    const docs = createMemoryReadStore().collection<ReadDoc & Record<string, unknown>>('docs');
    const doc = JSON.parse('{"id":"a","__proto__":{"polluted":true}}') as ReadDoc & Record<string, unknown>;
    await docs.put(doc, '1');
    const stored = await docs.get('a');
    expect(Object.getPrototypeOf(stored)).toBe(Object.prototype);
    expect(Object.prototype.hasOwnProperty.call(stored, '__proto__')).toBe(true);
    expect(await docs.count({ '__proto__.polluted': true })).toBe(1);
  });

  it('exports its state and a store made from it answers alike: documents, guards, checkpoints, then indexes declared over them', async () => {
    const source = createMemoryReadStore();
    const docs = source.collection<Doc>('docs');
    await docs.ensureIndex([{ field: 'name', order: 'asc' }], { unique: true });
    await docs.put({ id: 'a', name: 'alpha', tags: ['x', 'y'] }, '0005');
    await docs.put({ id: 'b', name: 'beta', tags: ['y'] }, '0007');
    await source.setCheckpoint('projector', '7/7');
    // Through JSON, as a snapshot file carries it.
    const copy = createMemoryReadStore(JSON.parse(JSON.stringify(source.exportState())) as ReturnType<typeof source.exportState>);
    const restored = copy.collection<Doc>('docs');
    await restored.ensureIndex([{ field: 'name', order: 'asc' }], { unique: true });
    expect(await copy.getCheckpoint('projector')).toBe('7/7');
    expect(await restored.getGuard('b')).toBe('0007');
    expect(await restored.find({ where: { tags: 'y' }, sort: [{ field: 'name', order: 'desc' }] })).toEqual(await docs.find({ where: { tags: 'y' }, sort: [{ field: 'name', order: 'desc' }] }));
    expect(await restored.find({ where: { name: 'alpha' } })).toEqual([{ id: 'a', name: 'alpha', tags: ['x', 'y'] }]);
    // The guards came along: an older write is refused, the unique index holds.
    expect(await restored.put({ id: 'a', name: 'older', tags: [] }, '0004')).toBe(false);
    await expect(restored.put({ id: 'c', name: 'beta', tags: [] }, '0009')).rejects.toThrow(/duplicate key/);
    expect(copy.exportState()).toEqual(source.exportState());
  });

  it('refuses a state that names one document twice', () => {
    const doc = { id: 'a', name: 'a', tags: [] };
    expect(() => createMemoryReadStore({ checkpoints: {}, collections: { docs: [{ doc, guard: '1' }, { doc, guard: '2' }] } })).toThrow(/appears twice/);
  });

  // Groups larger than a block of the sorted index (256), with documents moving inside them.
  it('keeps a large compound-indexed group in order as documents move, answering as a scan does', async () => {
    interface Beat extends ReadDoc {
      readonly id: string;
      readonly owner: string;
      readonly seenAt: string;
      readonly online: boolean;
    }
    const random = mulberry32(5);
    const store = createMemoryReadStore();
    const plain = store.collection<Beat>('plain');
    const indexed = store.collection<Beat>('indexed');
    await indexed.ensureIndex([{ field: 'owner', order: 'asc' }, { field: 'seenAt', order: 'asc' }]);
    await indexed.ensureIndex([{ field: 'owner', order: 'asc' }, { field: 'online', order: 'asc' }, { field: 'seenAt', order: 'asc' }]);
    const write = async (id: string, guard: string): Promise<void> => {
      const doc: Beat = { id, owner: random() < 0.9 ? 'fleet' : 'other', seenAt: String(Math.floor(random() * 500)).padStart(4, '0'), online: random() < 0.8 };
      for (const c of [plain, indexed]) await c.put(doc, guard);
    };
    for (let i = 0; i < 2000; i++) await write(`d${i}`, '1');
    for (let i = 0; i < 3000; i++) await write(`d${Math.floor(random() * 2000)}`, `2${String(i).padStart(6, '0')}`);
    for (let i = 0; i < 200; i++) {
      const id = `d${Math.floor(random() * 2000)}`;
      for (const c of [plain, indexed]) await c.remove(id, '9');
    }
    for (const order of ['asc', 'desc'] as const) {
      for (const skip of [0, 300, 1500]) {
        const query = { where: { owner: 'fleet', online: true }, sort: [{ field: 'seenAt', order }], skip, limit: 50 };
        expect((await indexed.find(query)).map((d) => d.id)).toEqual((await plain.find(query)).map((d) => d.id));
      }
    }
    expect(await indexed.count({ owner: 'fleet', online: true })).toBe(await plain.count({ owner: 'fleet', online: true }));
    expect(await indexed.count({ owner: 'fleet' })).toBe(await plain.count({ owner: 'fleet' }));
  });

  // Writes while indexing is deferred, queries now and then (each catches the indexes up), and the deferral ended midway.
  it('answers alike with indexing deferred, whenever it is queried and when the deferral ends', async () => {
    interface Hub extends ReadDoc {
      readonly id: string;
      readonly owners: readonly string[];
      readonly seenAt: string | null;
      readonly online: boolean;
    }
    const random = mulberry32(11);
    const eager = createMemoryReadStore();
    const deferred = createMemoryReadStore();
    let resume = deferred.deferIndexing();
    const collections = [eager.collection<Hub>('hubs'), deferred.collection<Hub>('hubs')] as const;
    for (const c of collections) {
      await c.ensureIndex([{ field: 'owners', order: 'asc' }, { field: 'seenAt', order: 'asc' }]);
      await c.ensureIndex([{ field: 'owners', order: 'asc' }, { field: 'online', order: 'asc' }, { field: 'seenAt', order: 'asc' }]);
      await c.ensureIndex([{ field: 'online', order: 'asc' }]);
    }
    const owners = ['u1', 'u2', 'u3', 'u4'];
    const answers = async (c: (typeof collections)[number]): Promise<unknown[]> => {
      const found: unknown[] = [];
      for (const owner of owners) {
        for (const order of ['asc', 'desc'] as const) {
          found.push((await c.find({ where: { owners: owner }, sort: [{ field: 'seenAt', order }], skip: 3, limit: 20 })).map((d) => d.id));
          found.push((await c.find({ where: { owners: owner, online: false }, sort: [{ field: 'seenAt', order }], limit: 20 })).map((d) => d.id));
        }
        found.push(await c.count({ owners: owner, online: true }));
      }
      found.push((await c.find({ where: { online: true } })).map((d) => d.id));
      return found;
    };
    let compared = 0;
    for (let i = 0; i < 6000; i++) {
      const id = `h${Math.floor(random() * 300)}`;
      const guard = String(i).padStart(6, '0');
      const roll = random();
      if (roll < 0.05) {
        for (const c of collections) await c.remove(id, guard);
      } else {
        const picked = owners.filter(() => random() < 0.4);
        const doc: Hub = { id, owners: picked, seenAt: random() < 0.1 ? null : String(Math.floor(random() * 400)).padStart(4, '0'), online: random() < 0.6 };
        for (const c of collections) await c.put(doc, guard);
      }
      if (random() < 0.002) {
        expect(await answers(collections[1])).toEqual(await answers(collections[0]));
        compared++;
      }
      if (i === 3000) resume();
      if (i === 4000) resume = deferred.deferIndexing();
    }
    expect(compared).toBeGreaterThan(3);
    resume();
    expect(await answers(collections[1])).toEqual(await answers(collections[0]));
    expect(deferred.exportState()).toEqual(eager.exportState());
  });
});
