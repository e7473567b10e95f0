import { randomUUID } from 'node:crypto';
import { ok } from './history';
import { Possible, type DeviceModel, type Role, type UserModel } from './model';
import { pick, registerDevice, send, syncUser, violation, type Actor } from './world';

/**
 * The writes of the mixed workload, one function each: what the CRM, people and hubs do.
 * Each records what the answer allows the service to hold (model.ts) and checks what can
 * be checked at once (one winner of a race, a current refresh token accepted).
 */

const MAX_LIVE_DEVICES_PER_WORKER = 8;

const liveDevices = (actor: Actor): DeviceModel[] => actor.devices.filter((d) => d.exists.certain() === true);
const owner = (actor: Actor): UserModel => actor.users[0] as UserModel;
/** Users of this worker whose e-mail is known: they can be linked by address. */
const linkable = (actor: Actor): UserModel[] => actor.users.slice(1).filter((u) => u.email.certain() !== undefined);

export async function renameUser(actor: Actor): Promise<void> {
  const user = pick(actor.rng, actor.users);
  if (user === undefined) return;
  await syncUser(actor, user, `Name${Math.floor(actor.rng() * 1e6)}`, user.lastEmail, 'rename-user');
}

export async function changeEmail(actor: Actor): Promise<void> {
  const user = pick(actor.rng, actor.users.slice(1));
  if (user === undefined) return;
  user.emailCounter += 1;
  await syncUser(actor, user, user.firstName.list().at(-1) ?? 'Initial', `c${user.customerId}-${user.emailCounter}@chaos.example.com`, 'change-email');
}

/** The CRM tries to give a user another user's address: 409, never two users with one e-mail. */
export async function stealEmail(actor: Actor): Promise<void> {
  const user = pick(actor.rng, actor.users.slice(1));
  const victim = pick(actor.rng, actor.world.users.filter((u) => u !== user && u.email.certain() !== undefined));
  if (user === undefined || victim === undefined) return;
  await syncUser(actor, user, user.firstName.list().at(-1) ?? 'Initial', victim.lastEmail, 'steal-email');
}

export async function register(actor: Actor): Promise<void> {
  // Devices that may exist count too: the service's per-owner limit counts what it holds.
  if (actor.devices.filter((d) => d.exists.allows(true)).length >= MAX_LIVE_DEVICES_PER_WORKER) return;
  await registerDevice(actor, owner(actor), false);
}

/** Two people register the same new uuid at once: one 201 at most. */
export async function registerRace(actor: Actor): Promise<void> {
  const second = actor.users[1];
  if (second === undefined) return;
  const uuid = randomUUID();
  const body = { uuid, deviceId: `RACE-${uuid.slice(0, 8)}`, name: 'Race' };
  const ops = await Promise.all(
    [owner(actor), second].map((u) => send(actor, { kind: 'register-race', entity: `race:${uuid}`, method: 'POST', path: '/devices/register', token: u.accessToken, body, summary: uuid })),
  );
  const created = ops.filter((op) => op.status === 201).length;
  actor.world.races.push({ uuid, created, ops });
  if (created > 1) violation(actor.world, 'uniqueness', `uuid ${uuid} registered twice`, `race:${uuid}`);
}

export async function renameDevice(actor: Actor): Promise<void> {
  const device = pick(actor.rng, liveDevices(actor));
  if (device === undefined) return;
  const name = `Hub ${Math.floor(actor.rng() * 1e6)}`;
  const op = await send(actor, { kind: 'rename-device', entity: device.entity, method: 'PUT', path: `/devices/${device.uuid}`, token: device.owner.accessToken, body: { name }, summary: name });
  device.name.after(op, name);
}

export async function link(actor: Actor): Promise<void> {
  const device = pick(actor.rng, liveDevices(actor));
  const user = pick(actor.rng, linkable(actor));
  if (device === undefined || user === undefined) return;
  const role = pick<Role>(actor.rng, ['editor', 'viewer']) ?? 'viewer';
  const op = await send(actor, {
    kind: 'link',
    entity: device.entity,
    method: 'POST',
    path: `/devices/${device.uuid}/link`,
    token: device.owner.accessToken,
    body: { email: user.lastEmail, role },
    summary: `${user.userId} as ${role}`,
  });
  linkOf(device, user.userId).after(op, role);
}

export async function unlink(actor: Actor): Promise<void> {
  const device = pick(actor.rng, liveDevices(actor));
  const user = pick(actor.rng, actor.users.slice(1));
  if (device === undefined || user === undefined || !device.links.has(user.userId)) return;
  const op = await send(actor, { kind: 'unlink', entity: device.entity, method: 'DELETE', path: `/devices/${device.uuid}/users/${user.userId}`, token: device.owner.accessToken, summary: user.userId });
  linkOf(device, user.userId).after(op, null);
}

function linkOf(device: DeviceModel, userId: string): Possible<Role | null> {
  const existing = device.links.get(userId);
  if (existing !== undefined) return existing;
  const created = new Possible<Role | null>(null);
  device.links.set(userId, created);
  return created;
}

export async function deleteDevice(actor: Actor): Promise<void> {
  const device = pick(actor.rng, liveDevices(actor).filter((d) => !d.tunnel));
  if (device === undefined) return;
  const op = await send(actor, { kind: 'delete-device', entity: device.entity, method: 'DELETE', path: `/devices/${device.uuid}`, token: device.owner.accessToken });
  device.exists.after(op, false);
}

export async function heartbeat(actor: Actor, device: DeviceModel | undefined = pick(actor.rng, liveDevices(actor))): Promise<void> {
  if (device === undefined || device.deviceToken === null) return;
  const op = await send(actor, { kind: 'heartbeat', entity: device.entity, method: 'POST', path: `/devices/heartbeat/${device.uuid}`, token: device.deviceToken, body: {} });
  if (ok(op)) {
    device.lastSeenAt = (op.body as { device: { lastSeenAt: string } }).device.lastSeenAt;
    device.heartbeatUncertain = false;
  } else if (op.status === null) {
    device.heartbeatUncertain = true;
  } else if (op.status === 401 && device.tokenMayBeSuperseded && (op.body as { message?: string } | null)?.message === 'Token has been revoked') {
    // A device-auth that went unanswered was carried out after the one that issued this token.
  } else if (op.status === 401 || op.status === 404) {
    violation(actor.world, 'acknowledged writes visible', `heartbeat of a registered device answered ${op.status}`, device.entity);
  }
}
