import { createMemoryReadStore } from '../../src/infra/readstore/memory';
import type { Query, ReadDoc, Scalar, SortKey, Where } from '../../src/infra/readstore/port';
import { mulberry32 } from '../support/prng';

/**
 * Not a defect: a check that held. Two memory read stores get the same random operations,
 * one with indexing deferred, the deferral ended and begun again at random points. Beyond the
 * contract suite run with indexing deferred: indexes (plain, compound, unique) declared in the
 * middle of a deferral, clear() during one, multikey arrays, empty arrays, missing fields and
 * values no index can place (objects), a document removed and written again before its
 * collection is read, `in` and range conditions, skip/limit pages on sorts with ties, counts,
 * getMany. Every answer (or error) and the exported state must be the same.
 */
describe('memory read store: indexing deferred answers exactly as indexing at each write', () => {
  type Doc = ReadDoc & Record<string, unknown>;
  const FIELDS = ['f', 'g', 'h'] as const;
  const VALUES: readonly unknown[] = ['a', 'b', 'c', 1, 2, null, undefined, ['a', 'b'], ['c'], [], { x: 1 }, true];

  async function divergence(seed: number): Promise<string | null> {
    const random = mulberry32(seed);
    const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
    const eager = createMemoryReadStore();
    const deferred = createMemoryReadStore();
    let resume: (() => void) | null = deferred.deferIndexing();
    const collections = [eager.collection<Doc>('c'), deferred.collection<Doc>('c')] as const;
    const same = async <R>(label: string, op: (c: (typeof collections)[number]) => Promise<R>): Promise<string | null> => {
      const [a, b] = await Promise.allSettled(collections.map(op));
      const show = (s: PromiseSettledResult<R> | undefined): string =>
        s === undefined ? '' : s.status === 'fulfilled' ? JSON.stringify(s.value instanceof Map ? [...s.value] : s.value) : `error ${String(s.reason)}`;
      return show(a) === show(b) ? null : `${label}: ${show(a)} vs ${show(b)}`;
    };
    const doc = (id: string): Doc => {
      const fields: Record<string, unknown> = { id };
      for (const field of FIELDS) {
        const value = pick(VALUES);
        if (value !== undefined) fields[field] = value;
      }
      return fields as Doc;
    };
    const query = (): Query => {
      const where: Record<string, Scalar | { in: Scalar[] } | { gte: Scalar }> = {};
      for (const field of FIELDS) {
        const roll = random();
        if (roll < 0.3) where[field] = pick<Scalar>(['a', 'b', 'c', 1, null, true]);
        else if (roll < 0.4) where[field] = { in: [pick<Scalar>(['a', 'b', 1]), pick<Scalar>(['c', null])] };
        else if (roll < 0.45) where[field] = { gte: 'b' };
      }
      const sort: SortKey[] =
        random() < 0.7 ? [{ field: pick(FIELDS), order: pick(['asc', 'desc'] as const) }] : random() < 0.5 ? [{ field: 'f', order: 'asc' }, { field: 'g', order: 'desc' }] : [];
      return { where, sort, ...(random() < 0.5 ? { skip: Math.floor(random() * 3) } : {}), ...(random() < 0.5 ? { limit: Math.floor(random() * 5) } : {}) };
    };
    for (let i = 0, guard = 0; i < 400; i++) {
      const roll = random();
      const id = `d${Math.floor(random() * 15)}`;
      const next = String(++guard).padStart(6, '0');
      let found: string | null = null;
      if (roll < 0.5) {
        const written = doc(id);
        found = await same(`put #${i}`, (c) => c.put(written, next));
      } else if (roll < 0.65) found = await same(`remove #${i}`, (c) => c.remove(id, next));
      else if (roll < 0.85) {
        const asked = query();
        const where: Where | undefined = asked.where;
        found =
          random() < 0.7
            ? await same(`find #${i} ${JSON.stringify(asked)}`, (c) => c.find(asked))
            : await same(`count #${i} ${JSON.stringify(where)}`, (c) => c.count(where));
      } else if (roll < 0.9) {
        const keys: SortKey[] = random() < 0.5 ? [{ field: pick(FIELDS), order: 'asc' }] : [{ field: pick(FIELDS), order: 'asc' }, { field: pick(FIELDS), order: 'asc' }];
        const unique = random() < 0.2;
        found = await same(`ensureIndex #${i}`, (c) => c.ensureIndex(keys, { unique }));
      } else if (roll < 0.92) found = await same(`clear #${i}`, (c) => c.clear());
      else if (roll < 0.96) {
        if (resume !== null) {
          resume();
          resume = null;
        } else resume = deferred.deferIndexing();
      } else {
        const ids = [pick(['d1', 'd2', 'd3']), pick(['d4', 'd5'])];
        found = await same(`getMany #${i}`, (c) => c.getMany(ids));
      }
      if (found !== null) return `seed ${seed}, ${found}`;
    }
    return JSON.stringify(eager.exportState()) === JSON.stringify(deferred.exportState()) ? null : `seed ${seed}: exported states differ`;
  }

  it('gives the same answer to every read, whenever the deferral begins and ends', async () => {
    const found: string[] = [];
    for (let seed = 1; seed <= 300; seed++) {
      const divergent = await divergence(seed);
      if (divergent !== null) found.push(divergent);
    }
    expect(found).toEqual([]);
  });
});
