import { isDeepStrictEqual } from 'node:util';
import type { History, Operation } from './history';
import { ok } from './history';
import type { DeviceModel, UserModel } from './model';
import type { StoredModels } from './stored-models';
import { violation, type Actor, type World } from './world';

/**
 * The checks after the faults have stopped and the service has settled, read through the
 * API as clients see it (an admin reads every device). Each adds its violations to the
 * world under its own name; the run prints them as a table.
 */

export const INVARIANTS = [
  'acknowledged writes visible',
  'no duplicated effect',
  'uniqueness',
  'read models equal a rebuild',
  'presence equals heartbeats',
  'refresh-token families',
  'no 5xx but 503 in an outage',
  'tunnel reconnected and relayed',
  // Watched during the run (watchers.ts).
  'tunnel acks match the hub socket',
  'one projector at a time',
  'checkpoint never decreases',
  'nothing deleted reappears',
] as const;

export interface Reader {
  /** GET as the admin, retried until answered; null when no answer came at all. */
  get(path: string, token?: string): Promise<Operation | null>;
  post(path: string, token: string): Promise<Operation | null>;
}

interface DeviceView {
  readonly id: string;
  readonly name: string;
  readonly isOnline: boolean;
  readonly lastSeenAt: string | null;
  readonly users: ReadonlyArray<{ id: string; role: string }>;
}

export async function checkDevices(world: World, read: Reader): Promise<void> {
  const name = 'acknowledged writes visible';
  for (const device of world.devices) {
    const op = await read.get(`/devices/${device.uuid}`);
    if (op?.status === 404) {
      if (!device.exists.allows(false)) violation(world, name, 'an acknowledged device is gone (404)', device.entity);
      continue;
    }
    if (op === null || !ok(op)) {
      violation(world, name, `device read answered ${op?.status ?? 'nothing'}`, device.entity);
      continue;
    }
    const view = op.body as DeviceView;
    if (!device.exists.allows(true)) violation(world, name, 'an acknowledged deletion is not visible', device.entity);
    if (!device.name.allows(view.name)) violation(world, name, `name ${JSON.stringify(view.name)}, acknowledged ${JSON.stringify(device.name.list())}`, device.entity);
    for (const [userId, role] of device.links) {
      const actual = view.users.find((u) => u.id === userId)?.role ?? null;
      if (!role.allows(actual as never)) violation(world, name, `user ${userId} linked as ${actual}, acknowledged ${JSON.stringify(role.list())}`, device.entity);
    }
  }
}

export async function checkUsers(world: World, read: Reader): Promise<void> {
  const emails = new Map<string, UserModel>();
  for (const user of world.users) {
    const op = await read.get('/users/me', user.accessToken);
    if (op === null || !ok(op)) {
      violation(world, 'acknowledged writes visible', `GET /users/me answered ${op?.status ?? 'nothing'}`, user.entity);
      continue;
    }
    const me = op.body as { email: string; firstName: string };
    if (!user.firstName.allows(me.firstName)) violation(world, 'acknowledged writes visible', `firstName ${me.firstName}, acknowledged ${JSON.stringify(user.firstName.list())}`, user.entity);
    if (!user.email.allows(me.email)) violation(world, 'acknowledged writes visible', `email ${me.email}, acknowledged ${JSON.stringify(user.email.list())}`, user.entity);
    const other = emails.get(me.email);
    if (other !== undefined) violation(world, 'uniqueness', `${me.email} held by customers ${other.customerId} and ${user.customerId}`, user.entity);
    emails.set(me.email, user);
  }
}

/** Every event a request caused appears once: no write was applied twice (a retry, a replay). */
export async function checkNoDuplicates(world: World, read: Reader): Promise<void> {
  const name = 'no duplicated effect';
  for (const device of world.devices) {
    const seen = new Map<string, number[]>();
    let after: number | null = null;
    for (let page = 0; page < 50; page++) {
      const op = await read.get(`/devices/${device.uuid}/history?limit=100${after === null ? '' : `&after=${after}`}`);
      if (op === null || !ok(op)) {
        violation(world, name, `history answered ${op?.status ?? 'nothing'}`, device.entity);
        break;
      }
      const body = op.body as { data: Array<{ revision: number; type: string; requestId: string; data: { userId?: string } }>; meta: { nextAfter: number | null; hasMore: boolean } };
      for (const event of body.data) {
        const key = `${event.requestId} ${event.type} ${event.data.userId ?? ''}`;
        seen.set(key, [...(seen.get(key) ?? []), event.revision]);
      }
      if (!body.meta.hasMore) break;
      after = body.meta.nextAfter;
    }
    for (const [key, revisions] of seen) if (revisions.length > 1) violation(world, name, `${key} recorded at revisions ${revisions.join(', ')}`, device.entity);
  }
}

