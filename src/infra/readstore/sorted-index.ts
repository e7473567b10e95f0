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
  /**
   * True when two versions of a document hold the very same values for every field of the
   * index (a cheap identity test; false only means "look closer").
   */
  readonly sameFields: (a: D, b: D) => boolean;
}

/** A document's place in one group: a new version that sorts alike takes it over in place. */
interface Slot<D> {
  doc: D;
  readonly key: string;
}

/** One group of an index, for queries: its size, and its documents through `walk`. */
export type IndexGroup<D> = SortedGroup<Slot<D>>;

export class SortedIndex<D> {
  private readonly groups = new Map<string, IndexGroup<D>>();
  /** Each document's slots, by id (one per group it sits in). */
  private readonly slots = new Map<string, Array<Slot<D>>>();
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
    const placed: Array<Slot<D>> = [];
    for (const key of keys) {
      let group = this.groups.get(key);
      if (group === undefined) this.groups.set(key, (group = new SortedGroup<Slot<D>>((a, b) => this.order(a.doc, b.doc, 1))));
      const slot: Slot<D> = { doc, key };
      group.insert(slot);
      placed.push(slot);
    }
    this.slots.set(this.spec.idOf(doc), placed);
  }

  /**
   * A new version of a document: where its groups and sort value are unchanged (a heartbeat
   * leaves all but one index as they were), it takes over the old one's slots without
   * anything moving; otherwise it moves.
   */
  replace(previous: D, next: D): void {
    if (!this.unplaced.has(previous) && (this.spec.sameFields(previous, next) || this.samePlace(previous, next))) {
      for (const slot of this.slots.get(this.spec.idOf(previous)) ?? []) slot.doc = next;
      return;
    }
    this.delete(previous);
    this.add(next);
  }

  delete(doc: D): void {
    if (this.unplaced.delete(doc)) return;
    const id = this.spec.idOf(doc);
    for (const slot of this.slots.get(id) ?? []) {
      const group = this.groups.get(slot.key);
      if (group === undefined) continue;
      group.remove(slot);
      if (group.size === 0) this.groups.delete(slot.key);
    }
    this.slots.delete(id);
  }

  clear(): void {
    this.groups.clear();
    this.slots.clear();
    this.unplaced.clear();
  }

  private samePlace(previous: D, next: D): boolean {
    const before = this.groupKeys(previous);
    const after = this.groupKeys(next);
    return (
      before !== undefined &&
      after !== undefined &&
      before.length === after.length &&
      before.every((key, i) => key === after[i]) &&
      this.spec.compareValues(this.spec.readSort(previous), this.spec.readSort(next)) === 0
    );
  }

  /** The groups for these values of the leading fields (one list of values per field: every combination). */
  groupsFor(lookups: ReadonlyArray<readonly Scalar[]>): ReadonlyArray<IndexGroup<D>> {
    let combinations: Scalar[][] = [[]];
    for (const values of lookups) combinations = combinations.flatMap((prefix) => [...new Set(values)].map((value) => [...prefix, value]));
    const found: Array<IndexGroup<D>> = [];
    for (const combination of combinations) {
      const group = this.groups.get(groupKey(combination));
      if (group !== undefined) found.push(group);
    }
    return found;
  }

  /** The documents of these groups in sort order (`direction` on the sort field, then id ascending). */
  *walk(groups: ReadonlyArray<IndexGroup<D>>, direction: 1 | -1): Generator<D> {
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

  private groupKeys(doc: D): string[] | undefined {
    const sortValue = this.spec.readSort(doc);
    if (sortValue !== undefined && sortValue !== null && typeof sortValue === 'object') return undefined;
    const [first, ...others] = this.spec.prefix;
    if (first !== undefined && others.length === 0) {
      // One leading field, the common case: no combinations to build.
      const keys = this.spec.keysOf(first(doc));
      if (keys === undefined) return undefined;
      const unique = keys.length > 1 ? [...new Set(keys)] : keys;
      return unique.map((key) => groupKey([key]));
    }
    let combinations: Scalar[][] = [[]];
    for (const read of this.spec.prefix) {
      const keys = this.spec.keysOf(read(doc));
      if (keys === undefined) return undefined;
      combinations = combinations.flatMap((prefix) => [...new Set(keys)].map((key) => [...prefix, key]));
    }
    return combinations.map(groupKey);
  }
}

/** The map key of a combination of leading values: the value itself for one string (the common case), JSON otherwise. */
function groupKey(combination: readonly Scalar[]): string {
  const [only] = combination;
  return combination.length === 1 && typeof only === 'string' ? `s${only}` : JSON.stringify(combination);
}

/**
 * A group in order: forwards when ascending; descending, runs of equal values from the end,
 * each run forwards, so ties stay in id order.
 */
function* runs<D>(group: IndexGroup<D>, direction: 1 | -1, spec: SortedIndexSpec<D>): Generator<D> {
  if (direction === 1) {
    for (const slot of group.forwards()) yield slot.doc;
    return;
  }
  let run: D[] = [];
  for (const { doc } of group.backwards()) {
    const first = run[0];
    if (first !== undefined && spec.compareValues(spec.readSort(first), spec.readSort(doc)) !== 0) {
      for (let i = run.length - 1; i >= 0; i--) yield run[i] as D;
      run = [];
    }
    run.push(doc);
  }
  for (let i = run.length - 1; i >= 0; i--) yield run[i] as D;
}

/** Documents per block: moving one (a heartbeat's new `lastSeenAt`) shifts at most a block, not the group. */
const BLOCK = 256;

/**
 * A sorted list in blocks of at most BLOCK items, so an insert or a removal in a group of
 * 10,000 moves a few hundred references rather than thousands.
 */
export class SortedGroup<D> {
  private blocks: D[][] = [];
  private count = 0;

  constructor(private readonly compare: (a: D, b: D) => number) {}

  get size(): number {
    return this.count;
  }

  insert(item: D): void {
    const b = this.blockFor(item);
    const block = this.blocks[b];
    if (block === undefined) {
      this.blocks.push([item]);
    } else {
      block.splice(this.indexIn(block, item), 0, item);
      // A full block splits in two halves.
      if (block.length > BLOCK) this.blocks.splice(b + 1, 0, block.splice(block.length >> 1));
    }
    this.count++;
  }

  remove(item: D): void {
    const b = this.blockFor(item);
    const block = this.blocks[b];
    if (block === undefined) return;
    const at = this.indexIn(block, item);
    if (block[at] !== item) return;
    block.splice(at, 1);
    if (block.length === 0) this.blocks.splice(b, 1);
    this.count--;
  }

  *forwards(): Generator<D> {
    for (const block of this.blocks) yield* block;
  }

  *backwards(): Generator<D> {
    for (let b = this.blocks.length - 1; b >= 0; b--) {
      const block = this.blocks[b] as D[];
      for (let i = block.length - 1; i >= 0; i--) yield block[i] as D;
    }
  }

  /** The first block whose last item is not below `item` (the last block when none is). */
  private blockFor(item: D): number {
    let low = 0;
    let high = this.blocks.length - 1;
    while (low < high) {
      const middle = (low + high) >> 1;
      const block = this.blocks[middle] as D[];
      if (this.compare(block[block.length - 1] as D, item) < 0) low = middle + 1;
      else high = middle;
    }
    return low;
  }

  private indexIn(block: readonly D[], item: D): number {
    let low = 0;
    let high = block.length;
    while (low < high) {
      const middle = (low + high) >> 1;
      if (this.compare(block[middle] as D, item) < 0) low = middle + 1;
      else high = middle;
    }
    return low;
  }
}
