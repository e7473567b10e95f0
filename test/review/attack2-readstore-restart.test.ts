import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createMemoryReadStore, type MemoryReadStore } from '../../src/infra/readstore/memory';
import type { Query, ReadCollection, ReadDoc, SortKey } from '../../src/infra/readstore/port';
import { SNAPSHOT_FILE_NAME } from '../../src/runtime/snapshot';
import { api, createUser, startTestService, type TestService } from '../support/harness';
import { deviceToken, linkUser, registerHub } from '../support/tunnel';
import { mulberry32 } from '../support/prng';

/**
 * Outside attack (round 2) on the memory read store's indexes declared while a start's replay
 * defers indexing (src/infra/readstore/memory.ts: built once when the deferral ends or at the
 * first query). Through the store API: a state exported while indexes are pending, a new store
 * from it, indexes declared again with and without deferral, writes and removals between, a
 * unique index declared in the middle; every answer compared with a store indexing at each
 * write. Through the service: embedded, many devices and heartbeats, stopped and started again
 * on the same DATA_DIR (with its snapshot, and with the snapshot removed so the whole log
 * replays), and `GET /api/v1/devices` pages, sorts and filters (interface.md) compared.
 */
type Doc = ReadDoc & Record<string, unknown>;

describe('store API: export while indexes are pending, a new store from it', () => {
  const KEYS: SortKey[][] = [
    [{ field: 'owner', order: 'asc' }, { field: 'seen', order: 'asc' }],
    [{ field: 'owner', order: 'asc' }, { field: 'name', order: 'asc' }],
    [{ field: 'tags', order: 'asc' }, { field: 'seen', order: 'desc' }],
    [{ field: 'name', order: 'asc' }],
  ];

  async function run(seed: number): Promise<string | null> {
    const random = mulberry32(seed);
    const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
    const doc = (id: string): Doc => ({
      id,
      owner: pick(['u1', 'u2', 'u3', null]),
      name: pick(['Hub', 'hub', 'Zed', 'a', 1, null]),
      seen: pick(['2026-01-01T00:00:00.000Z', '2026-01-02T00:00:00.000Z', 5, null]),
      tags: pick([['u1', 'u2'], ['u3'], [], 'u1']),
      serial: id,
    });
    const query = (): Query => {
      const where: Record<string, unknown> = {};
      if (random() < 0.6) where.owner = pick(['u1', 'u2', 'u3', null]);
      if (random() < 0.3) where.tags = pick(['u1', 'u2', 'u3']);
      if (random() < 0.2) where.name = { in: ['Hub', 'a', 1] };
      const sort: SortKey[] = random() < 0.8 ? [{ field: pick(['seen', 'name', 'owner'] as const), order: pick(['asc', 'desc'] as const) }] : [];
      return { where: where as Query['where'], sort, skip: Math.floor(random() * 3), limit: 1 + Math.floor(random() * 6) };
    };

    // The first store: deferred from the start, indexes declared during it, then exported while they are pending.
    const eager = createMemoryReadStore();
    const first = createMemoryReadStore();
    const resumeFirst = first.deferIndexing();
    const ec = eager.collection<Doc>('devices');
    const fc = first.collection<Doc>('devices');
    for (const keys of KEYS) {
      await ec.ensureIndex(keys);
      await fc.ensureIndex(keys);
    }
    let guard = 0;
    const g = (): string => String(++guard).padStart(8, '0');
    const ops = async (a: ReadCollection<Doc>, b: ReadCollection<Doc>, n: number): Promise<string | null> => {
      for (let i = 0; i < n; i++) {
        const id = `d${Math.floor(random() * 12)}`;
        const r = random();
        const next = g();
        if (r < 0.6) {
          const d = doc(id);
          await a.put(d, next);
          await b.put(d, next);
        } else if (r < 0.75) {
          await a.remove(id, next);
          await b.remove(id, next);
        } else {
          const q = query();
          const [x, y] = [JSON.stringify(await a.find(q)), JSON.stringify(await b.find(q))];
          if (x !== y) return `find ${JSON.stringify(q)}: ${x} vs ${y}`;
          const [cx, cy] = [await a.count(q.where), await b.count(q.where)];
          if (cx !== cy) return `count ${JSON.stringify(q.where)}: ${cx} vs ${cy}`;
        }
      }
      return null;
    };
    // Writes only (no query: the indexes stay pending), then the export.
    for (let i = 0; i < 30; i++) {
      const id = `d${Math.floor(random() * 12)}`;
      const next = g();
      const d = doc(id);
      await ec.put(d, next);
      await fc.put(d, next);
    }
    const state = first.exportState();
    resumeFirst();
    let found = await ops(ec, fc, 60);
    if (found !== null) return `first store: ${found}`;

    // A new store from that state, deferred, indexes declared again (one unique, in the middle), more writes.
    const second: MemoryReadStore = createMemoryReadStore(state);
    const resumeSecond = second.deferIndexing();
    const sc = second.collection<Doc>('devices');
    await sc.ensureIndex(KEYS[0]!);
    // The eager twin starts from the same state, indexing at each write.
    const twin = createMemoryReadStore(state);
    const tc = twin.collection<Doc>('devices');
    for (const keys of KEYS) await tc.ensureIndex(keys);
    await tc.ensureIndex([{ field: 'serial', order: 'asc' }], { unique: true });
    found = await ops(tc, sc, 20);
    if (found !== null) return `second store, before the rest of its indexes: ${found}`;
    await sc.ensureIndex([{ field: 'serial', order: 'asc' }], { unique: true });
    for (const keys of KEYS.slice(1)) await sc.ensureIndex(keys);
    found = await ops(tc, sc, 40);
    if (found !== null) return `second store, deferred: ${found}`;
    resumeSecond();
    found = await ops(tc, sc, 60);
    if (found !== null) return `second store, resumed: ${found}`;
    const exported = (s: MemoryReadStore): string => JSON.stringify(s.exportState().collections);
    if (exported(twin) !== exported(second)) return 'exported states differ';
    return null;
  }

  it('answers exactly as stores indexing at each write, over 150 seeds', async () => {
    const failures: string[] = [];
    for (let seed = 1; seed <= 150; seed++) {
      const found = await run(seed);
      if (found !== null) failures.push(`seed ${seed}: ${found}`);
    }
    expect(failures.slice(0, 3)).toEqual([]);
  }, 60_000);
});

