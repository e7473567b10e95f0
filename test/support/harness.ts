import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { loadConfig } from '../../src/config';
import { createLogger } from '../../src/logger';
import { startService, type RunningService } from '../../src/service';
import type { Clock } from '../../src/commands/handler';
import { createTokens, type Tokens } from '../../src/auth/tokens';
import type { EventStore } from '../../src/infra/eventstore/port';
import type { ReadStore } from '../../src/infra/readstore/port';
import { TIERS } from '../../src/ratelimit/limiter';
import { startStack, type Stack } from './stack';
import type { PrivateRedis } from './redis';
import { TEST_SECRETS } from './server';

export type Mode = 'embedded' | 'distributed';
export const MODES: readonly Mode[] = ['embedded', 'distributed'];
export const CRM_KEY = 'test-crm-key-1';

/**
 * Every request of a test comes from 127.0.0.1: tests that are not about rate limits get
 * limits they never reach; the rate-limit tests set their own through RATE_LIMITS.
 */
export const GENEROUS_RATE_LIMITS = TIERS.map((tier) => `${tier}=1000000/60`).join(',');

/** The real time, moved on by `advance` (never back): the age of what the service wrote, without waiting for it. */
export function shiftedClock(): Clock & { advance(ms: number): void } {
  let offset = 0;
  return { now: () => new Date(Date.now() + offset), advance: (ms) => void (offset += ms) };
}

/** A real service started in this process on port 0, in either mode, with its log captured. */
export interface TestService {
  readonly mode: Mode;
  readonly baseUrl: string;
  readonly env: Readonly<Record<string, string>>;
  /** Signs tokens with the service's own keys, exactly as login and device auth do. */
  readonly tokens: Tokens;
  /** The service's own event store, to read streams back. */
  readonly eventStore: EventStore;
  /** The read models the service serves (its current generation). */
  readonly readStore: ReadStore;
  /** Every log line so far, as written. */
  readonly logs: () => string;
  /** Starts a second service (another API process) against the same stores. */
  readonly startAnother: (extraEnv?: Record<string, string>) => Promise<TestService>;
  /** Distributed mode: the stack's private Redis (null in embedded mode or for another process). */
  readonly redis: PrivateRedis | null;
  readonly stop: () => Promise<void>;
}

/** What a test may set besides the environment: the clock the service's commands read (the real one unless given). */
export interface TestServiceOptions {
  readonly clock?: Clock;
}

async function startWith(mode: Mode, env: Record<string, string>, owned: { stack: Stack | null; dir: string | null }, options: TestServiceOptions = {}): Promise<TestService> {
  let logs = '';
  const sink = new Writable({
    write(chunk: Buffer, _encoding, done) {
      logs += chunk.toString();
      done();
    },
  });
  const config = loadConfig({
    PORT: '0',
    HOST: '127.0.0.1',
    LOG_LEVEL: 'info',
    RATE_LIMITS: GENEROUS_RATE_LIMITS,
    ...env,
    // The admins createUser makes, besides any a test names itself.
    ADMIN_EMAILS: [env.ADMIN_EMAILS, TEST_ADMIN_EMAILS.join(',')].filter((list) => list !== undefined && list !== '').join(','),
  });
  const service: RunningService = await startService(config, createLogger(config.logLevel, sink), options.clock);
  const tokens = createTokens({
    jwtAccessSecret: env.JWT_ACCESS_SECRET ?? '',
    jwtRefreshSecret: env.JWT_REFRESH_SECRET ?? '',
    jwtDeviceSecret: env.JWT_DEVICE_SECRET ?? '',
  });
  return {
    mode,
    baseUrl: `http://127.0.0.1:${service.port ?? 0}`,
    env,
    tokens,
    eventStore: service.eventStore,
    readStore: service.readStore,
    logs: () => logs,
    redis: owned.stack?.redis ?? null,
    startAnother: (extraEnv = {}) => startWith(mode, { ...env, ...extraEnv }, { stack: null, dir: null }, options),
    stop: async () => {
      await service.stop();
      await owned.stack?.stop();
      if (owned.dir !== null) rmSync(owned.dir, { recursive: true, force: true });
    },
  };
}

/**
 * Embedded: a fresh DATA_DIR. Distributed: a fresh stack (EventStoreDB stand-in, jongodb,
 * private Redis). Either way with known secrets, so tests can sign tokens.
 */
