import proxyaddr from 'proxy-addr';
import { z } from 'zod';
import { parseRateLimits, type Tier, type TierLimit } from './ratelimit/limiter';

/**
 * Configuration, parsed once from the environment (decisions §10). Every variable is
 * optional in embedded mode; setting EVENTSTORE_URL, MONGODB_URI and REDIS_URL together
 * switches on distributed mode, where secrets have no defaults.
 */

const optionalString = z
  .string()
  .transform((s) => s.trim())
  .pipe(z.string())
  .optional()
  .transform((s) => (s === undefined || s === '' ? undefined : s));

const commaList = optionalString.transform((s) =>
  s === undefined
    ? []
    : s
        .split(',')
        .map((item) => item.trim())
        .filter((item) => item.length > 0),
);

/** A key list that was given must hold a key: `,,` is not "unset" (a generated key would stand in for the operator's). */
const keyList = z
  .string()
  .optional()
  .transform((s, ctx) => {
    const keys = commaList.parse(s);
    if (keys.length === 0 && s !== undefined && s.trim() !== '') {
      ctx.addIssue({ code: 'custom', message: 'holds no key (a comma list of keys)' });
      return z.NEVER;
    }
    return keys;
  });

/** The longest delay a Node timer takes (2^31-1 ms); a longer one fires after 1 ms. */
export const MAX_TIMER_MS = 2_147_483_647;

const positiveInt = (fallback: number, max = Number.MAX_SAFE_INTEGER, tooLarge = `must be at most ${max}`) =>
  optionalString.pipe(
    z
      .string()
      .regex(/^\d+$/, 'must be a positive whole number')
      .transform(Number)
      .pipe(z.number().int().positive().max(max, tooLarge))
      .optional(),
  ).transform((n) => n ?? fallback);

/** A timer's delay in milliseconds: at most MAX_TIMER_MS. */
const timerMs = (fallback: number) => positiveInt(fallback, MAX_TIMER_MS, `must be at most ${MAX_TIMER_MS} (about 24.8 days: the longest timer)`);
/** A timer's period in seconds: at most MAX_TIMER_MS / 1000. */
const timerSeconds = (fallback: number) => {
  const max = Math.floor(MAX_TIMER_MS / 1000);
  return positiveInt(fallback, max, `must be at most ${max} (about 24.8 days: the longest timer)`);
};

const port = optionalString.pipe(
  z
    .string()
    .regex(/^\d+$/, 'must be a port number')
    .transform(Number)
    .pipe(z.number().int().min(0).max(65535))
    .optional(),
);

const url = (schemes: readonly string[]) =>
  optionalString.pipe(
    z
      .string()
      .refine((s) => {
        try {
          return schemes.includes(new URL(s).protocol.replace(/:$/, ''));
        } catch {
          return false;
        }
      }, `must be a URL (${schemes.join(', ')})`)
      .optional(),
  );

/** Express's `trust proxy` values: true/false, a hop count, or a list of addresses/names (checked as Express will compile them). */
const trustProxy = optionalString.transform((s, ctx): boolean | number | string | undefined => {
  if (s === undefined) return undefined;
  if (s === 'true') return true;
  if (s === 'false') return false;
  if (/^\d+$/.test(s)) return Number(s);
  try {
    proxyaddr.compile(s.split(',').map((item) => item.trim()));
  } catch (error) {
    ctx.addIssue({
      code: 'custom',
      message: `must be true, false, a hop count, or a comma list of addresses, subnets or loopback/linklocal/uniquelocal (${error instanceof Error ? error.message : String(error)})`,
    });
    return z.NEVER;
  }
  return s;
});

const logLevel = optionalString.pipe(z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).optional());

const roles = optionalString.pipe(
  z
    .string()
    .transform((s) => s.split(',').map((r) => r.trim()).filter((r) => r.length > 0))
    .pipe(z.array(z.enum(['api', 'projector', 'expiry'])).min(1))
    .optional(),
);

