import { createMemoryReadStore } from '../../src/infra/readstore/memory';
import type { ReadDoc } from '../../src/infra/readstore/port';
import { readStoreContract } from './readstore.contract';

readStoreContract('memory', async () => {
  const store = createMemoryReadStore();
  return { store, cleanup: () => store.close() };
});

describe('memory read store', () => {
  interface Doc extends ReadDoc {
    readonly id: string;
    readonly name: string;
    readonly tags: readonly string[];
  }

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

  it('keeps a field named __proto__ as data', async () => {
    const docs = createMemoryReadStore().collection<ReadDoc & Record<string, unknown>>('docs');
    const doc = JSON.parse('{"id":"a","__proto__":{"polluted":true}}') as ReadDoc & Record<string, unknown>;
    await docs.put(doc, '1');
    const stored = await docs.get('a');
    expect(Object.getPrototypeOf(stored)).toBe(Object.prototype);
    expect(Object.prototype.hasOwnProperty.call(stored, '__proto__')).toBe(true);
    expect(await docs.count({ '__proto__.polluted': true })).toBe(1);
  });
});
