import type { Scalar } from './port';

/**
 * A compound index of the memory read store, as MongoDB keeps one: documents grouped by the
 * values of the leading fields (equality keys: a multikey array puts a document in the group
 * of each element) and, in each group, sorted by the last field then by id. A page of one
 * user's devices newest first is then a walk from one end of that user's group, and the
 * number of them is the group's size: costs in proportion to the page, not to the user's
 * devices.
 *
 * Sort order is the store's (MongoDB's), given as `compareValues`; ties are broken by id
 * ascending in both directions, as every query of the store does.
 */
export interface SortedIndexSpec<D> {
  readonly prefix: ReadonlyArray<(doc: D) => unknown>;
  readonly sortField: string;
  readonly readSort: (doc: D) => unknown;
  readonly compareValues: (a: unknown, b: unknown) => number;
  readonly compareIds: (a: string, b: string) => number;
  readonly idOf: (doc: D) => string;
  /** The group keys a value belongs to (each element's for an array of scalars); undefined when it has none. */
  readonly keysOf: (value: unknown) => readonly Scalar[] | undefined;
}

export class SortedIndex<D> {
  private readonly groups = new Map<string, D[]>();
  /** Documents it cannot place (an object or an array where a scalar is needed): while any exist, it is not used. */
  private readonly unplaced = new Set<D>();

  constructor(private readonly spec: SortedIndexSpec<D>) {}

  get usable(): boolean {
    return this.unplaced.size === 0;
  }

  add(doc: D): void {
    const keys = this.groupKeys(doc);
    if (keys === undefined) {
      this.unplaced.add(doc);
      return;
    }
    for (const key of keys) {
      let group = this.groups.get(key);
      if (group === undefined) this.groups.set(key, (group = []));
      group.splice(this.position(group, doc), 0, doc);
    }
  }

  delete(doc: D): void {
    if (this.unplaced.delete(doc)) return;
    for (const key of this.groupKeys(doc) ?? []) {
      const group = this.groups.get(key);
      if (group === undefined) continue;
      const at = this.position(group, doc);
      if (group[at] === doc) group.splice(at, 1);
      if (group.length === 0) this.groups.delete(key);
    }
  }

  clear(): void {
    this.groups.clear();
    this.unplaced.clear();
  }

  /** The groups for these values of the leading fields (one list of values per field: every combination). */
  groupsFor(lookups: ReadonlyArray<readonly Scalar[]>): ReadonlyArray<readonly D[]> {
    let combinations: Scalar[][] = [[]];
    for (const values of lookups) combinations = combinations.flatMap((prefix) => [...new Set(values)].map((value) => [...prefix, value]));
    const found: Array<readonly D[]> = [];
    for (const combination of combinations) {
      const group = this.groups.get(JSON.stringify(combination));
      if (group !== undefined) found.push(group);
    }
    return found;
  }

  /** The documents of these groups in sort order (`direction` on the sort field, then id ascending). */
  *walk(groups: ReadonlyArray<readonly D[]>, direction: 1 | -1): Generator<D> {
    const cursors = groups.map((group) => runs(group, direction, this.spec));
    const heads = cursors.map((cursor) => cursor.next());
    for (;;) {
      let best = -1;
      for (let i = 0; i < heads.length; i++) {
        const head = heads[i];
        if (head === undefined || head.done === true) continue;
        const current = heads[best];
        if (best < 0 || (current !== undefined && current.done !== true && this.order(head.value, current.value, direction) < 0)) best = i;
      }
      const chosen = heads[best];
      if (chosen === undefined || chosen.done === true) return;
      yield chosen.value;
      heads[best] = (cursors[best] as Generator<D>).next();
    }
  }

  private order(a: D, b: D, direction: 1 | -1): number {
    const byValue = this.spec.compareValues(this.spec.readSort(a), this.spec.readSort(b)) * direction;
    return byValue !== 0 ? byValue : this.spec.compareIds(this.spec.idOf(a), this.spec.idOf(b));
  }

  /** Where `doc` sits (or would) in a group sorted ascending by value then id. */
  private position(group: readonly D[], doc: D): number {
    let low = 0;
    let high = group.length;
    while (low < high) {
      const middle = (low + high) >> 1;
      if (this.order(group[middle] as D, doc, 1) < 0) low = middle + 1;
      else high = middle;
    }
    return low;
  }

  private groupKeys(doc: D): string[] | undefined {
    const sortValue = this.spec.readSort(doc);
    if (sortValue !== undefined && sortValue !== null && typeof sortValue === 'object') return undefined;
    let combinations: Scalar[][] = [[]];
    for (const read of this.spec.prefix) {
      const keys = this.spec.keysOf(read(doc));
      if (keys === undefined) return undefined;
      combinations = combinations.flatMap((prefix) => [...new Set(keys)].map((key) => [...prefix, key]));
    }
    return combinations.map((combination) => JSON.stringify(combination));
  }
}

/**
 * A group in order: forwards when ascending; descending, runs of equal values from the end,
 * each run forwards, so ties stay in id order.
 */
function* runs<D>(group: readonly D[], direction: 1 | -1, spec: SortedIndexSpec<D>): Generator<D> {
  if (direction === 1) {
    yield* group;
    return;
  }
  let end = group.length - 1;
  while (end >= 0) {
    const value = spec.readSort(group[end] as D);
    let start = end;
    while (start > 0 && spec.compareValues(spec.readSort(group[start - 1] as D), value) === 0) start--;
    for (let i = start; i <= end; i++) yield group[i] as D;
    end = start - 1;
  }
}
