/**
 * What a heap snapshot's objects belong to: each object is charged to the first large
 * collection (a Map, Set, object or array with at least `LARGE` entries: the indexes a
 * service keeps per socket or per device) on its shortest path from the GC roots, named by
 * the property or variable that holds that collection and the object holding it
 * (`sessions.all`, `Namespace.sockets`, `createDeviceAccess.entries`). Objects reached
 * through no such collection are charged to `(no large collection)`.
 *
 * Shortest paths (breadth first) make the charge deterministic: an object reachable from
 * several indexes (a socket is in engine.io's clients, the namespace's sockets and the
 * tunnel's sessions) goes to the one nearest the roots. Diffing two snapshots' charges says
 * which index grew by what per hub (bench/storm.ts, `BENCH_HEAP_SNAPSHOT=1`).
 *
 *   npx tsx bench/heap-owners.ts before.heapsnapshot after.heapsnapshot 2000
 */
import { readFileSync } from 'node:fs';

const LARGE = 500;

interface Snapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[]]; edge_fields: string[]; edge_types: [string[]] } };
  nodes: number[];
  edges: number[];
  strings: string[];
}

/** Bytes (self sizes) by owning collection. */
export function heapOwners(file: string): Map<string, number> {
  const s = JSON.parse(readFileSync(file, 'utf8')) as Snapshot;
  const nf = s.snapshot.meta.node_fields;
  const ef = s.snapshot.meta.edge_fields;
  const nodeTypes = s.snapshot.meta.node_types[0];
  const edgeTypes = s.snapshot.meta.edge_types[0];
  const nw = nf.length;
  const ew = ef.length;
  const nTypeAt = nf.indexOf('type');
  const nNameAt = nf.indexOf('name');
  const nSizeAt = nf.indexOf('self_size');
  const nEdgesAt = nf.indexOf('edge_count');
  const eTypeAt = ef.indexOf('type');
  const eNameAt = ef.indexOf('name_or_index');
  const eToAt = ef.indexOf('to_node');
  const count = s.nodes.length / nw;
  const firstEdge = new Uint32Array(count + 1);
  for (let n = 0; n < count; n++) firstEdge[n + 1] = (firstEdge[n] ?? 0) + (s.nodes[n * nw + nEdgesAt] ?? 0);

  const nameOf = (n: number): string => {
    const type = nodeTypes[s.nodes[n * nw + nTypeAt] ?? 0] ?? '?';
    return type === 'object' || type === 'closure' ? (s.strings[s.nodes[n * nw + nNameAt] ?? 0] ?? '?') : `(${type})`;
  };
  const weak = edgeTypes.indexOf('weak');
  const shortcut = edgeTypes.indexOf('shortcut');
  const element = edgeTypes.indexOf('element');
  const hidden = edgeTypes.indexOf('hidden');
  const internal = edgeTypes.indexOf('internal');
  const holder = (n: number): string => {
    const name = nameOf(n);
    return name === 'system / Context' ? '(var) ' : `${name}.`;
  };

  // owner[n]: index into labels (0: none yet); via[n]: the last named holder on the path.
  const labels = ['(unreached)', '(no large collection)'];
  const labelIds = new Map<string, number>();
  const owner = new Uint32Array(count);
  const via = new Array<string>(count);
  const seen = new Uint8Array(count);
  let queue = new Uint32Array(count);
  let head = 0;
  let tail = 0;
  queue[tail++] = 0;
  seen[0] = 1;
  owner[0] = 1;
  via[0] = '(root)';
  while (head < tail) {
    const n = queue[head++] ?? 0;
    const edges = (firstEdge[n + 1] ?? 0) - (firstEdge[n] ?? 0);
    let label = owner[n] ?? 1;
    if (label === 1 && edges >= LARGE && n !== 0) {
      const name = via[n] ?? '?';
      let id = labelIds.get(name);
      if (id === undefined) {
        id = labels.length;
        labels.push(name);
        labelIds.set(name, id);
      }
      label = id;
      owner[n] = id;
    }
    for (let e = firstEdge[n] ?? 0; e < (firstEdge[n + 1] ?? 0); e++) {
      const type = s.edges[e * ew + eTypeAt] ?? 0;
      if (type === weak || type === shortcut) continue;
      const to = (s.edges[e * ew + eToAt] ?? 0) / nw;
      if (seen[to] === 1) continue;
      seen[to] = 1;
      owner[to] = label;
      const named = type !== element && type !== hidden && type !== internal;
      via[to] = named ? `${holder(n)}${s.strings[s.edges[e * ew + eNameAt] ?? 0] ?? '?'}` : (via[n] ?? '?');
      if (tail >= queue.length) {
        const bigger = new Uint32Array(queue.length * 2);
        bigger.set(queue);
        queue = bigger;
      }
      queue[tail++] = to;
    }
  }
  const bytes = new Map<string, number>();
  for (let n = 0; n < count; n++) {
    const name = labels[owner[n] ?? 0] ?? '?';
    bytes.set(name, (bytes.get(name) ?? 0) + (s.nodes[n * nw + nSizeAt] ?? 0));
  }
  return bytes;
}

/** What grew between two snapshots, per hub, by owning collection, largest first. */
export function ownerGrowth(before: Map<string, number>, after: Map<string, number>, hubs: number): Array<{ owner: string; perHub: number }> {
  const names = new Set([...before.keys(), ...after.keys()]);
  return [...names]
    .map((owner) => ({ owner, perHub: Math.round(((after.get(owner) ?? 0) - (before.get(owner) ?? 0)) / hubs) }))
    .filter((row) => Math.abs(row.perHub) >= 8)
    .sort((a, b) => b.perHub - a.perHub);
}

if (require.main === module) {
  const [beforeFile, afterFile, hubs] = process.argv.slice(2);
  if (beforeFile === undefined || afterFile === undefined) throw new Error('usage: heap-owners.ts before.heapsnapshot after.heapsnapshot [hubs]');
  for (const row of ownerGrowth(heapOwners(beforeFile), heapOwners(afterFile), Number(hubs ?? 1))) {
    console.log(`${String(row.perHub).padStart(7)} B/hub  ${row.owner}`);
  }
}
