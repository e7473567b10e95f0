import { equalityKeys } from './equality-index';
import { compareForSort, compareStrings, matchesAll, type CompiledWhere, type Condition, type ParsedSortKey, type Stored } from './query';
import { SortedIndex, type IndexGroup } from './sorted-index';

/**
 * The memory read store's compound indexes (two fields or more, kept sorted: see
 * sorted-index.ts) and how a query uses one: choosing the index whose leading fields the
 * query's equalities settle, and reading a page from it in order, or a count from its groups.
 */

/** A declared compound index of two fields or more, kept sorted (see sorted-index.ts). */
export interface CompoundIndex {
  readonly fields: readonly string[];
  readonly index: SortedIndex<Stored>;
}

/** How a compound index answers a query: the groups to read, and the conditions they do not settle. */
export interface SortedPlan {
  readonly index: SortedIndex<Stored>;
  readonly groups: ReadonlyArray<IndexGroup<Stored>>;
  readonly remaining: CompiledWhere;
}

/** A compound index on these keys (two or more), over the documents already stored. */
export function createCompoundIndex(keys: readonly ParsedSortKey[], entries: Iterable<{ readonly doc: Stored }>): CompoundIndex {
  const fields = keys.map((key) => key.field);
  const last = keys[keys.length - 1] as ParsedSortKey;
  // The top-level fields the index reads: a new version that shares them all (a spread copy
  // changing something else) sorts where the old one did.
  const tops = [...new Set(fields.map((field) => field.split('.')[0] as string))];
  const index = new SortedIndex<Stored>({
    sameFields: (a, b) => tops.every((top) => a[top] === b[top]),
    prefix: keys.slice(0, -1).map((key) => key.read),
    sortField: last.field,
    readSort: last.read,
    compareValues: compareForSort,
    compareIds: compareStrings,
    idOf: (doc) => doc.id,
    keysOf: equalityKeys,
  });
  for (const { doc } of entries) index.add(doc);
  return { fields, index };
}

/**
 * The compound index that settles the most conditions by its leading fields (each needs an
 * equality or `in` there), ending in `sortField` when one is given; undefined when none fits.
 */
export function sortedPlan(indexes: readonly CompoundIndex[], where: CompiledWhere, sortField: string | undefined): SortedPlan | undefined {
  let best: { index: SortedIndex<Stored>; conditions: Condition[] } | undefined;
  for (const { fields, index } of indexes) {
    if (!index.usable || (sortField !== undefined && fields[fields.length - 1] !== sortField)) continue;
    const conditions: Condition[] = [];
    for (const field of fields.slice(0, -1)) {
      const condition = where.find((c) => c.field === field && c.lookup !== undefined);
      if (condition !== undefined) conditions.push(condition);
    }
    if (conditions.length !== fields.length - 1) continue;
    if (best === undefined || conditions.length > best.conditions.length) best = { index, conditions };
  }
  if (best === undefined) return undefined;
  const settled = best.conditions;
  return {
    index: best.index,
    groups: best.index.groupsFor(settled.map((c) => c.lookup ?? [])),
    remaining: where.filter((c) => !settled.includes(c)),
  };
}

/** A page read from a compound index: walked in order from one end, stopping once the page is full. */
export function pageFrom(plan: SortedPlan, direction: 1 | -1, skip: number, limit: number | undefined): Stored[] {
  const page: Stored[] = [];
  // A multikey document can sit in several of the groups read: each once.
  const seen = plan.groups.length > 1 ? new Set<Stored>() : null;
  let skipped = 0;
  for (const doc of plan.index.walk(plan.groups, direction)) {
    if (seen !== null) {
      if (seen.has(doc)) continue;
      seen.add(doc);
    }
    if (!matchesAll(plan.remaining, doc)) continue;
    if (skipped < skip) {
      skipped++;
      continue;
    }
    page.push(doc);
    if (limit !== undefined && page.length >= limit) break;
  }
  return page;
}