export async function startTestService(mode: Mode, extraEnv: Record<string, string> = {}, options: TestServiceOptions = {}): Promise<TestService> {
  if (mode === 'embedded') {
    const dir = mkdtempSync(join(tmpdir(), 'hhc-test-'));
    // The data-key KEK is left to DATA_DIR, as an embedded deployment has it: tools given only DATA_DIR read the same one.
    const { DATA_KEY_ENCRYPTION_KEY: _generatedInDataDir, ...secrets } = TEST_SECRETS;
    return startWith(mode, { ...secrets, DATA_DIR: dir, ...extraEnv }, { stack: null, dir }, options);
  }
  const stack = await startStack();
  return startWith(mode, { ...TEST_SECRETS, ...stack.env, ...extraEnv }, { stack, dir: null }, options);
}

/**
 * One service for the tests of a describe block. Call at the top of the block: it registers its
 * own beforeAll/afterAll; the getter answers within a test.
 */
export function serviceForDescribe(mode: Mode, extraEnv: Record<string, string> = {}, options: TestServiceOptions = {}): () => TestService {
  let service: TestService | undefined;
  beforeAll(async () => {
    service = await startTestService(mode, extraEnv, options);
  }, 60_000);
  afterAll(async () => {
    await service?.stop();
  });
  return () => {
    if (service === undefined) throw new Error('the service runs only within the tests of its describe block');
    return service;
  };
}

/** `serviceForDescribe` with rate limits no test reaches. */
export function generousServiceForDescribe(mode: Mode): () => TestService {
  return serviceForDescribe(mode, { RATE_LIMITS: GENEROUS_RATE_LIMITS });
}

/** JSON over real HTTP. */
export async function api(
  service: Pick<TestService, 'baseUrl'>,
  method: string,
  path: string,
  options: { body?: unknown; token?: string; headers?: Record<string, string> } = {},
): Promise<{ status: number; body: unknown; headers: Headers }> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.body !== undefined) headers['Content-Type'] = 'application/json';
  if (options.token !== undefined) headers.Authorization = `Bearer ${options.token}`;
  const res = await fetch(`${service.baseUrl}/api/v1${path}`, {
    method,
    headers,
    ...(options.body !== undefined ? { body: JSON.stringify(options.body) } : {}),
  });
  const text = await res.text();
  let body: unknown = text;
  try {
    body = text.length > 0 ? JSON.parse(text) : null;
  } catch {
    // not JSON: keep the text
  }
  return { status: res.status, body, headers: res.headers };
}

let nextCustomerId = 10_000 + Math.floor(Math.random() * 1_000_000);

/** The e-mails every test service lists in ADMIN_EMAILS: createUser's admins take them in turn. */
const TEST_ADMIN_EMAILS = Array.from({ length: 100 }, (_, i) => `admin.${i}@example.com`);
let nextAdmin = 0;

/** One CRM sync of customer `id` with `email` (active, Ada Lovelace unless named), answered as the service answers it. */
export function syncCustomer(service: TestService, id: number, email: string, firstName = 'Ada'): ReturnType<typeof api> {
  return api(service, 'POST', '/auth/sync-customer', {
    headers: { 'X-Internal-Api-Key': CRM_KEY },
    body: { id, first_name: firstName, last_name: 'Lovelace', email, active: true },
  });
}

/** Creates a user through the CRM endpoint and returns it with an access token signed by the service's key. */
export async function createUser(
  service: TestService,
  fields: { email?: string; firstName?: string; lastName?: string; role?: 'user' | 'admin' } = {},
): Promise<{ id: string; email: string; accessToken: string }> {
  const id = nextCustomerId++;
  // An admin's rights follow its e-mail (ADMIN_EMAILS), checked on every admin request.
  const email = fields.email ?? (fields.role === 'admin' ? TEST_ADMIN_EMAILS[nextAdmin++ % TEST_ADMIN_EMAILS.length] : `user.${id}@example.com`);
  const res = await api(service, 'POST', '/auth/sync-customer', {
    headers: { 'X-Internal-Api-Key': CRM_KEY },
    body: { id, first_name: fields.firstName ?? 'Test', last_name: fields.lastName ?? 'User', email, active: true },
  });
  if (res.status !== 201) throw new Error(`sync-customer answered ${res.status}: ${JSON.stringify(res.body)}`);
  const user = (res.body as { user: { id: string; email: string } }).user;
  const accessToken = service.tokens.signAccess({ sub: user.id, email: user.email, role: fields.role ?? 'user' });
  return { id: user.id, email: user.email, accessToken };
}