export async function checkUuidRaces(world: World, read: Reader): Promise<void> {
  for (const race of world.races) {
    const op = await read.get(`/devices/${race.uuid}`);
    const exists = op !== null && ok(op);
    const answered = race.ops.every((o) => o.status !== null);
    if (answered && race.created === 0 && exists) violation(world, 'acknowledged writes visible', 'a device nobody was told was registered exists', `race:${race.uuid}`);
    if (race.created === 1 && !exists) violation(world, 'acknowledged writes visible', 'an acknowledged registration is gone', `race:${race.uuid}`);
  }
}

/** What clients read of every device and user, before and after a rebuild of the read models from the events. */
async function observed(world: World, read: Reader): Promise<Map<string, unknown>> {
  const views = new Map<string, unknown>();
  for (const device of world.devices) views.set(device.entity, (await read.get(`/devices/${device.uuid}`))?.body ?? null);
  for (const user of world.users) views.set(user.entity, (await read.get('/users/me', user.accessToken))?.body ?? null);
  return views;
}

/**
 * A rebuild from the events (POST /admin/read-models/rebuild) changes nothing a client reads;
 * in distributed mode the stored documents and guards of the rebuilt generation are also
 * exactly those of the generation served before.
 */
export async function checkRebuild(world: World, read: Reader, adminToken: string, stored: StoredModels | null): Promise<void> {
  const name = 'read models equal a rebuild';
  const before = await observed(world, read);
  const served = stored === null ? null : await stored.served();
  const liveSnapshot = stored === null || served === null ? null : await stored.snapshot(served);
  const rebuilt = await read.post('/admin/read-models/rebuild', adminToken);
  if (rebuilt === null || !ok(rebuilt)) {
    violation(world, name, `rebuild answered ${rebuilt?.status ?? 'nothing'}`, null);
    return;
  }
  const after = await observed(world, read);
  for (const [entity, view] of before) {
    if (!isDeepStrictEqual(view, after.get(entity))) violation(world, name, `live ${JSON.stringify(view)} but rebuilt ${JSON.stringify(after.get(entity))}`, entity);
  }
  if (stored === null || liveSnapshot === null) return;
  const report = rebuilt.body as { generation: number };
  const storedDocs = Object.values(liveSnapshot).reduce((sum, docs) => sum + docs.length, 0);
  world.notes.push(`rebuild: ${storedDocs} stored documents of generation ${served} compared with generation ${report.generation}`);
  if (storedDocs < world.users.length) violation(world, name, `only ${storedDocs} stored documents found for ${world.users.length} users`, null);
  const rebuiltSnapshot = await stored.snapshot(report.generation);
  for (const [collection, docs] of Object.entries(liveSnapshot)) {
    if (!isDeepStrictEqual(docs, rebuiltSnapshot[collection])) {
      const differing = docs.find((d, i) => !isDeepStrictEqual(d, rebuiltSnapshot[collection]?.[i]));
      violation(world, name, `stored ${collection} of generation ${served} differ from rebuilt generation ${report.generation}, e.g. ${JSON.stringify(differing).slice(0, 300)}`, null);
    }
  }
}

/**
 * Presence after the outage: every device offline (its last heartbeat is older than the
 * offline window), with the lastSeenAt of the last heartbeat answered; then half of them
 * heartbeat once more and read as online with exactly that heartbeat's time.
 */
export async function checkPresence(world: World, read: Reader, actor: (device: DeviceModel) => Actor, heartbeat: (a: Actor, d: DeviceModel) => Promise<void>): Promise<void> {
  const name = 'presence equals heartbeats';
  const present = world.devices.filter((d) => d.exists.certain() === true && d.deviceToken !== null);
  const expectPresence = async (device: DeviceModel, online: boolean): Promise<void> => {
    const view = (await read.get(`/devices/${device.uuid}`))?.body as DeviceView | undefined;
    if (view === undefined) return violation(world, name, 'device not readable', device.entity);
    const seenOk = device.heartbeatUncertain ? (view.lastSeenAt ?? '') >= (device.lastSeenAt ?? '') : view.lastSeenAt === device.lastSeenAt;
    if (view.isOnline !== online || !seenOk) {
      violation(world, name, `isOnline ${view.isOnline} lastSeenAt ${view.lastSeenAt}; heartbeats say ${online} ${device.lastSeenAt}${device.heartbeatUncertain ? ' or later' : ''}`, device.entity);
    }
  };
  for (const device of present) await expectPresence(device, false);
  const again = present.filter((_d, i) => i % 2 === 0);
  for (const device of again) {
    for (let i = 0; i < 5 && (device.heartbeatUncertain || i === 0); i++) await heartbeat(actor(device), device);
    await expectPresence(device, true);
  }
}

/** No 5xx at all but a 503, and a 503 only while something was down (or just after). */
export function checkServerErrors(world: World, history: History, graceMs: number): void {
  for (const op of history.operations) {
    if (op.status === null || op.status < 500) continue;
    if (op.status === 503 && history.duringFault(op.startedAt, graceMs)) continue;
    violation(world, 'no 5xx but 503 in an outage', `${op.method} ${op.path} answered ${op.status}${op.status === 503 ? ' outside any outage' : ''}: ${JSON.stringify(op.body).slice(0, 200)}`, op.entity);
  }
}
