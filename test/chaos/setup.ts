import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createTokens, type Tokens } from '../../src/auth/tokens';
import { TIERS } from '../../src/ratelimit/limiter';
import { resetTokenIn } from '../support/accounts';
import { freePort } from '../support/ports';
import { mulberry32 } from '../support/prng';
import { TEST_SECRETS } from '../support/server';
import { startTestSmtpServer, type TestSmtpServer } from '../support/smtp';
import { startStack, type Stack } from '../support/stack';
import { Client } from './client';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy';
import { LINK_NAMES, type LinkName, type Topology } from './faults';
import type { History } from './history';
import { ok } from './history';
import { serviceProcess, type ServiceProcess } from './processes';
import { openPair, type TunnelPair } from './tunnel';
import { createUsers, registerDevice, sendUntilAnswered, syncUser, type Actor, type World } from './world';
import { Possible, type UserModel } from './model';

/**
 * Bringing a run up: the stores, the service processes, and the people and hubs of each
 * worker (created before any fault, so that the run starts from a known state).
 */

export type Mode = 'embedded' | 'distributed';

/** Short, so that presence expiries happen during the run and can be checked after it. */
export const OFFLINE_AFTER_SECONDS = 5;
/** Embedded mode: a start snapshot after this many appended events. */
const SNAPSHOT_EVERY_EVENTS = 300;
export const ADMIN_EMAIL = 'admin@chaos.example.com';
const API_PROCESSES = 2;

export interface Running extends Topology {
  readonly targets: readonly string[];
  readonly smtp: TestSmtpServer;
  readonly tokens: Tokens;
  /** Distributed mode: where the read models are stored (directly, not through a process's proxy). */
  readonly mongoUri: string | null;
  /** Distributed mode: the Redis the processes share (directly). */
  readonly redisUrl: string | null;
  stop(): Promise<void>;
}

function serviceEnv(smtp: TestSmtpServer, extra: Record<string, string>): Record<string, string> {
  return {
    ...TEST_SECRETS,
    SMTP_URL: smtp.url,
    ADMIN_EMAILS: ADMIN_EMAIL,
    OFFLINE_AFTER_SECONDS: String(OFFLINE_AFTER_SECONDS),
    // Every client is on 127.0.0.1: limits it never reaches (rate limiting is not under test).
    RATE_LIMITS: TIERS.map((tier) => `${tier}=1000000/60`).join(','),
    PROJECTOR_LEASE_MS: '3000',
    // Warn: the projector lease's tenures (checked from the log, watchers.ts) are logged at
    // warn; every request at info would fill the log pipe faster than a busy run reads it.
    LOG_LEVEL: 'warn',
    // The client's X-Request-Id (each write's operation id, client.ts) is kept only from a trusted proxy.
    TRUST_PROXY: 'loopback',
    ...extra,
  };
}

