import { onlySources } from '../../scripts/bundle';

/**
 * The production bundle's source map keeps the service's own mappings only
 * (scripts/bundle.ts): stack traces still map to src/, and the map stays small enough to load
 * at every start.
 */
describe('the bundle source map', () => {
  // Line 0: a.ts 0:0 at column 0, the package at column 5; line 1: a.ts 1:2 at column 0.
  const map = { version: 3, sources: ['../../src/a.ts', '../../node_modules/b/index.js'], names: [], mappings: 'AAAA,KCAA;ADCE' };

  test("drops the packages' mappings and sources, keeping the rest exact", () => {
    expect(onlySources(map, (source) => !source.includes('node_modules/'))).toEqual({
      version: 3,
      sources: ['../../src/a.ts'],
      names: [],
      mappings: 'AAAA;AACE',
    });
  });

  test('keeping every source changes nothing', () => {
    expect(onlySources(map, () => true)).toEqual(map);
  });
});