const envSchema = z.object({
  PORT: port,
  HOST: optionalString,
  DATA_DIR: optionalString,
  EVENTSTORE_URL: url(['esdb', 'esdb+discover', 'kurrentdb', 'kurrentdb+discover', 'kurrent', 'kurrent+discover']),
  MONGODB_URI: url(['mongodb', 'mongodb+srv']),
  REDIS_URL: url(['redis', 'rediss']),
  SMTP_URL: url(['smtp', 'smtps']),
  MAIL_FROM: optionalString,
  INTERNAL_API_KEYS: keyList,
  JWT_ACCESS_SECRET: optionalString.pipe(z.string().min(32, 'must be at least 32 characters').optional()),
  JWT_REFRESH_SECRET: optionalString.pipe(z.string().min(32, 'must be at least 32 characters').optional()),
  JWT_DEVICE_SECRET: optionalString.pipe(z.string().min(32, 'must be at least 32 characters').optional()),
  /** Wraps the per-person data keys of crypto-shredding and keys the e-mail reservation hashes (decisions §11). */
  DATA_KEY_ENCRYPTION_KEY: optionalString.pipe(z.string().min(32, 'must be at least 32 characters').optional()),
  APP_ORIGIN: url(['http', 'https']),
  TRUST_PROXY: trustProxy,
  ADMIN_EMAILS: commaList,
  MAX_DEVICES_PER_USER: positiveInt(100),
  OFFLINE_AFTER_SECONDS: positiveInt(300),
  HEARTBEAT_RETENTION_SECONDS: positiveInt(604_800),
  LOG_LEVEL: logLevel,
  APP_VERSION: optionalString,
  ROLES: roles,
  READ_YOUR_WRITES_TIMEOUT_MS: timerMs(5000),
  PROJECTOR_LEASE_MS: timerMs(10_000),
  SNAPSHOT_EVERY_EVENTS: positiveInt(20_000),
  SNAPSHOT_INTERVAL_SECONDS: timerSeconds(300),
  STORE_START_TIMEOUT_SECONDS: timerSeconds(30),
  TUNNEL_HANDSHAKES_PER_SECOND: positiveInt(5000),
  RATE_LIMITS: optionalString.transform((spec, ctx) => {
    try {
      return parseRateLimits(spec);
    } catch (error) {
      ctx.addIssue({ code: 'custom', message: error instanceof Error ? error.message : String(error) });
      return z.NEVER;
    }
  }),
});

export type Role = 'api' | 'projector' | 'expiry';

export interface Secrets {
  readonly jwtAccessSecret: string;
  readonly jwtRefreshSecret: string;
  readonly jwtDeviceSecret: string;
  readonly internalApiKeys: readonly string[];
  /**
   * The key-encryption key of the personal data keys (src/privacy). Always set once the
   * configuration is resolved: required in distributed mode, generated once in DATA_DIR in
   * embedded mode when not given.
   */
  readonly dataKeyEncryptionKey?: string;
}

interface CommonConfig {
  readonly port: number;
  readonly host: string;
  readonly smtpUrl: string | undefined;
  readonly mailFrom: string;
  readonly appOrigin: string | undefined;
  readonly trustProxy: boolean | number | string | undefined;
  readonly adminEmails: readonly string[];
  readonly maxDevicesPerUser: number;
  readonly offlineAfterSeconds: number;
  /** The `$maxAge` of every `heartbeat-<uuid>` stream (decisions §4, §10). */
  readonly heartbeatRetentionSeconds: number;
  /** The build's version (the image sets it); `dev` otherwise. */
  readonly version: string;
  readonly logLevel: string;
  readonly roles: readonly Role[];
  readonly readYourWritesTimeoutMs: number;
  /** How long the projector lease lives without renewal: the standby's takeover time. */
  readonly projectorLeaseMs: number;
  /** Every tier's points per window: the defaults of the interface, overridden by RATE_LIMITS. */
  readonly rateLimits: Readonly<Record<Tier, TierLimit>>;
  /** Device handshakes one API process admits per second (src/tunnel/admission.ts). */
  readonly tunnelHandshakesPerSecond: number;
  /** Distributed: how long a start waits for each store to answer (src/runtime/store-probes.ts). */
  readonly storeStartTimeoutSeconds: number;
}

export interface EmbeddedConfig extends CommonConfig {
  readonly mode: 'embedded';
  readonly dataDir: string;
  /** Secrets given in the environment; the missing ones are generated once and kept in dataDir. */
  readonly secrets: Partial<Secrets>;
  /** Start snapshots (src/runtime/snapshot.ts): written after this many appended events, or this often when anything was appended. */
  readonly snapshotEveryEvents: number;
  readonly snapshotIntervalSeconds: number;
}

export interface DistributedConfig extends CommonConfig {
  readonly mode: 'distributed';
  readonly eventStoreUrl: string;
  readonly mongodbUri: string;
  readonly redisUrl: string;
  readonly secrets: Secrets;
}

export type Config = EmbeddedConfig | DistributedConfig;