export async function startTopology(mode: Mode): Promise<Running> {
  const smtp = await startTestSmtpServer();
  const tokens = createTokens({ jwtAccessSecret: TEST_SECRETS.JWT_ACCESS_SECRET, jwtRefreshSecret: TEST_SECRETS.JWT_REFRESH_SECRET, jwtDeviceSecret: TEST_SECRETS.JWT_DEVICE_SECRET });
  let stack: Stack | null = null;
  let dataDir: string | null = null;
  const services: ServiceProcess[] = [];
  const links = new Map<string, Record<LinkName, TcpProxy>>();
  if (mode === 'embedded') {
    dataDir = mkdtempSync(join(tmpdir(), 'hhc-chaos-'));
    // Start snapshots every few hundred events, so that random kills can land before, during or after
    // their writes and most restarts load one (a damaged or stale one falls back to a replay).
    services.push(serviceProcess('service', await freePort(), serviceEnv(smtp, { DATA_DIR: dataDir, SNAPSHOT_EVERY_EVENTS: String(SNAPSHOT_EVERY_EVENTS) })));
  } else {
    // MongoDB standalone: each process reaches it through its own proxy (a replica set's
    // client would follow the member list to the server's own port, around the proxy).
    stack = await startStack({ mongo: 'standalone' });
    for (let i = 1; i <= API_PROCESSES; i++) {
      const name = `api-${i}`;
      const proxies = await proxiesFor(stack);
      links.set(name, proxies);
      services.push(serviceProcess(name, await freePort(), serviceEnv(smtp, throughProxies(stack, proxies))));
    }
  }
  for (const service of services) await service.start();
  return {
    services,
    redis: stack?.redis ?? null,
    links,
    hubHolder: mode === 'distributed' ? (services[services.length - 1] ?? null) : null,
    redisUrl: stack?.env.REDIS_URL ?? null,
    targets: services.map((s) => s.baseUrl),
    smtp,
    tokens,
    mongoUri: stack?.env.MONGODB_URI ?? null,
    stop: async () => {
      await Promise.allSettled(services.map((s) => s.stop()));
      for (const proxies of links.values()) await Promise.allSettled(LINK_NAMES.map((name) => proxies[name].close()));
      await stack?.stop();
      await smtp.stop();
      if (dataDir !== null) rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** A proxy in front of each of the stack's servers, for one process. */
async function proxiesFor(stack: Stack): Promise<Record<LinkName, TcpProxy>> {
  return {
    redis: await startTcpProxy(stack.redis.port),
    mongodb: await startTcpProxy(portOf(stack.env.MONGODB_URI)),
    eventstore: await startTcpProxy(portOf(stack.env.EVENTSTORE_URL)),
  };
}

function portOf(url: string): number {
  const match = /:\/\/[^/:]+:(\d+)/.exec(url);
  if (match?.[1] === undefined) throw new Error(`no port in ${url}`);
  return Number(match[1]);
}

/** The stack's addresses with the proxies' ports. */
function throughProxies(stack: Stack, proxies: Readonly<Record<LinkName, TcpProxy>>): Record<string, string> {
  return {
    REDIS_URL: proxies.redis.url(stack.env.REDIS_URL),
    MONGODB_URI: proxies.mongodb.url(stack.env.MONGODB_URI),
    EVENTSTORE_URL: proxies.eventstore.url(stack.env.EVENTSTORE_URL),
  };
}

/** The admin, who reads everything and asks for rebuilds. */
export async function createAdmin(running: Running, history: History, world: World): Promise<string> {
  const actor = makeActor(-1, 0, running, history, world);
  const admin: UserModel = {
    worker: -1,
    customerId: 1,
    entity: 'user:1',
    userId: '',
    accessToken: '',
    email: new Possible(ADMIN_EMAIL),
    firstName: new Possible('Admin'),
    lastEmail: ADMIN_EMAIL,
    emailCounter: 0,
    password: null,
  };
  const op = await syncUser(actor, admin, 'Admin', ADMIN_EMAIL, 'sync-create', true);
  if (!ok(op)) throw new Error(`setup: admin sync answered ${op.status ?? op.error}`);
  return running.tokens.signAccess({ sub: admin.userId, email: ADMIN_EMAIL, role: 'admin' });
}

export function makeActor(worker: number, seed: number, running: Running, history: History, world: World): Actor {
  return {
    worker,
    rng: mulberry32((seed ^ Math.imul(worker + 2, 0x9e3779b1)) >>> 0),
    client: new Client(history, running.targets),
    history,
    tokens: running.tokens,
    world,
    users: [],
    devices: [],
    family: { entity: `family:${worker}`, refreshToken: null, known: false, rotated: [] },
  };
}

/** The owner sets a password through the reset flow, as a person would, to log in with. */
async function setPassword(actor: Actor, running: Running, user: UserModel): Promise<void> {
  const email = user.lastEmail;
  const seen = running.smtp.mails().filter((m) => m.to.includes(email)).length;
  const request = await sendUntilAnswered(actor, { kind: 'reset-request', entity: user.entity, method: 'POST', path: '/auth/password-reset/request', body: { email } });
  if (request.status !== 202) throw new Error(`setup: reset request answered ${request.status}`);
  const token = resetTokenIn((await running.smtp.waitForMail(email, { skip: seen, timeoutMs: 20_000 })).text);
  const password = `chaos-${user.customerId}-Secret!`;
  const confirm = await sendUntilAnswered(actor, { kind: 'reset-confirm', entity: user.entity, method: 'POST', path: '/auth/password-reset/confirm', body: { token, password } });
  if (!ok(confirm)) throw new Error(`setup: reset confirm answered ${confirm.status}`);
  user.password = password;
}

/** A worker's three users (the first owns the hubs and logs in), two hubs, and its tunnel pair. */
export async function populate(actor: Actor, running: Running): Promise<TunnelPair> {
  await createUsers(actor, 3, 1000 * (actor.worker + 1));
  const owner = actor.users[0] as UserModel;
  await setPassword(actor, running, owner);
  const hub = await registerDevice(actor, owner, true);
  await registerDevice(actor, owner, false);
  if (hub?.deviceToken == null) throw new Error('setup: the tunnel hub was not registered');
  const apps = running.targets[0] ?? '';
  const hubs = running.targets[running.targets.length - 1] ?? '';
  return openPair(apps, hubs, owner.accessToken, hub.deviceToken, hub.uuid);
}
