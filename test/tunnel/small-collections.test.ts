import { SmallMap, SmallSet, SmallSetsMap } from '../../src/tunnel/small-collections';

/**
 * `SmallMap` (src/tunnel/small-collections.ts) answers as a `Map` does: the same operations applied
 * to both, from seeded random sequences over a few keys (NaN, 0 and -0 among them), give the
 * same results and the same entries in the same order at every step.
 */

function seeded(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state * 1_664_525 + 1_013_904_223) >>> 0;
    return state / 2 ** 32;
  };
}

const KEYS: unknown[] = ['a', 'b', 'c', 0, -0, Number.NaN, 1];

describe('SmallMap, against Map', () => {
  test.each([1, 2, 3, 4, 5, 6, 7, 8])('random operations, seed %d', (seed) => {
    const random = seeded(seed);
    const small = new SmallMap<unknown, number>();
    const map = new Map<unknown, number>();
    for (let step = 0; step < 2000; step++) {
      const key = KEYS[Math.floor(random() * KEYS.length)];
      const op = random();
      if (op < 0.4) {
        expect(small.set(key, step)).toBe(small);
        map.set(key, step);
      } else if (op < 0.7) expect(small.delete(key)).toBe(map.delete(key));
      else if (op < 0.8) expect(small.get(key)).toBe(map.get(key));
      else if (op < 0.9) expect(small.has(key)).toBe(map.has(key));
      else if (op < 0.93) {
        small.clear();
        map.clear();
      }
      expect(small.size).toBe(map.size);
      expect([...small]).toEqual([...map]);
    }
  });

  test('made from a Map: the same entries; keys, values, entries and forEach as a Map gives them', () => {
    const map = new Map<string, number>([['x', 1]]);
    const small = new SmallMap(map);
    expect([...small.keys()]).toEqual(['x']);
    expect([...small.values()]).toEqual([1]);
    expect([...small.entries()]).toEqual([['x', 1]]);
    small.set('y', 2).set('z', 3);
    const seen: Array<[string, number, unknown]> = [];
    const self = {};
    small.forEach(function (this: unknown, value, key, whole) {
      seen.push([key, value, this]);
      expect(whole).toBe(small);
    }, self);
    expect(seen).toEqual([
      ['x', 1, self],
      ['y', 2, self],
      ['z', 3, self],
    ]);
    expect(Object.prototype.toString.call(small)).toBe('[object Map]');
  });

  test('an entry deleted while iterating (as Socket.IO closes its sockets: each removes itself) ends the loop cleanly', () => {
    const small = new SmallMap<string, string>([['id', 'socket']]);
    const closed: string[] = [];
    for (const socket of small.values()) {
      closed.push(socket);
      small.delete('id');
    }
    expect(closed).toEqual(['socket']);
    expect(small.size).toBe(0);
    const many = new SmallMap<string, number>([
      ['a', 1],
      ['b', 2],
    ]);
    for (const [key] of many) many.delete(key);
    expect(many.size).toBe(0);
  });
});

describe('SmallSet, against Set', () => {
  test.each([1, 2, 3, 4, 5, 6, 7, 8])('random operations, seed %d', (seed) => {
    const random = seeded(seed);
    const small = new SmallSet<unknown>();
    const set = new Set<unknown>();
    for (let step = 0; step < 2000; step++) {
      const value = KEYS[Math.floor(random() * KEYS.length)];
      const op = random();
      if (op < 0.45) {
        expect(small.add(value)).toBe(small);
        set.add(value);
      } else if (op < 0.8) expect(small.delete(value)).toBe(set.delete(value));
      else if (op < 0.95) expect(small.has(value)).toBe(set.has(value));
      else {
        small.clear();
        set.clear();
      }
      expect(small.size).toBe(set.size);
      expect([...small]).toEqual([...set]);
    }
  });

  test('keys, values, entries and forEach as a Set gives them', () => {
    const small = new SmallSet<string>().add('x');
    expect([...small.keys()]).toEqual(['x']);
    expect([...small.entries()]).toEqual([['x', 'x']]);
    small.add('y');
    const seen: string[] = [];
    small.forEach((value, again, whole) => {
      seen.push(`${value}${again}`);
      expect(whole).toBe(small);
    });
    expect(seen).toEqual(['xx', 'yy']);
    expect(Object.prototype.toString.call(small)).toBe('[object Set]');
  });
});

describe('SmallSetsMap', () => {
  test('a new empty Set put in it is kept small; a Set with members as it is', () => {
    const map = new SmallSetsMap<string, string>();
    map.set('room', new Set());
    expect(map.get('room')).toBeInstanceOf(SmallSet);
    map.get('room')?.add('a');
    expect([...(map.get('room') ?? [])]).toEqual(['a']);
    const full = new Set(['b']);
    map.set('other', full);
    expect(map.get('other')).toBe(full);
  });
});
