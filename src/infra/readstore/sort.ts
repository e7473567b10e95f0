import { compareForSort, type ParsedSortKey, type Stored } from './query';

/**
 * Sorting a query's result in memory when no compound index gives it in order: by the
 * query's sort keys in the store's order of values (query.ts), then by id.
 */

type Compare<T> = (a: T, b: T) => number;

/**
 * The first `count` documents in query order, then by id. Sort values are read once per
 * document into one flat array (the id last) and positions are sorted, so a query
 * allocates little beyond its result.
 */
export function sortDocuments(docs: Stored[], keys: readonly ParsedSortKey[], count: number): Stored[] {
  const width = keys.length + 1;
  const directions = [...keys.map((key) => key.direction), 1];
  const values: unknown[] = new Array<unknown>(docs.length * width);
  const positions: number[] = new Array<number>(docs.length);
  for (let i = 0; i < docs.length; i++) {
    const doc = docs[i] as Stored;
    positions[i] = i;
    for (let j = 0; j < keys.length; j++) {
      const key = keys[j] as ParsedSortKey;
      values[i * width + j] = toSortKey(sortValue(key.read(doc), key.direction));
    }
    values[i * width + keys.length] = toSortKey(doc.id);
  }
  const compare: Compare<number> = (a, b) => {
    for (let j = 0; j < width; j++) {
      const x = values[a * width + j];
      const y = values[b * width + j];
      // Sort keys that are strings compare natively: toSortKey made UTF-16 order agree with code point order.
      const order =
        typeof x === 'string' && typeof y === 'string' ? (x < y ? -1 : x > y ? 1 : 0) : compareForSort(x, y);
      if (order !== 0) return order * (directions[j] as number);
    }
    return 0;
  };
  return sortedPrefix(positions, compare, count).map((i) => docs[i] as Stored);
}

const BEYOND_SURROGATES = /[\ud800-\uffff]/;

/**
 * A string whose UTF-16 order is the code point order of the given one: code units of
 * surrogates move above U+E000..U+FFFF. Strings without such units (nearly all) are kept.
 */
function toSortKey(value: unknown): unknown {
  if (typeof value !== 'string' || !BEYOND_SURROGATES.test(value)) return value;
  let key = '';
  for (let i = 0; i < value.length; i++) {
    const unit = value.charCodeAt(i);
    key += String.fromCharCode(unit < 0xd800 ? unit : unit <= 0xdfff ? unit + 0x2000 : unit - 0x800);
  }
  return key;
}

/** Like MongoDB: an array sorts by its smallest element ascending, by its largest descending. */
function sortValue(value: unknown, direction: 1 | -1): unknown {
  if (!Array.isArray(value) || value.length === 0) return value;
  let chosen: unknown = value[0];
  for (const element of value) if (compareForSort(element, chosen) * direction < 0) chosen = element;
  return chosen;
}

/** The first `count` items in order: a full sort when most are wanted, a bounded heap for a short page. */
function sortedPrefix<T>(items: T[], compare: Compare<T>, count: number): T[] {
  if (count * 8 >= items.length) return items.sort(compare);
  // Max-heap of the `count` smallest items seen so far.
  const heap: T[] = [];
  const swap = (i: number, j: number): void => {
    const item = heap[i] as T;
    heap[i] = heap[j] as T;
    heap[j] = item;
  };
  const siftUp = (start: number): void => {
    let i = start;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (compare(heap[i] as T, heap[parent] as T) <= 0) return;
      swap(i, parent);
      i = parent;
    }
  };
  const siftDown = (): void => {
    let i = 0;
    for (;;) {
      const left = 2 * i + 1;
      const right = left + 1;
      let largest = i;
      if (left < heap.length && compare(heap[left] as T, heap[largest] as T) > 0) largest = left;
      if (right < heap.length && compare(heap[right] as T, heap[largest] as T) > 0) largest = right;
      if (largest === i) return;
      swap(i, largest);
      i = largest;
    }
  };
  for (const item of items) {
    if (heap.length < count) {
      heap.push(item);
      siftUp(heap.length - 1);
    } else if (compare(item, heap[0] as T) < 0) {
      heap[0] = item;
      siftDown();
    }
  }
  return heap.sort(compare);
}
