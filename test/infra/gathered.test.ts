import { gatheredGet } from '../../src/infra/gathered';
import { createMemoryReadStore } from '../../src/infra/readstore/memory';
import type { GuardedDoc, ReadCollection, ReadDoc } from '../../src/infra/readstore/port';

/**
 * Reads by id gathered over one turn of the event loop into one `getMany` (the presence a
 * device handshake reads): how many queries a crowd of reads makes, and what each caller gets.
 */

interface Doc extends ReadDoc {
  readonly name: string;
}

/** The memory store's collection, with every `getMany` recorded (its ids) and an optional failure. */
async function counted(): Promise<{ collection: () => ReadCollection<Doc>; batches: string[][]; failNext: (error: Error) => void }> {
  const inner = createMemoryReadStore().collection<Doc>('devices');
  for (const id of ['d1', 'd2', 'd3', 'd4', 'd5']) await inner.put({ id, name: `hub ${id}` }, '1');
  const batches: string[][] = [];
  let failure: Error | null = null;
  const collection: ReadCollection<Doc> = {
    ...inner,
    get: (id) => inner.get(id),
    getMany: async (ids): Promise<Map<string, GuardedDoc<Doc>>> => {
      batches.push([...ids]);
      if (failure !== null) {
        const error = failure;
        failure = null;
        throw error;
      }
      return inner.getMany(ids);
    },
  };
  return { collection: () => collection, batches, failNext: (error) => (failure = error) };
}

test('the reads of one turn of the loop are one getMany; each caller gets its own document, or null', async () => {
  const { collection, batches } = await counted();
  const read = gatheredGet(collection);
  const answers = await Promise.all(['d1', 'd2', 'absent', 'd3'].map((id) => read(id)));
  expect(answers.map((doc) => doc?.name ?? null)).toEqual(['hub d1', 'hub d2', null, 'hub d3']);
  expect(batches).toEqual([['d1', 'd2', 'absent', 'd3']]);
});

test('the same id read twice in one turn is asked once and answered to both', async () => {
  const { collection, batches } = await counted();
  const read = gatheredGet(collection);
  const [first, second] = await Promise.all([read('d2'), read('d2')]);
  expect(first?.name).toBe('hub d2');
  expect(second).toBe(first);
  expect(batches).toEqual([['d2']]);
});

test('reads in later turns are later queries: nothing waits for a crowd that is not there', async () => {
  const { collection, batches } = await counted();
  const read = gatheredGet(collection);
  expect((await read('d1'))?.name).toBe('hub d1');
  expect((await read('d2'))?.name).toBe('hub d2');
  expect(batches).toEqual([['d1'], ['d2']]);
});

test('a crowd larger than the bound is split into queries of at most that many ids', async () => {
  const { collection, batches } = await counted();
  const read = gatheredGet(collection, 2);
  const answers = await Promise.all(['d1', 'd2', 'd3', 'd4', 'd5'].map((id) => read(id)));
  expect(answers.map((doc) => doc?.name)).toEqual(['hub d1', 'hub d2', 'hub d3', 'hub d4', 'hub d5']);
  expect(batches).toEqual([['d1', 'd2'], ['d3', 'd4'], ['d5']]);
});

test('a failed query fails every caller of its batch, and the next turn reads again', async () => {
  const { collection, batches, failNext } = await counted();
  const read = gatheredGet(collection);
  failNext(new Error('read store away'));
  const failed = await Promise.allSettled([read('d1'), read('d4')]);
  expect(failed.map((settled) => settled.status)).toEqual(['rejected', 'rejected']);
  expect(failed.map((settled) => (settled.status === 'rejected' ? (settled.reason as Error).message : ''))).toEqual(['read store away', 'read store away']);
  expect((await read('d1'))?.name).toBe('hub d1');
  expect(batches).toEqual([['d1', 'd4'], ['d1']]);
});
