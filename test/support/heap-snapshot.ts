/**
 * What a service process's heap holds, from a V8 heap snapshot of that process: the real service
 * (`src/main.ts`, test/support/server.ts) started with `heapSnapshotEnv`, whose heap is only the
 * service's, as an operator's heap dump of it would be.
 */
import { randomUUID } from 'node:crypto';
import { request } from 'node:http';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GENEROUS_RATE_LIMITS } from './harness';
import { startServerProcess, TEST_SECRETS, type ServerProcess } from './server';

/** The environment of a service process that writes a heap snapshot into `dir` on SIGUSR2. */
export function heapSnapshotEnv(dir: string): Record<string, string> {
  return { NODE_OPTIONS: `--heapsnapshot-signal=SIGUSR2 --diagnostic-dir=${dir}` };
}

/** A request on a connection of its own (a pooled one may have been closed while the process was held). */
function healthOf(baseUrl: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(`${baseUrl}/health`, { agent: false }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.end();
  });
}

const pause = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

interface SnapshotJson {
  readonly snapshot: {
    readonly meta: {
      readonly node_fields: readonly string[];
      readonly node_types: readonly [readonly string[], ...unknown[]];
      readonly edge_fields: readonly string[];
      readonly edge_types: readonly [readonly string[], ...unknown[]];
    };
  };
  readonly nodes: readonly number[];
  readonly edges: readonly number[];
  readonly strings: readonly string[];
}

/**
 * A heap snapshot, with its raw bytes (for a plain search: a string's text appears in them whole,
 * however long the string) and its graph (for who holds what).
 */
export class HeapSnapshot {
  private readonly json: SnapshotJson;
  private readonly nodeFields: number;
  private readonly edgeFields: number;
  private readonly typeOffset: number;
  private readonly nameOffset: number;
  private readonly edgeCountOffset: number;
  private readonly nodeTypes: readonly string[];
  private readonly edgeTypes: readonly string[];
  /** Index (in `nodes`) of each node's first edge (in `edges`). */
  private readonly firstEdge: Uint32Array;

  private constructor(
    private readonly bytes: Buffer,
  ) {
    this.json = JSON.parse(bytes.toString('utf8')) as SnapshotJson;
    const meta = this.json.snapshot.meta;
    this.nodeFields = meta.node_fields.length;
    this.edgeFields = meta.edge_fields.length;
    this.typeOffset = meta.node_fields.indexOf('type');
    this.nameOffset = meta.node_fields.indexOf('name');
    this.edgeCountOffset = meta.node_fields.indexOf('edge_count');
    this.nodeTypes = meta.node_types[0];
    this.edgeTypes = meta.edge_types[0];
    const count = this.json.nodes.length / this.nodeFields;
    this.firstEdge = new Uint32Array(count);
    let edge = 0;
    for (let i = 0; i < count; i++) {
      this.firstEdge[i] = edge;
      edge += (this.json.nodes[i * this.nodeFields + this.edgeCountOffset] as number) * this.edgeFields;
    }
  }

  /**
   * A snapshot of `service`'s heap (started with `heapSnapshotEnv(dir)`): V8 collects the garbage
   * first. The process writes it on its own main thread, so once the file is there, a request it
   * answers comes after it is complete.
   */
  static async of(service: Pick<ServerProcess, 'pid' | 'baseUrl'>, dir: string): Promise<HeapSnapshot> {
    const written = (): string[] => readdirSync(dir).filter((name) => name.endsWith('.heapsnapshot'));
    for (const name of written()) rmSync(join(dir, name));
    process.kill(service.pid, 'SIGUSR2');
    const deadline = Date.now() + 120_000;
    while (written().length === 0) {
      if (Date.now() > deadline) throw new Error('no heap snapshot written within 120 s');
      await pause(50);
    }
    await healthOf(service.baseUrl);
    const file = join(dir, written()[0] as string);
    const bytes = readFileSync(file);
    rmSync(file);
    // The process was held for the snapshot: the keep-alive connections that went idle meanwhile
    // are closed on its next turns. Let that happen before a client reuses one of them.
    await pause(500);
    return new HeapSnapshot(bytes);
  }

  /** Which of `texts` appear anywhere in the heap (as JSON escapes them: give texts JSON leaves alone). */
  found(texts: readonly string[]): string[] {
    return texts.filter((text) => this.bytes.includes(text));
  }