export class ConfigError extends Error {
  constructor(readonly problems: readonly string[]) {
    super(`Invalid configuration:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

/** Parses the environment; throws ConfigError naming every bad or missing variable. */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const parsed = envSchema.safeParse(env);
  if (!parsed.success) {
    throw new ConfigError(parsed.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`));
  }
  const e = parsed.data;
  const common: CommonConfig = {
    port: e.PORT ?? 3000,
    host: e.HOST ?? '0.0.0.0',
    smtpUrl: e.SMTP_URL,
    mailFrom: e.MAIL_FROM ?? 'Home Hub Cloud <no-reply@home-hub.local>',
    appOrigin: e.APP_ORIGIN,
    trustProxy: e.TRUST_PROXY,
    adminEmails: e.ADMIN_EMAILS.map((m) => m.toLowerCase()),
    maxDevicesPerUser: e.MAX_DEVICES_PER_USER,
    offlineAfterSeconds: e.OFFLINE_AFTER_SECONDS,
    heartbeatRetentionSeconds: e.HEARTBEAT_RETENTION_SECONDS,
    logLevel: e.LOG_LEVEL ?? 'info',
    version: e.APP_VERSION ?? 'dev',
    roles: e.ROLES ?? ['api', 'projector', 'expiry'],
    readYourWritesTimeoutMs: e.READ_YOUR_WRITES_TIMEOUT_MS,
    projectorLeaseMs: e.PROJECTOR_LEASE_MS,
    rateLimits: e.RATE_LIMITS,
    tunnelHandshakesPerSecond: e.TUNNEL_HANDSHAKES_PER_SECOND,
    storeStartTimeoutSeconds: e.STORE_START_TIMEOUT_SECONDS,
  };

  const distributedVars = { EVENTSTORE_URL: e.EVENTSTORE_URL, MONGODB_URI: e.MONGODB_URI, REDIS_URL: e.REDIS_URL };
  const given = Object.entries(distributedVars).filter(([, v]) => v !== undefined);
  if (given.length === 0) {
    return {
      ...common,
      mode: 'embedded',
      dataDir: e.DATA_DIR ?? './data',
      snapshotEveryEvents: e.SNAPSHOT_EVERY_EVENTS,
      snapshotIntervalSeconds: e.SNAPSHOT_INTERVAL_SECONDS,
      secrets: {
        ...(e.JWT_ACCESS_SECRET ? { jwtAccessSecret: e.JWT_ACCESS_SECRET } : {}),
        ...(e.JWT_REFRESH_SECRET ? { jwtRefreshSecret: e.JWT_REFRESH_SECRET } : {}),
        ...(e.JWT_DEVICE_SECRET ? { jwtDeviceSecret: e.JWT_DEVICE_SECRET } : {}),
        ...(e.INTERNAL_API_KEYS.length > 0 ? { internalApiKeys: e.INTERNAL_API_KEYS } : {}),
        ...(e.DATA_KEY_ENCRYPTION_KEY ? { dataKeyEncryptionKey: e.DATA_KEY_ENCRYPTION_KEY } : {}),
      },
    };
  }

  const problems: string[] = [];
  for (const [name, value] of Object.entries(distributedVars)) {
    if (value === undefined) problems.push(`${name}: required in distributed mode (set together with ${given.map(([n]) => n).join(', ')})`);
  }
  const requiredSecrets = {
    JWT_ACCESS_SECRET: e.JWT_ACCESS_SECRET,
    JWT_REFRESH_SECRET: e.JWT_REFRESH_SECRET,
    JWT_DEVICE_SECRET: e.JWT_DEVICE_SECRET,
  };
  for (const [name, value] of Object.entries(requiredSecrets)) {
    if (value === undefined) problems.push(`${name}: required in distributed mode (secrets have no defaults)`);
  }
  if (e.INTERNAL_API_KEYS.length === 0) problems.push('INTERNAL_API_KEYS: required in distributed mode (secrets have no defaults)');
  if (e.DATA_KEY_ENCRYPTION_KEY === undefined) problems.push('DATA_KEY_ENCRYPTION_KEY: required in distributed mode (secrets have no defaults)');
  const distinct = new Set(Object.values(requiredSecrets).filter((v) => v !== undefined));
  if (distinct.size < Object.values(requiredSecrets).filter((v) => v !== undefined).length) {
    problems.push('JWT_ACCESS_SECRET, JWT_REFRESH_SECRET, JWT_DEVICE_SECRET: must differ from each other');
  }
  if (problems.length > 0) throw new ConfigError(problems);

  return {
    ...common,
    mode: 'distributed',
    eventStoreUrl: e.EVENTSTORE_URL as string,
    mongodbUri: e.MONGODB_URI as string,
    redisUrl: e.REDIS_URL as string,
    secrets: {
      jwtAccessSecret: e.JWT_ACCESS_SECRET as string,
      jwtRefreshSecret: e.JWT_REFRESH_SECRET as string,
      jwtDeviceSecret: e.JWT_DEVICE_SECRET as string,
      internalApiKeys: e.INTERNAL_API_KEYS,
      dataKeyEncryptionKey: e.DATA_KEY_ENCRYPTION_KEY as string,
    },
  };
}
