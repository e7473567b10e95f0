import { randomUUID } from 'node:crypto';
import type { Tokens } from '../../src/auth/tokens';
import type { Client, Request } from './client';
import type { History, Operation } from './history';
import { ok } from './history';
import { Possible, type DeviceModel, type FamilyModel, type UserModel, type Violation } from './model';

/**
 * The people, hubs and refresh-token families of a run, partitioned by worker: each worker
 * alone writes its users and devices, so the expected state of each is a function of that
 * worker's answers (see Possible).
 */
export interface World {
  readonly users: UserModel[];
  readonly devices: DeviceModel[];
  readonly violations: Violation[];
  /** Registrations raced on one uuid: how many were answered 201. */
  readonly races: Array<{ uuid: string; created: number; ops: Operation[] }>;
  /** What the checks looked at, for the report. */
  readonly notes: string[];
}

export function emptyWorld(): World {
  return { users: [], devices: [], violations: [], races: [], notes: [] };
}

/** A worker's handle on the world: its generator, its client, its own users and devices. */
export interface Actor {
  readonly worker: number;
  readonly rng: () => number;
  readonly client: Client;
  readonly history: History;
  readonly tokens: Tokens;
  readonly world: World;
  readonly users: UserModel[];
  readonly devices: DeviceModel[];
  readonly family: FamilyModel;
}

export function send(actor: Actor, request: Omit<Request, 'worker'>): Promise<Operation> {
  return actor.client.send({ ...request, worker: actor.worker }, actor.rng());
}

/** Sends until the service answers (a client retrying after a crash); gives up after `attempts`. */
export async function sendUntilAnswered(actor: Actor, request: Omit<Request, 'worker'>, attempts = 40): Promise<Operation> {
  let op = await send(actor, request);
  for (let i = 1; i < attempts && (op.status === null || op.status === 503); i++) {
    await new Promise((r) => setTimeout(r, 250));
    op = await send(actor, request);
  }
  return op;
}

export function pick<T>(rng: () => number, items: readonly T[]): T | undefined {
  return items.length === 0 ? undefined : items[Math.floor(rng() * items.length)];
}

export function violation(world: World, invariant: string, message: string, entity: string | null): void {
  world.violations.push({ invariant, message, entity });
}

function syncBody(user: UserModel, firstName: string, email: string): unknown {
  return { id: user.customerId, first_name: firstName, last_name: 'Chaos', email, active: true };
}

/** A CRM sync of the user with `firstName` and `email`; checks the customer keeps one user. */
export async function syncUser(actor: Actor, user: UserModel, firstName: string, email: string, kind: string, retry = false): Promise<Operation> {
  const request = { kind, entity: user.entity, method: 'POST', path: '/auth/sync-customer', crm: true, body: syncBody(user, firstName, email), summary: `${firstName} <${email}>` };
  const op = retry ? await sendUntilAnswered(actor, request) : await send(actor, request);
  user.firstName.after(op, firstName);
  user.email.after(op, email);
  if (op.status === null || ok(op)) user.lastEmail = email;
  if (ok(op)) {
    const id = (op.body as { user?: { id?: string } }).user?.id ?? '';
    if (user.userId === '') user.userId = id;
    else if (id !== user.userId) violation(actor.world, 'uniqueness', `customer ${user.customerId} answered as user ${id}, earlier ${user.userId}`, user.entity);
  }
  return op;
}

export async function createUsers(actor: Actor, count: number, firstCustomerId: number): Promise<void> {
  for (let i = 0; i < count; i++) {
    const customerId = firstCustomerId + i;
    const email = `c${customerId}-0@chaos.example.com`;
    const user: UserModel = {
      worker: actor.worker,
      customerId,
      entity: `user:${customerId}`,
      userId: '',
      accessToken: '',
      email: new Possible(email),
      firstName: new Possible('Initial'),
      lastEmail: email,
      emailCounter: 0,
      password: null,
    };
    const op = await syncUser(actor, user, 'Initial', email, 'sync-create', true);
    if (!ok(op)) throw new Error(`setup: sync-customer answered ${op.status ?? op.error}`);
    user.accessToken = actor.tokens.signAccess({ sub: user.userId, email, role: 'user' });
    actor.users.push(user);
    actor.world.users.push(user);
  }
}

/** Registers a new hub for `owner` and gets its device token; retried until answered. */
export async function registerDevice(actor: Actor, owner: UserModel, tunnel: boolean): Promise<DeviceModel | null> {
  const uuid = randomUUID();
  const entity = `device:${uuid}`;
  const body = { uuid, deviceId: `HUB-${uuid.slice(0, 8)}`, name: 'Hub' };
  const op = await sendUntilAnswered(actor, { kind: 'register', entity, method: 'POST', path: '/devices/register', token: owner.accessToken, body, summary: uuid });
  // 'already registered' to our own retry: the unanswered attempt registered it.
  const registeredBefore = op.status === 409 && (op.body as { message?: string }).message === 'Device already registered' && actor.history.of(entity).length > 1;
  if (!ok(op) && !registeredBefore) return null;
  const device: DeviceModel = {
    uuid,
    entity,
    owner,
    exists: new Possible(true),
    name: new Possible('Hub'),
    links: new Map(),
    deviceToken: null,
    tokenMayBeSuperseded: false,
    lastSeenAt: null,
    heartbeatUncertain: false,
    tunnel,
  };
  actor.devices.push(device);
  actor.world.devices.push(device);
  const auth = await sendUntilAnswered(actor, { kind: 'device-auth', entity, method: 'POST', path: `/devices/auth/${uuid}`, token: owner.accessToken });
  if (ok(auth)) device.deviceToken = (auth.body as { token: string }).token;
  device.tokenMayBeSuperseded = actor.history.of(entity).some((op) => op.kind === 'device-auth' && op.status === null);
  return device;
}