  /**
   * Objects holding a string that contains one of `wanted`, directly or through up to `depth`
   * objects in between, that have every property in `shape` (a property whose value is a small
   * integer is not in a snapshot: it is no object of its own): e.g. the device folds holding a
   * device's name, or its metadata through the metadata object. Each as the path from the
   * holder down to the string (`Constructor.property -> ...`). An empty `shape`: every holder up
   * to `depth` (to tell what holds a text `found` found).
   */
  holders(wanted: readonly string[], shape: readonly string[], depth = 2): string[] {
    const found: string[] = [];
    // Paths up from each string, one level of retainers at a time.
    let level = new Map<number, string>();
    for (let node = 0; node < this.firstEdge.length; node++) {
      if (!this.nodeType(node).includes('string')) continue;
      const name = this.nodeName(node);
      const text = wanted.find((w) => name.includes(w));
      if (text !== undefined) level.set(node, `"${text}"`);
    }
    for (let step = 0; step <= depth && level.size > 0; step++) {
      const up = new Map<number, string>();
      this.eachStrongEdge((from, name, to) => {
        const below = level.get(to);
        if (below === undefined) return;
        const path = `${this.nodeName(from)}.${name} -> ${below}`;
        if (shape.every((property) => this.hasProperty(from, property))) found.push(path);
        if (!up.has(from)) up.set(from, path);
      });
      level = up;
    }
    return found;
  }

  private nodeType(node: number): string {
    return this.nodeTypes[this.json.nodes[node * this.nodeFields + this.typeOffset] as number] ?? '';
  }

  private nodeName(node: number): string {
    return this.json.strings[this.json.nodes[node * this.nodeFields + this.nameOffset] as number] ?? '';
  }

  private edgeName(type: string, nameOrIndex: number): string {
    return type === 'element' || type === 'hidden' ? `[${nameOrIndex}]` : (this.json.strings[nameOrIndex] ?? '');
  }

  private hasProperty(node: number, property: string): boolean {
    const edges = this.json.edges;
    const start = this.firstEdge[node] as number;
    const end = start + (this.json.nodes[node * this.nodeFields + this.edgeCountOffset] as number) * this.edgeFields;
    for (let e = start; e < end; e += this.edgeFields) {
      if (this.edgeTypes[edges[e] as number] === 'property' && this.json.strings[edges[e + 1] as number] === property) return true;
    }
    return false;
  }

  /** Every edge that keeps its target alive (weak ones keep nothing). */
  private eachStrongEdge(visit: (from: number, name: string, to: number) => void): void {
    const edges = this.json.edges;
    let e = 0;
    for (let from = 0; from < this.firstEdge.length; from++) {
      const end = e + (this.json.nodes[from * this.nodeFields + this.edgeCountOffset] as number) * this.edgeFields;
      for (; e < end; e += this.edgeFields) {
        const type = this.edgeTypes[edges[e] as number] ?? '';
        if (type === 'weak') continue;
        visit(from, this.edgeName(type, edges[e + 1] as number), (edges[e + 2] as number) / this.nodeFields);
      }
    }
  }
}

/** A service process whose heap can be read (SIGUSR2), with its own directory for the snapshots. */
export interface Watched {
  readonly process: ServerProcess;
  readonly snapshots: string;
}

/** The real service in a process of its own (test secrets, generous limits, `env` over them) that writes heap snapshots. */
export async function startWatched(env: Record<string, string>): Promise<Watched> {
  const snapshots = mkdtempSync(join(tmpdir(), 'hhc-heap-'));
  const service = await startServerProcess({ ...TEST_SECRETS, RATE_LIMITS: GENEROUS_RATE_LIMITS, ...heapSnapshotEnv(snapshots), ...env });
  return { process: service, snapshots };
}

export async function stopWatched(watched: Watched | undefined): Promise<void> {
  if (watched === undefined) return;
  await watched.process.stop();
  rmSync(watched.snapshots, { recursive: true, force: true });
}

export const heapOf = (watched: Watched): Promise<HeapSnapshot> => HeapSnapshot.of(watched.process, watched.snapshots);

/** What a heap snapshot of the process finds of `texts`, and, should it find any, what holds them (up to `depth` objects up). */
export async function heldBy(watched: Watched, texts: readonly string[], depth = 4): Promise<{ found: string[]; holders: string[] }> {
  const snapshot = await heapOf(watched);
  const found = snapshot.found(texts);
  return { found, holders: found.length > 0 ? snapshot.holders(texts, [], depth) : [] };
}

/** A text no one else writes. */
export const marker = (label: string): string => `${label}${randomUUID().replace(/-/g, '')}`;

export interface DeviceMarkers {
  readonly name: string;
  readonly ip: string;
  readonly metadata: string;
  /** What a heartbeat then reports. */
  readonly laterIp: string;
  readonly laterMetadata: string;
}

export const deviceMarkers = (): DeviceMarkers => ({
  name: marker('KeptName'),
  ip: marker('KeptIp'),
  metadata: marker('KeptMeta'),
  laterIp: marker('KeptLaterIp'),
  laterMetadata: marker('KeptLaterMeta'),
});
