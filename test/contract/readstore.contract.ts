import { gatheredGet } from '../../src/infra/gathered';
import type { Query, ReadCollection, ReadDoc, ReadStore, Where } from '../../src/infra/readstore/port';
import { mulberry32 } from '../support/prng';

/**
 * The read-model store contract, run against every adapter. Semantics pinned here (they
 * are MongoDB's; the memory adapter follows them):
 * - the guard is compared as a string; a put or remove applies only over a lower guard;
 * - equality with null matches null and absent fields; a range never matches null, an
 *   absent field, or a value of another type than its bound;
 * - strings compare in binary order ('B' < 'a'), so ISO timestamps compare as strings;
 * - null and absent sort first ascending, last descending; ties are broken by id ascending;
 * - limit 0 returns nothing; malformed filters are rejected, never passed through.
 */
export function readStoreContract(
  name: string,
  open: () => Promise<{ store: ReadStore; cleanup: () => Promise<void> }>,
): void {
  describe(`ReadStore contract: ${name}`, () => {
    let store: ReadStore;
    let cleanup: () => Promise<void>;

    beforeEach(async () => {
      ({ store, cleanup } = await open());
    });

    afterEach(async () => {
      await cleanup();
    });

    interface Device extends ReadDoc {
      readonly id: string;
      readonly userId: string;
      readonly name: string;
      readonly rank?: number | null;
      readonly seenAt?: string | null;
      readonly online?: boolean;
      readonly tags?: readonly string[];
      readonly location?: { readonly room: string; readonly floor: number };
    }

    const devices = (): ReadCollection<Device> => store.collection<Device>('devices');

    const device = (id: string, fields: Partial<Omit<Device, 'id'>> = {}): Device => ({
      id,
      userId: 'u1',
      name: `device ${id}`,
      ...fields,
    });

    const ids = (docs: readonly ReadDoc[]): string[] => docs.map((doc) => doc.id);

    async function seed(collection: ReadCollection<Device>, docs: readonly Device[]): Promise<void> {
      for (const doc of docs) expect(await collection.put(doc, 'g1')).toBe(true);
    }

    describe('get, put and the guard', () => {
      it('getMany answers the documents that exist with their guards; writeMany applies each change under its own guard', async () => {
        await devices().put(device('a', { name: 'a1' }), 'g2');
        await devices().put(device('b', { name: 'b1' }), 'g2');
        await devices().put(device('c', { name: 'c1' }), 'g2');
        const found = await devices().getMany(['a', 'b', 'missing']);
        expect([...found.keys()].sort()).toEqual(['a', 'b']);
        expect(found.get('a')).toEqual({ doc: device('a', { name: 'a1' }), guard: 'g2' });
        expect(await devices().getMany([])).toEqual(new Map());
        // Reads gathered over one turn of the loop (src/infra/gathered.ts) answer what `get` does, one by one.
        const gathered = gatheredGet(devices, 2);
        const ids = ['a', 'missing', 'b', 'a', 'c'];
        expect(await Promise.all(ids.map((id) => gathered(id)))).toEqual(await Promise.all(ids.map((id) => devices().get(id))));

        await devices().writeMany([
          { kind: 'put', doc: device('a', { name: 'a2' }), guard: 'g3' },
          // Refused (not above the stored guard): skipped, and the rest still written.
          { kind: 'put', doc: device('b', { name: 'b-old' }), guard: 'g1' },
          { kind: 'put', doc: device('d', { name: 'd1' }), guard: 'g1' },
          { kind: 'remove', id: 'c', guard: 'g3' },
          { kind: 'remove', id: 'b', guard: 'g2' },
        ]);
        expect(await devices().get('a')).toEqual(device('a', { name: 'a2' }));
        expect(await devices().getGuard('a')).toBe('g3');
        expect(await devices().get('b')).toEqual(device('b', { name: 'b1' }));
        expect(await devices().get('c')).toBeNull();
        expect(await devices().get('d')).toEqual(device('d', { name: 'd1' }));
        expect(await devices().count()).toBe(3);
        await devices().writeMany([]);
        expect(await devices().count()).toBe(3);
      });

      it('answers null for a document that was never written', async () => {
        expect(await devices().get('missing')).toBeNull();
        expect(await devices().getGuard('missing')).toBeNull();
      });

      it('round-trips a document and its guard', async () => {
        const doc = device('d1', {
          rank: 2.5,
          seenAt: '2024-05-01T10:00:00.000Z',
          online: false,
          tags: ['a', 'b'],
          location: { room: 'kitchen', floor: 0 },
        });
        expect(await devices().put(doc, '0001')).toBe(true);
        expect(await devices().get('d1')).toEqual(doc);
        expect(await devices().getGuard('d1')).toBe('0001');
      });

      it('keeps null values and leaves undefined ones out', async () => {
        await devices().put({ ...device('d1'), rank: null, seenAt: undefined }, '1');
        const stored = await devices().get('d1');
        expect(stored).toEqual({ id: 'd1', userId: 'u1', name: 'device d1', rank: null });
        expect(stored !== null && 'seenAt' in stored).toBe(false);
      });

      it('writes over a lower guard only', async () => {
        const first = device('d1', { name: 'first' });
        expect(await devices().put(first, '0005')).toBe(true);

        expect(await devices().put(device('d1', { name: 'older' }), '0004')).toBe(false);
        expect(await devices().put(device('d1', { name: 'same guard' }), '0005')).toBe(false);
        expect(await devices().get('d1')).toEqual(first);
        expect(await devices().getGuard('d1')).toBe('0005');

        const newer = device('d1', { name: 'newer' });
        expect(await devices().put(newer, '0006')).toBe(true);
        expect(await devices().get('d1')).toEqual(newer);
        expect(await devices().getGuard('d1')).toBe('0006');
      });

      it('replaces the whole document: fields missing from the new one are gone', async () => {
        await devices().put(device('d1', { rank: 1, tags: ['x'] }), '1');
        await devices().put(device('d1', { online: true }), '2');
        expect(await devices().get('d1')).toEqual(device('d1', { online: true }));
      });

      it('compares guards as strings, not numbers', async () => {
        await devices().put(device('d1', { name: 'at 10' }), '10');
        // '9' > '10' as strings.
        expect(await devices().put(device('d1', { name: 'at 9' }), '9')).toBe(true);
        expect(await devices().put(device('d1', { name: 'at 100' }), '100')).toBe(false);
        expect((await devices().get('d1'))?.name).toBe('at 9');
      });

      it('applying the same (document, guard) twice leaves the same state', async () => {
        const doc = device('d1', { rank: 3 });
        expect(await devices().put(doc, 'g7')).toBe(true);
        const once = { doc: await devices().get('d1'), guard: await devices().getGuard('d1'), count: await devices().count() };
        expect(await devices().put(doc, 'g7')).toBe(false);
        const twice = { doc: await devices().get('d1'), guard: await devices().getGuard('d1'), count: await devices().count() };
        expect(twice).toEqual(once);
        expect(twice).toEqual({ doc, guard: 'g7', count: 1 });
      });

      it('lets the highest guard win whatever order concurrent puts arrive in', async () => {
        const guards = ['03', '07', '01', '09', '05', '02', '08', '04', '06'];
        const results = await Promise.all(guards.map((guard) => devices().put(device('d1', { name: `at ${guard}` }), guard)));
        expect(results[guards.indexOf('09')]).toBe(true);
        expect(await devices().get('d1')).toEqual(device('d1', { name: 'at 09' }));
        expect(await devices().getGuard('d1')).toBe('09');
        expect(await devices().count()).toBe(1);
      });

      it('rejects ids and guards that are not strings', async () => {
        await expect(devices().get(42 as unknown as string)).rejects.toThrow();
        await expect(devices().get({ $ne: null } as unknown as string)).rejects.toThrow();
        await expect(devices().put(device('d1'), { $gt: '' } as unknown as string)).rejects.toThrow();
        await expect(devices().put({ ...device('d1'), id: { $ne: null } } as unknown as Device, '1')).rejects.toThrow();
        await expect(devices().remove({ $ne: null } as unknown as string, '1')).rejects.toThrow();
        expect(await devices().count()).toBe(0);
      });
    });

    describe('stored documents cannot be changed through the objects handed in or out', () => {
      it('a document mutated after put is stored as it was', async () => {
        const doc = { id: 'd1', userId: 'u1', name: 'original', tags: ['a'], location: { room: 'hall', floor: 1 } };
        await devices().put(doc, '1');
        doc.name = 'changed';
        doc.tags.push('b');
        doc.location.room = 'attic';
        expect(await devices().get('d1')).toEqual({ id: 'd1', userId: 'u1', name: 'original', tags: ['a'], location: { room: 'hall', floor: 1 } });
      });

      it('mutating a returned document does not change the next get or find', async () => {
        const original = device('d1', { tags: ['a'], location: { room: 'hall', floor: 1 } });
        await devices().put(original, '1');
        const tryMutate = (doc: Device | undefined | null): void => {
          const writable = doc as unknown as { name: string; tags: string[]; location: { room: string } };
          // A frozen document throws in strict mode: that also keeps the store intact.
          const attempts = [
            () => { writable.name = 'changed'; },
            () => { writable.tags.push('b'); },
            () => { writable.location.room = 'attic'; },
          ];
          for (const attempt of attempts) {
            try {
              attempt();
            } catch {
              // frozen
            }
          }
        };
        tryMutate(await devices().get('d1'));
        tryMutate((await devices().find())[0]);
        expect(await devices().get('d1')).toEqual(original);
        expect(await devices().find({ where: { name: 'changed' } })).toEqual([]);
      });
    });

    describe('remove', () => {
      it('answers false for a missing document', async () => {
        expect(await devices().remove('missing', '9')).toBe(false);
      });

      it('deletes over a lower guard only', async () => {
        await devices().put(device('d1'), '0005');
        expect(await devices().remove('d1', '0004')).toBe(false);
        expect(await devices().remove('d1', '0005')).toBe(false);
        expect(await devices().get('d1')).toEqual(device('d1'));

        expect(await devices().remove('d1', '0006')).toBe(true);
        expect(await devices().get('d1')).toBeNull();
        expect(await devices().getGuard('d1')).toBeNull();
        expect(await devices().count()).toBe(0);
        expect(await devices().remove('d1', '0007')).toBe(false);
      });

      it('leaves a tombstone no read sees: a put up to its guard is refused, a later one writes the id again', async () => {
        await devices().put(device('d1'), '5');
        await devices().put(device('d2'), '5');
        await devices().remove('d1', '6');
        expect(await devices().put(device('d1', { name: 'replayed' }), '1')).toBe(false);
        expect(await devices().put(device('d1', { name: 'replayed' }), '6')).toBe(false);
        expect(await devices().get('d1')).toBeNull();
        expect(await devices().getGuard('d1')).toBeNull();
        expect(await devices().getMany(['d1', 'd2'])).toEqual(new Map([['d2', { doc: device('d2'), guard: '5' }]]));
        expect((await devices().find()).map((d) => d.id)).toEqual(['d2']);
        expect(await devices().count()).toBe(1);
        expect(await devices().put(device('d1', { name: 'again' }), '7')).toBe(true);
        expect((await devices().get('d1'))?.name).toBe('again');
        expect(await devices().count()).toBe(2);
      });

      it('leaves a tombstone for a missing document too', async () => {
        expect(await devices().remove('d9', '6')).toBe(false);
        expect(await devices().put(device('d9'), '5')).toBe(false);
        expect(await devices().get('d9')).toBeNull();
        expect(await devices().put(device('d9'), '8')).toBe(true);
      });
    });

    describe('find and count with where', () => {
      const fleet: readonly Device[] = [
        device('a', { userId: 'u1', rank: 3, seenAt: '2024-01-02T00:00:00.000Z', online: true, tags: ['x', 'y'], location: { room: 'hall', floor: 0 } }),
        device('b', { userId: 'u1', rank: null, seenAt: null, online: false }),
        device('c', { userId: 'u2', rank: 1, seenAt: '2023-12-31T23:59:59.999Z', tags: [] }),
        device('d', { userId: 'u2', rank: 10, seenAt: '2024-01-01T00:00:00.000Z', online: true, tags: ['y'], location: { room: 'attic', floor: 2 } }),
        device('e', { userId: 'u3', rank: -2.5, online: false }),
        device('f', { userId: 'u1', name: '10' }),
      ];

      async function where(filter: Where): Promise<string[]> {
        const found = ids(await devices().find({ where: filter }));
        // count must agree with find, for every filter.
        expect(await devices().count(filter)).toBe(found.length);
        return found;
      }

      beforeEach(async () => {
        await seed(devices(), [...fleet].reverse());
      });

      it('without a query returns everything ordered by id', async () => {
        expect(ids(await devices().find())).toEqual(['a', 'b', 'c', 'd', 'e', 'f']);
        expect(await devices().count()).toBe(6);
      });

      it('matches equality on strings, numbers and booleans', async () => {
        expect(await where({ userId: 'u1' })).toEqual(['a', 'b', 'f']);
        expect(await where({ rank: 10 })).toEqual(['d']);
        expect(await where({ rank: -2.5 })).toEqual(['e']);
        expect(await where({ online: false })).toEqual(['b', 'e']);
        expect(await where({ online: true })).toEqual(['a', 'd']);
        expect(await where({ userId: 'nobody' })).toEqual([]);
      });

      it('does not match across types: the number 10 is not the string "10"', async () => {
        expect(await where({ name: '10' })).toEqual(['f']);
        expect(await where({ name: 10 })).toEqual([]);
        expect(await where({ rank: '10' })).toEqual([]);
      });

      it('combines fields with and', async () => {
        expect(await where({ userId: 'u2', online: true })).toEqual(['d']);
        expect(await where({ userId: 'u1', rank: 10 })).toEqual([]);
      });

      it('matches null against null and absent fields', async () => {
        expect(await where({ rank: null })).toEqual(['b', 'f']);
        expect(await where({ seenAt: null })).toEqual(['b', 'e', 'f']);
        expect(await where({ online: null })).toEqual(['c', 'f']);
      });

      it('matches in on scalars, with null standing for absent too, and nothing for an empty list', async () => {
        expect(await where({ userId: { in: ['u2', 'u3'] } })).toEqual(['c', 'd', 'e']);
        expect(await where({ rank: { in: [1, 3, 99] } })).toEqual(['a', 'c']);
        expect(await where({ rank: { in: [null, 10] } })).toEqual(['b', 'd', 'f']);
        expect(await where({ userId: { in: [] } })).toEqual([]);
      });

      it('matches ranges on numbers with inclusive and exclusive bounds', async () => {
        expect(await where({ rank: { gt: 1 } })).toEqual(['a', 'd']);
        expect(await where({ rank: { gte: 1 } })).toEqual(['a', 'c', 'd']);
        expect(await where({ rank: { lt: 3 } })).toEqual(['c', 'e']);
        expect(await where({ rank: { lte: 3 } })).toEqual(['a', 'c', 'e']);
        expect(await where({ rank: { gt: 1, lte: 10 } })).toEqual(['a', 'd']);
        expect(await where({ rank: { gt: 3, lt: 3 } })).toEqual([]);
      });

      it('matches ranges on ISO timestamps as strings', async () => {
        expect(await where({ seenAt: { gte: '2024-01-01T00:00:00.000Z' } })).toEqual(['a', 'd']);
        expect(await where({ seenAt: { lt: '2024-01-01T00:00:00.000Z' } })).toEqual(['c']);
        expect(await where({ seenAt: { gte: '2024-01-01', lt: '2024-01-02' } })).toEqual(['d']);
        expect(await where({ name: { gte: 'device b', lte: 'device d' } })).toEqual(['b', 'c', 'd']);
      });

      it('never matches null, absent fields or other types with a range', async () => {
        // b has rank null, f has no rank: neither is below anything.
        expect(await where({ rank: { lt: 1000 } })).toEqual(['a', 'c', 'd', 'e']);
        expect(await where({ seenAt: { lte: '9999' } })).toEqual(['a', 'c', 'd']);
        // A string bound does not match numbers; a number bound does not match strings.
        expect(await where({ rank: { lt: 'zzz' } })).toEqual([]);
        expect(await where({ name: { gte: 0 } })).toEqual([]);
      });

      it('treats a range whose bounds are all undefined as no condition', async () => {
        expect(await where({ rank: { gte: undefined, lt: undefined }, userId: 'u2' })).toEqual(['c', 'd']);
      });

      it('matches an array field when one of its elements matches', async () => {
        expect(await where({ tags: 'y' })).toEqual(['a', 'd']);
        expect(await where({ tags: { in: ['x', 'nope'] } })).toEqual(['a']);
      });

      it('reads dotted paths into nested objects', async () => {
        expect(await where({ 'location.room': 'attic' })).toEqual(['d']);
        expect(await where({ 'location.floor': { lt: 1 } })).toEqual(['a']);
      });

      it('filters by id', async () => {
        expect(await where({ id: 'c' })).toEqual(['c']);
        expect(await where({ id: { in: ['e', 'a', 'zz'] } })).toEqual(['a', 'e']);
        expect(await where({ id: { gt: 'b', lte: 'd' } })).toEqual(['c', 'd']);
      });

      it('rejects filters that are not scalars or the port shapes, operators included', async () => {
        const bad: unknown[] = [
          { name: { $ne: 'x' } },
          { name: { in: ['a'], $where: 'true' } },
          { name: { in: 'a' } },
          { name: { in: [{ $gt: '' }] } },
          { name: { gt: { $gt: '' } } },
          { rank: { gte: null } },
          { name: ['a'] },
          { name: undefined },
          { name: { eq: 'a' } },
          { $where: 'true' },
          { $or: [{ name: 'a' }] },
          { 'location.$room': 'x' },
          { '': 'x' },
        ];
        for (const filter of bad) {
          await expect(devices().find({ where: filter as Where })).rejects.toThrow();
          await expect(devices().count(filter as Where)).rejects.toThrow();
        }
      });

      it('rejects malformed sort keys, skip and limit', async () => {
        const bad: unknown[] = [
          { sort: [{ field: 'name', order: 1 }] },
          { sort: [{ field: '$name', order: 'asc' }] },
          { sort: { name: 'asc' } },
          { skip: -1 },
          { limit: -1 },
          { limit: 1.5 },
          { skip: '1' },
        ];
        for (const query of bad) await expect(devices().find(query as Query)).rejects.toThrow();
      });
    });

    describe('sort, tie-break and pagination', () => {
      it('sorts strings in binary order, both ways, ties by id', async () => {
        await seed(devices(), [
          device('1', { name: 'b' }),
          device('2', { name: 'B' }),
          device('3', { name: 'a' }),
          device('4', { name: 'é' }),
          device('5', { name: 'ab' }),
          device('6', { name: 'a' }),
        ]);
        expect(ids(await devices().find({ sort: [{ field: 'name', order: 'asc' }] }))).toEqual(['2', '3', '6', '5', '1', '4']);
        expect(ids(await devices().find({ sort: [{ field: 'name', order: 'desc' }] }))).toEqual(['4', '1', '5', '3', '6', '2']);
      });

      it('sorts numbers numerically, not as text', async () => {
        await seed(devices(), [
          device('a', { rank: 9 }),
          device('b', { rank: 10 }),
          device('c', { rank: -1 }),
          device('d', { rank: 0.5 }),
          device('e', { rank: 100 }),
        ]);
        expect(ids(await devices().find({ sort: [{ field: 'rank', order: 'asc' }] }))).toEqual(['c', 'd', 'a', 'b', 'e']);
        expect(ids(await devices().find({ sort: [{ field: 'rank', order: 'desc' }] }))).toEqual(['e', 'b', 'a', 'd', 'c']);
      });

      it('sorts ISO timestamps chronologically', async () => {
        await seed(devices(), [
          device('a', { seenAt: '2024-03-01T00:00:00.000Z' }),
          device('b', { seenAt: '2023-12-31T23:59:59.999Z' }),
          device('c', { seenAt: '2024-01-01T00:00:00.000Z' }),
          device('d', { seenAt: '2024-01-01T00:00:00.001Z' }),
        ]);
        expect(ids(await devices().find({ sort: [{ field: 'seenAt', order: 'asc' }] }))).toEqual(['b', 'c', 'd', 'a']);
        expect(ids(await devices().find({ sort: [{ field: 'seenAt', order: 'desc' }] }))).toEqual(['a', 'd', 'c', 'b']);
      });

      it('puts null and absent values first ascending and last descending', async () => {
        await seed(devices(), [
          device('a', { rank: 2 }),
          device('b', { rank: null }),
          device('c', { rank: 1 }),
          device('d'),
          device('e', { rank: 3 }),
        ]);
        const asc = ids(await devices().find({ sort: [{ field: 'rank', order: 'asc' }] }));
        expect(asc.slice(0, 2).sort()).toEqual(['b', 'd']);
        expect(asc.slice(2)).toEqual(['c', 'a', 'e']);
        const desc = ids(await devices().find({ sort: [{ field: 'rank', order: 'desc' }] }));
        expect(desc.slice(0, 3)).toEqual(['e', 'a', 'c']);
        expect(desc.slice(3).sort()).toEqual(['b', 'd']);
      });

      it('breaks ties among nulls by id ascending in both directions', async () => {
        await seed(devices(), [device('c', { rank: null }), device('a', { rank: null }), device('b', { rank: 1 }), device('d', { rank: null })]);
        expect(ids(await devices().find({ sort: [{ field: 'rank', order: 'asc' }] }))).toEqual(['a', 'c', 'd', 'b']);
        expect(ids(await devices().find({ sort: [{ field: 'rank', order: 'desc' }] }))).toEqual(['b', 'a', 'c', 'd']);
      });

      it('applies sort keys in order and breaks remaining ties by id ascending, even descending', async () => {
        await seed(devices(), [
          device('e', { userId: 'u1', rank: 1 }),
          device('b', { userId: 'u2', rank: 1 }),
          device('d', { userId: 'u1', rank: 2 }),
          device('a', { userId: 'u1', rank: 1 }),
          device('c', { userId: 'u2', rank: 2 }),
        ]);
        const sort = [
          { field: 'userId', order: 'asc' },
          { field: 'rank', order: 'desc' },
        ] as const;
        expect(ids(await devices().find({ sort }))).toEqual(['d', 'a', 'e', 'c', 'b']);
        expect(ids(await devices().find({ sort: [{ field: 'rank', order: 'desc' }] }))).toEqual(['c', 'd', 'a', 'b', 'e']);
        expect(ids(await devices().find({ sort: [{ field: 'id', order: 'desc' }] }))).toEqual(['e', 'd', 'c', 'b', 'a']);
      });

      it('pages with skip and limit without gaps or repeats, over many ties', async () => {
        const all = Array.from({ length: 23 }, (_, i) => device(`d${String(i).padStart(2, '0')}`, { rank: i % 3, userId: i % 2 === 0 ? 'u1' : 'u2' }));
        await seed(devices(), [...all].reverse());
        const query: Query = { where: { userId: { in: ['u1', 'u2'] } }, sort: [{ field: 'rank', order: 'desc' }] };
        const full = ids(await devices().find(query));
        expect(full).toHaveLength(23);
        expect(full.slice(0, 3)).toEqual(['d02', 'd05', 'd08']);

        const pages: string[] = [];
        for (let skip = 0; skip < 30; skip += 5) pages.push(...ids(await devices().find({ ...query, skip, limit: 5 })));
        expect(pages).toEqual(full);
        expect(new Set(pages).size).toBe(23);

        expect(ids(await devices().find({ ...query, skip: 20 }))).toEqual(full.slice(20));
        expect(ids(await devices().find({ ...query, limit: 2 }))).toEqual(full.slice(0, 2));
        expect(await devices().find({ ...query, skip: 23 })).toEqual([]);
        expect(await devices().find({ ...query, limit: 0 })).toEqual([]);
      });

      it('pages stably when only a few documents match a large collection', async () => {
        const all = Array.from({ length: 60 }, (_, i) => device(`d${String(i).padStart(2, '0')}`, { userId: `u${i % 4}`, rank: i % 5 }));
        await seed(devices(), all);
        const query: Query = { where: { userId: 'u1' }, sort: [{ field: 'rank', order: 'asc' }] };
        const expected = all
          .filter((doc) => doc.userId === 'u1')
          .sort((a, b) => (a.rank ?? 0) - (b.rank ?? 0) || (a.id < b.id ? -1 : 1))
          .map((doc) => doc.id);
        expect(ids(await devices().find(query))).toEqual(expected);
        expect(ids(await devices().find({ ...query, skip: 3, limit: 4 }))).toEqual(expected.slice(3, 7));
        // A short page of a large result (the memory adapter selects it without a full sort).
        expect(ids(await devices().find({ sort: [{ field: 'rank', order: 'desc' }], limit: 3 }))).toEqual(['d04', 'd09', 'd14']);
        expect(ids(await devices().find({ sort: [{ field: 'rank', order: 'asc' }], skip: 2, limit: 3 }))).toEqual(['d10', 'd15', 'd20']);
      });
    });

    describe('indexes', () => {
      it('a compound index answers pages and counts exactly as a scan does, as documents change and go', async () => {
        const random = mulberry32(11);
        const pick = <T>(values: readonly T[]): T => values[Math.floor(random() * values.length)] as T;
        const plain = store.collection<Device>('plain');
        const indexed = store.collection<Device>('indexed');
        await indexed.ensureIndex([{ field: 'tags', order: 'asc' }, { field: 'seenAt', order: 'asc' }]);
        await indexed.ensureIndex([{ field: 'tags', order: 'asc' }, { field: 'online', order: 'asc' }, { field: 'name', order: 'asc' }]);
        const users = ['u1', 'u2', 'u3'];
        const write = async (id: string, guard: string): Promise<void> => {
          // Ties on purpose: few distinct times and names; some absent or null.
          const fields: Partial<Omit<Device, 'id'>> = {
            name: pick(['a', 'b', 'B', 'c']),
            online: pick([true, false]),
            tags: users.filter(() => random() < 0.5),
            ...(random() < 0.8 ? { seenAt: pick(['2026-01-01', '2026-01-02', '2026-01-03', null]) } : {}),
          };
          for (const c of [plain, indexed]) await c.put(device(id, fields), guard);
        };
        const docIds = Array.from({ length: 40 }, (_, i) => `d${String(i).padStart(2, '0')}`);
        for (const id of docIds) await write(id, '1');
        for (const id of docIds.filter(() => random() < 0.3)) await write(id, '2');
        for (const id of docIds.filter(() => random() < 0.1)) for (const c of [plain, indexed]) await c.remove(id, '3');
        for (let q = 0; q < 40; q++) {
          const where: Where = {
            tags: random() < 0.7 ? pick(users) : { in: users.filter(() => random() < 0.6) },
            ...(random() < 0.5 ? { online: pick([true, false]) } : {}),
          };
          const query: Query = { where, sort: [{ field: pick(['seenAt', 'name']), order: pick(['asc', 'desc'] as const) }], skip: pick([0, 0, 3]), limit: pick([5, 20, 100]) };
          expect(ids(await indexed.find(query))).toEqual(ids(await plain.find(query)));
          expect(await indexed.count(where)).toBe(await plain.count(where));
        }
      });

      it('declaring an index twice is harmless and queries answer the same before and after', async () => {
        await seed(devices(), [device('a', { userId: 'u1' }), device('b', { userId: 'u2' }), device('c', { userId: 'u1', rank: 1 })]);
        const before = ids(await devices().find({ where: { userId: 'u1' } }));
        const fields = [
          { field: 'userId', order: 'asc' },
          { field: 'rank', order: 'desc' },
        ] as const;
        await devices().ensureIndex(fields);
        await devices().ensureIndex(fields);
        expect(ids(await devices().find({ where: { userId: 'u1' } }))).toEqual(before);
        expect(before).toEqual(['a', 'c']);
      });

      it('keeps indexed queries right as documents change and go', async () => {
        await devices().ensureIndex([{ field: 'userId', order: 'asc' }]);
        await devices().put(device('a', { userId: 'u1' }), '1');
        await devices().put(device('b', { userId: 'u1' }), '1');
        await devices().put(device('c'), '1');
        await devices().put(device('a', { userId: 'u2' }), '2');
        expect(ids(await devices().find({ where: { userId: 'u1' } }))).toEqual(['b', 'c']);
        expect(ids(await devices().find({ where: { userId: { in: ['u2', 'u9'] } } }))).toEqual(['a']);
        await devices().remove('b', '2');
        expect(ids(await devices().find({ where: { userId: 'u1' } }))).toEqual(['c']);
        expect(await devices().count({ userId: 'u2' })).toBe(1);
        await devices().clear();
        expect(await devices().count({ userId: 'u2' })).toBe(0);
        await devices().put(device('z', { userId: 'u2' }), '1');
        expect(ids(await devices().find({ where: { userId: 'u2' } }))).toEqual(['z']);
      });

      it('an index on an array field finds a document by any of its elements, once, as documents change and go', async () => {
        await devices().ensureIndex([
          { field: 'tags', order: 'asc' },
          { field: 'name', order: 'asc' },
        ]);
        await devices().put(device('a', { tags: ['x', 'y'] }), '1');
        await devices().put(device('b', { tags: ['y'] }), '1');
        await devices().put(device('c', { tags: [] }), '1');
        await devices().put(device('d'), '1');
        await devices().put(device('e', { tags: ['x', 'x'] }), '1');
        expect(ids(await devices().find({ where: { tags: 'x' } }))).toEqual(['a', 'e']);
        expect(ids(await devices().find({ where: { tags: { in: ['x', 'y'] } } }))).toEqual(['a', 'b', 'e']);
        expect(await devices().count({ tags: { in: ['x', 'y'] } })).toBe(3);
        expect(ids(await devices().find({ where: { tags: { in: ['y', 'x'] } }, sort: [{ field: 'name', order: 'desc' }], limit: 2 }))).toEqual(['e', 'b']);
        expect(ids(await devices().find({ where: { tags: null } }))).toEqual(['d']);
        await devices().put(device('a', { tags: ['z'] }), '2');
        expect(ids(await devices().find({ where: { tags: 'x' } }))).toEqual(['e']);
        expect(ids(await devices().find({ where: { tags: 'z' } }))).toEqual(['a']);
        await devices().remove('b', '2');
        expect(await devices().count({ tags: 'y' })).toBe(0);
        expect(ids(await devices().find({ where: { tags: { in: ['x', 'z'] }, online: { in: [null] } } }))).toEqual(['a', 'e']);
      });

      it('an index on a field holding scalars, arrays and objects answers every shape as an unindexed query does', async () => {
        const things = store.collection<ReadDoc & Record<string, unknown>>('things');
        const docs = [
          { id: 'a', tag: 'x', on: true },
          { id: 'b', tag: ['x', 'y'], on: true },
          { id: 'c', tag: [{ x: 1 }, 'x'], on: true },
          { id: 'd', tag: { x: 1 }, on: true },
          { id: 'e', tag: ['x'], on: false },
          { id: 'f', on: true },
          { id: 'g', tag: [null, 'z'], on: true },
        ];
        for (const doc of docs) await things.put(doc, '1');
        const queries: Where[] = [{ tag: 'x' }, { tag: 'x', on: true }, { tag: { in: ['x', 'z'] }, on: true }, { tag: null }, { tag: { in: [null, 'y'] } }];
        const unindexed = await Promise.all(queries.map(async (where) => ids(await things.find({ where }))));
        await things.ensureIndex([{ field: 'tag', order: 'asc' }]);
        for (const [i, where] of queries.entries()) expect(ids(await things.find({ where }))).toEqual(unindexed[i]);
        expect(unindexed).toEqual([['a', 'b', 'c', 'e'], ['a', 'b', 'c'], ['a', 'b', 'c', 'g'], ['f', 'g'], ['b', 'f', 'g']]);
      });

      it('a unique index refuses a second document with the same key and writes nothing', async () => {
        const users = store.collection<{ id: string; email: string }>('users');
        await users.ensureIndex([{ field: 'email', order: 'asc' }], { unique: true });
        expect(await users.put({ id: 'u1', email: 'a@example.com' }, '1')).toBe(true);
        await expect(users.put({ id: 'u2', email: 'a@example.com' }, '1')).rejects.toThrow();
        expect(await users.get('u2')).toBeNull();
        // The owner may rewrite itself, and once it moves on the key is free.
        expect(await users.put({ id: 'u1', email: 'a@example.com' }, '2')).toBe(true);
        expect(await users.put({ id: 'u1', email: 'b@example.com' }, '3')).toBe(true);
        expect(await users.put({ id: 'u2', email: 'a@example.com' }, '1')).toBe(true);
        expect(ids(await users.find({ sort: [{ field: 'email', order: 'asc' }] }))).toEqual(['u2', 'u1']);
      });
    });

    describe('load (bulk insert for rebuilds)', () => {
      it('inserts documents with their guards; the guards then rule later writes', async () => {
        await devices().load([
          { doc: device('a'), guard: '0005' },
          { doc: device('b', { tags: ['x'] }), guard: '0007' },
        ]);
        expect(ids(await devices().find())).toEqual(['a', 'b']);
        expect(await devices().get('b')).toEqual(device('b', { tags: ['x'] }));
        expect(await devices().getGuard('a')).toBe('0005');
        expect(await devices().put(device('b', { name: 'older' }), '0006')).toBe(false);
        expect(await devices().put(device('b', { name: 'newer' }), '0008')).toBe(true);
        expect((await devices().get('b'))?.name).toBe('newer');
      });

      it('refuses an id that already exists and overwrites nothing', async () => {
        await devices().put(device('a'), '0009');
        await expect(devices().load([{ doc: device('a', { name: 'loaded' }), guard: '0001' }])).rejects.toThrow();
        expect(await devices().get('a')).toEqual(device('a'));
        expect(await devices().getGuard('a')).toBe('0009');
      });

      it('accepts an empty load', async () => {
        await devices().load([]);
        expect(await devices().count()).toBe(0);
      });
    });

    describe('collections, clear and checkpoints', () => {
      it('hands out views over the same data for the same name', async () => {
        await store.collection<Device>('devices').put(device('a'), '1');
        expect(await store.collection<Device>('devices').get('a')).toEqual(device('a'));
      });

      it('keeps collections independent', async () => {
        const rooms = store.collection<{ id: string; name: string }>('rooms');
        await devices().put(device('x', { name: 'in devices' }), '5');
        expect(await rooms.get('x')).toBeNull();
        expect(await rooms.put({ id: 'x', name: 'in rooms' }, '1')).toBe(true);
        expect((await devices().get('x'))?.name).toBe('in devices');
        expect(await rooms.getGuard('x')).toBe('1');
        expect(await devices().getGuard('x')).toBe('5');
        expect(await rooms.count()).toBe(1);
      });

      it('clear removes every document and guard of one collection only', async () => {
        const rooms = store.collection<{ id: string }>('rooms');
        await seed(devices(), [device('a'), device('b')]);
        await rooms.put({ id: 'r' }, '1');
        await store.setCheckpoint('projector', '42');
        await devices().clear();
        expect(await devices().count()).toBe(0);
        expect(await devices().find()).toEqual([]);
        expect(await devices().getGuard('a')).toBeNull();
        expect(await devices().put(device('a'), '0')).toBe(true);
        expect(await rooms.get('r')).toEqual({ id: 'r' });
        expect(await store.getCheckpoint('projector')).toBe('42');
      });

      it('stores checkpoints by name', async () => {
        expect(await store.getCheckpoint('projector')).toBeNull();
        await store.setCheckpoint('projector', '100:100');
        await store.setCheckpoint('other', 'x');
        expect(await store.getCheckpoint('projector')).toBe('100:100');
        await store.setCheckpoint('projector', '200:200');
        expect(await store.getCheckpoint('projector')).toBe('200:200');
        expect(await store.getCheckpoint('other')).toBe('x');
      });

      it('a guarded checkpoint never goes back, and refuses an older epoch (fencing)', async () => {
        const at = (n: number): string => String(n).padStart(4, '0');
        expect(await store.advanceCheckpoint('projector', '10/10', { epoch: 1, order: at(10) })).toBe('written');
        expect(await store.advanceCheckpoint('projector', '5/5', { epoch: 1, order: at(5) })).toBe('behind');
        expect(await store.getCheckpoint('projector')).toBe('10/10');
        // A newer holder starts behind the old one's checkpoint: harmless, it catches up.
        expect(await store.advanceCheckpoint('projector', '8/8', { epoch: 2, order: at(8) })).toBe('behind');
        expect(await store.advanceCheckpoint('projector', '12/12', { epoch: 2, order: at(12) })).toBe('written');
        // The old holder's late write, further on or not: refused.
        expect(await store.advanceCheckpoint('projector', '20/20', { epoch: 1, order: at(20) })).toBe('fenced');
        expect(await store.advanceCheckpoint('projector', '11/11', { epoch: 1, order: at(11) })).toBe('fenced');
        expect(await store.getCheckpoint('projector')).toBe('12/12');
        expect(await store.advanceCheckpoint('projector', '12/12', { epoch: 2, order: at(12) })).toBe('written');
        // Over a checkpoint written without a guard (a rebuild, an earlier version): written.
        await store.setCheckpoint('other', '3/3');
        expect(await store.advanceCheckpoint('other', '4/4', { epoch: 7, order: at(4) })).toBe('written');
        expect(await store.getCheckpoint('other')).toBe('4/4');
      });

      it('answers ping while open and refuses after close', async () => {
        await expect(store.ping()).resolves.toBeUndefined();
        await store.close();
        await expect(store.ping()).rejects.toThrow();
      });
    });
  });
}