describe('service: GET /devices before and after an embedded restart on the same DATA_DIR', () => {
  const dir = mkdtempSync(join(tmpdir(), 'hhc-attack2-readstore-'));
  // A snapshot every 40 events: the restart starts from one, then replays what came after it.
  const env = { DATA_DIR: dir, SNAPSHOT_EVERY_EVENTS: '40' };
  let service: TestService;
  beforeAll(async () => {
    service = await startTestService('embedded', env);
  }, 60_000);
  afterAll(async () => {
    await service?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  type User = Awaited<ReturnType<typeof createUser>>;
  const queries: string[] = [];
  for (const sort of ['createdAt', 'updatedAt', 'name', 'lastSeenAt']) {
    for (const order of ['asc', 'desc']) {
      for (const online of ['', '&online=true', '&online=false']) {
        for (const page of [1, 2, 3]) queries.push(`?sort=${sort}&order=${order}&limit=7&page=${page}${online}`);
      }
    }
  }
  queries.push('?limit=100', '?role=viewer', '?role=owner,editor&limit=5&page=2', '?limit=100&order=asc');

  async function snapshotOf(users: User[]): Promise<Record<string, unknown>> {
    const seen: Record<string, unknown> = {};
    for (const [i, user] of users.entries()) {
      for (const q of queries) {
        const res = await api(service, 'GET', `/devices${q}`, { token: service.tokens.signAccess({ sub: user.id, email: user.email, role: 'user' }) });
        seen[`user${i} ${q}`] = { status: res.status, body: res.body };
      }
    }
    return seen;
  }

  it('every page, sort and filter answers the same after a restart from the snapshot, and after one replaying the whole log', async () => {
    const random = mulberry32(20261128);
    const owners = [await createUser(service), await createUser(service)];
    const viewer = await createUser(service);
    const hubs: Array<{ hub: Awaited<ReturnType<typeof registerHub>>; token: string }> = [];
    for (let i = 0; i < 24; i++) {
      const owner = owners[i % 2]!;
      const hub = await registerHub(service, owner);
      // Names with ties and letter case.
      await api(service, 'PUT', `/devices/${hub.id}`, { token: owner.accessToken, body: { name: ['Hub', 'hub', 'Attic', 'attic', 'Zed'][i % 5] } });
      if (i % 3 === 0) await linkUser(service, hub, owner, viewer, i % 2 === 0 ? 'viewer' : 'editor');
      hubs.push({ hub, token: await deviceToken(service, hub, owner) });
    }
    // Many heartbeats, some with metadata, in random order: the replay writes each device many times.
    for (let round = 0; round < 8; round++) {
      for (const { hub, token } of hubs) {
        if (random() < 0.35) continue;
        const body = random() < 0.3 ? { metadata: { round, fw: `1.${round}` } } : {};
        const res = await api(service, 'POST', `/devices/heartbeat/${hub.uuid}`, { token, body });
        expect(res.status).toBe(200);
      }
    }
    // A few devices deleted.
    for (const { hub } of hubs.slice(0, 24).filter((_, i) => i % 7 === 3)) {
      const owner = owners[hubs.findIndex((h) => h.hub.id === hub.id) % 2]!;
      expect((await api(service, 'DELETE', `/devices/${hub.id}`, { token: owner.accessToken })).status).toBe(200);
    }
    const users = [...owners, viewer];
    const before = await snapshotOf(users);
    expect(Object.values(before).every((r) => (r as { status: number }).status === 200)).toBe(true);
    // Not vacuous: each user sees devices, and the viewer some of them.
    const sizes = users.map((_, i) => ((before[`user${i} ?limit=100`] as { body: { data: unknown[] } }).body.data ?? []).length);
    expect(sizes.every((n) => n >= 4)).toBe(true);

    await service.stop();
    service = await startTestService('embedded', env);
    const afterSnapshotStart = await snapshotOf(users);

    await service.stop();
    const snapshot = join(dir, SNAPSHOT_FILE_NAME);
    if (existsSync(snapshot)) rmSync(snapshot);
    service = await startTestService('embedded', env);
    const afterFullReplay = await snapshotOf(users);

    const diff = (a: Record<string, unknown>, b: Record<string, unknown>): string[] =>
      Object.keys(a).filter((k) => JSON.stringify(a[k]) !== JSON.stringify(b[k]));
    expect({ fromSnapshot: diff(before, afterSnapshotStart), fullReplay: diff(before, afterFullReplay) }).toEqual({ fromSnapshot: [], fullReplay: [] });
  }, 180_000);
});
