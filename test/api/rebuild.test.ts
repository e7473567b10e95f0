import { randomUUID } from 'node:crypto';
import { MongoClient } from 'mongodb';
import { createPresenceCommands } from '../../src/commands/presence';
import { GENERATION_COLLECTION } from '../../src/infra/readstore/generations';
import { createMongoReadStore } from '../../src/infra/readstore/mongo';
import { api, createUser, MODES, startTestService, type Mode, type TestService } from '../support/harness';
import { runReplay } from '../support/replay';
import { READ_MODEL_COLLECTIONS, snapshotReadModels } from '../support/snapshot';
import { mulberry32 } from '../support/prng';

/**
 * Rebuilding the read models (decisions §9) in both modes: after a randomized workload a
 * rebuild from scratch gives exactly the live read models (documents and guards), the
 * service keeps serving — and reading its own writes — while it runs and across the
 * switch, and the live projector then continues in the new generation from its checkpoint.
 */

type User = Awaited<ReturnType<typeof createUser>>;

interface RebuildReport {
  generation: number;
  previousGeneration: number;
  events: number;
  collections: Record<string, number>;
}


const SEED = Number(process.env.REBUILD_TEST_SEED ?? Date.now() % 100_000);

describe.each<Mode>(MODES)(`read-model rebuild (%s mode, seed ${SEED})`, (mode) => {
  let service: TestService;
  let admin: User;

  beforeAll(async () => {
    service = await startTestService(mode);
    admin = await createUser(service, { role: 'admin' });
  }, 60_000);
  afterAll(async () => {
    await service?.stop();
  });

  const rebuildOverHttp = async (): Promise<RebuildReport> => {
    const res = await api(service, 'POST', '/admin/read-models/rebuild', { token: admin.accessToken });
    if (res.status !== 200) throw new Error(`rebuild answered ${res.status}: ${JSON.stringify(res.body)}`);
    return res.body as RebuildReport;
  };

  /** Registrations, links, role changes, unlinks, renames, heartbeats, expiries, deletions and re-registrations, at random. */
  const randomWorkload = async (steps: number): Promise<void> => {
    const random = mulberry32(SEED);
    const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
    const users: User[] = [];
    for (let i = 0; i < 5; i++) users.push(await createUser(service));
    interface Live {
      uuid: string;
      owner: User;
      token: string | null;
      deleted: boolean;
    }
    const devices: Live[] = [];
    // A clock ten minutes ahead: the expiry job then finds every online device overdue.
    const expiry = createPresenceCommands({ eventStore: service.eventStore, clock: { now: () => new Date(Date.now() + 600_000) }, offlineAfterSeconds: 300 });
    const ok = (status: number, what: string): void => {
      if (status >= 500) throw new Error(`${what} answered ${status}`);
    };

    for (let step = 0; step < steps; step++) {
      const roll = random();
      const alive = devices.filter((d) => !d.deleted);
      const device = alive.length > 0 ? pick(alive) : undefined;
      if (device === undefined || roll < 0.12) {
        const deleted = devices.filter((d) => d.deleted);
        const owner = pick(users);
        const again = deleted.length > 0 && random() < 0.5 ? pick(deleted) : undefined;
        const uuid = again?.uuid ?? randomUUID();
        const res = await api(service, 'POST', '/devices/register', { token: owner.accessToken, body: { uuid, deviceId: `HUB-${step}`, name: `Hub ${step}` } });
        ok(res.status, 'register');
        if (res.status === 201) {
          if (again !== undefined) devices.splice(devices.indexOf(again), 1);
          devices.push({ uuid, owner, token: null, deleted: false });
        }
      } else if (roll < 0.3) {
        const res = await api(service, 'POST', `/devices/${device.uuid}/link`, {
          token: device.owner.accessToken,
          body: { email: pick(users.filter((u) => u !== device.owner)).email, role: pick(['editor', 'viewer', 'viewer']) },
        });
        ok(res.status, 'link');
      } else if (roll < 0.4) {
        const res = await api(service, 'DELETE', `/devices/${device.uuid}/users/${pick(users.filter((u) => u !== device.owner)).id}`, {
          token: device.owner.accessToken,
        });
        ok(res.status, 'unlink');
      } else if (roll < 0.52) {
        const res = await api(service, 'PUT', `/devices/${device.uuid}`, { token: device.owner.accessToken, body: { name: `Renamed ${step}`, port: String(8000 + step) } });
        ok(res.status, 'rename');
      } else if (roll < 0.8) {
        if (device.token === null) {
          const res = await api(service, 'POST', `/devices/auth/${device.uuid}`, { token: device.owner.accessToken });
          ok(res.status, 'device token');
          device.token = (res.body as { token: string }).token;
        }
        const body = random() < 0.3 ? { ipAddress: `10.0.0.${step % 250}`, metadata: { step } } : {};
        const res = await api(service, 'POST', `/devices/heartbeat/${device.uuid}`, { token: device.token, body });
        ok(res.status, 'heartbeat');
      } else if (roll < 0.92) {
        await expiry.expire(device.uuid);
      } else {
        const res = await api(service, 'DELETE', `/devices/${device.uuid}`, { token: device.owner.accessToken });
        ok(res.status, 'delete');
        device.deleted = true;
      }
    }
    // Some seeds delete every device: one more keeps the comparison below from being vacuous.
    const last = await api(service, 'POST', '/devices/register', { token: users[0]?.accessToken ?? '', body: { uuid: randomUUID(), deviceId: 'HUB-LAST', name: 'Last hub' } });
    ok(last.status, 'register');
    // The expiry job does not wait for the projection; a write that does, after it, settles everything before it.
    await createUser(service);
  };

  test('from scratch it yields the live read models exactly; the service serves throughout and continues in the new generation', async () => {
    await randomWorkload(90);
    const live = await snapshotReadModels(service.readStore);
    expect(live.devices?.length).toBeGreaterThan(0);

    // 1. A rebuild from scratch (in distributed mode by the CLI, in another process): identical read models.
    let first: RebuildReport;
    if (mode === 'distributed') {
      const cli = await runReplay(service.env, ['rebuild']);
      expect({ code: cli.code, stderr: cli.stderr }).toEqual({ code: 0, stderr: '' });
      first = JSON.parse(cli.stdout) as RebuildReport;
    } else {
      first = await rebuildOverHttp();
    }
    expect(first).toMatchObject({ generation: 1, previousGeneration: 0 });
    expect(Object.keys(first.collections).sort()).toEqual([...READ_MODEL_COLLECTIONS].sort());
    if (mode === 'distributed') {
      // The generation's own collections, `g1_*`, as any API process reads them once it follows the switch.
      const generation1 = await createMongoReadStore(service.env.MONGODB_URI ?? '', { collectionPrefix: 'g1_' });
      expect(await snapshotReadModels(generation1)).toEqual(live);
      await generation1.close();
    } else {
      expect(await snapshotReadModels(service.readStore)).toEqual(live);
    }

    // 2. A rebuild while requests keep coming: every write is read back at once, across the switch.
    const owner = await createUser(service);
    const probe = (await api(service, 'POST', '/devices/register', { token: owner.accessToken, body: { uuid: randomUUID(), deviceId: 'P', name: 'p0' } })).body as {
      uuid: string;
    };
    let rebuilding = true;
    const second = rebuildOverHttp().finally(() => (rebuilding = false));
    let writes = 0;
    do {
      writes++;
      const name = `p${writes}`;
      expect((await api(service, 'PUT', `/devices/${probe.uuid}`, { token: owner.accessToken, body: { name } })).status).toBe(200);
      const read = await api(service, 'GET', `/devices/${probe.uuid}`, { token: owner.accessToken });
      expect((read.body as { name: string }).name).toBe(name);
    } while (rebuilding);
    expect(await second).toMatchObject({ generation: 2, previousGeneration: 1 });
    for (let i = 0; i < 3; i++) {
      writes++;
      expect((await api(service, 'PUT', `/devices/${probe.uuid}`, { token: owner.accessToken, body: { name: `p${writes}` } })).status).toBe(200);
      expect(((await api(service, 'GET', `/devices/${probe.uuid}`, { token: owner.accessToken })).body as { name: string }).name).toBe(`p${writes}`);
    }

    if (mode === 'distributed') {
      const client = new MongoClient(service.env.MONGODB_URI ?? '');
      await client.connect();
      try {
        const record = await client.db().collection<{ _id: string }>(GENERATION_COLLECTION).findOne({ _id: 'current' });
        expect(record).toMatchObject({ generation: 2, prefix: 'g2_', pending: null });
      } finally {
        await client.close();
      }
    }

    // 3. What the live projector built in generation 2 after the switch, from generation 2's
    // checkpoint, is again exactly what a rebuild from scratch gives.
    await randomWorkload(20);
    const continued = await snapshotReadModels(service.readStore);
    expect(await rebuildOverHttp()).toMatchObject({ generation: 3, previousGeneration: 2 });
    expect(await snapshotReadModels(service.readStore)).toEqual(continued);
    // A budget, not a speed claim: the workload and the rebuild are CPU-bound, and a busy
    // 2-core machine gives them a fraction of a core (rebuild speed is bench:rebuild's).
  }, 240_000);
});

