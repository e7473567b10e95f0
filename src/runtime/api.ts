import { createServer, type IncomingMessage, type Server } from 'node:http';
import proxyaddr from 'proxy-addr';
import type { Config } from '../config';
import type { Logger } from '../logger';
import type { Metrics } from '../metrics';
import { createAdminCheck } from '../api/admin-check';
import { createApp } from '../api/app';
import type { ReadinessReport } from '../api/routes/health';
import { rateLimit } from '../api/rate-limit';
import { startAccessRevocationFeed, withAccessRevocations } from '../auth/access-revocations';
import { localReach, redisReach } from '../auth/revocation-reach';
import { createApiKeyMatcher } from '../auth/api-keys';
import { createPasswordHasher } from '../auth/passwords';
import { createTokens } from '../auth/tokens';
import type { Clock, StateCache } from '../commands/handler';
import { createAuthCommands } from '../commands/auth';
import { createDeviceCommands } from '../commands/devices';
import { DEFAULT_LEASE_OPTIONS, redisOneAtATime } from '../infra/redis-one-at-a-time';
import { createSessionCommands } from '../commands/sessions';
import { createUserCommands } from '../commands/users';
import { createErasureCommands } from '../commands/erasure';
import { createAccountCommands } from '../commands/account';
import { keyedEmailReservationStream } from '../privacy/reservation-names';
import { withKeyedCounters } from '../privacy/counter-keys';
import type { DeviceState } from '../domain/device';
import type { GlobalPosition } from '../infra/eventstore/port';
import { createLogMailer, createSmtpMailer } from '../infra/mail/mailer';
import { allProjections } from '../projections';
import { createMemoryRateLimiter, createRedisRateLimiter, type Tier } from '../ratelimit/limiter';
import { handshakeLimiterFrom } from '../tunnel/handshake-limit';
import { tunnelLimiterFrom } from '../tunnel/limiter';
import { createTunnel, DEFAULT_TUNNEL_OPTIONS } from '../tunnel/tunnel';
import { guardDescriptors, openFileLimit } from './descriptor-headroom';
import type { Infrastructure } from './adapters';
import type { ShutdownStep } from './shutdown';

/**
 * The `api` role: the HTTP API and the Socket.IO tunnel on one server, with the use cases
 * behind them. Its shutdown steps close the tunnel's transports first (clients reconnect
 * elsewhere), then the deactivation feed, then send the reset mails still on their way.
 */

export interface ApiRole {
  readonly server: Server;
  /** Before the HTTP drain: tunnel transports. After it: the mail still to send. */
  readonly stopBeforeHttp: readonly ShutdownStep[];
  readonly stopAfterHttp: readonly ShutdownStep[];
}

export interface ApiRoleDeps {
  readonly config: Config;
  readonly infra: Infrastructure;
  readonly logger: Logger;
  readonly metrics: Metrics;
  readonly clock: Clock;
  /** Device states folded once per process, shared with the expiry jobs. */
  readonly deviceStates: StateCache<DeviceState>;
  readonly readiness: () => Promise<ReadinessReport>;
  /** After an erasure (embedded: a new start snapshot replaces the one that held the person's documents). */
  readonly afterErasure?: () => Promise<void>;
}

/** The use cases behind the routes, with the tokens that check deactivations (decisions §3). */
async function startUseCases({ config, infra, logger, metrics, clock, deviceStates, afterErasure }: Omit<ApiRoleDeps, 'readiness'>) {
  const settle = { watermark: infra.watermark, clock, readYourWritesTimeoutMs: config.readYourWritesTimeoutMs };
  const sessions = createSessionCommands({ eventStore: infra.eventStore, readStore: infra.readStore, ...settle });
  // Complete before anything serves: every cut the log holds, whatever the snapshot (decisions §1, §3).
  const revocations = await startAccessRevocationFeed({ eventStore: infra.eventStore, readStore: infra.readStore, logger });
  const reach =
    infra.redis === null
      ? localReach(revocations, config.readYourWritesTimeoutMs)
      : redisReach(infra.redis, revocations, { timeoutMs: config.readYourWritesTimeoutMs, logger });
  const revoked = (position: GlobalPosition) => reach.untilEveryProcess(position);
  const users = createUserCommands({
    eventStore: infra.eventStore,
    ...settle,
    revokeSessions: (userId, reason, ctx) => sessions.revokeAllForUser(userId, reason, ctx),
    revocationsApplied: revoked,
    emailReservationStream: keyedEmailReservationStream(infra.privacyKeys.emailHashKey),
  });
  const erasure = createErasureCommands({
    eventStore: infra.eventStore,
    readStore: infra.readStore,
    ...settle,
    keyring: infra.keyring,
    releaseEmail: (email, userId, ctx) => users.releaseEmail(email, userId, ctx),
    revokeSessions: (userId, reason, ctx) => sessions.revokeAllForUser(userId, reason, ctx),
    revocationsApplied: revoked,
    plaintext: infra.plaintext,
    onPlaintextLeft: ({ left, leftEvents }) =>
      logger.warn(
        { streams: left, events: leftEvents },
        'erasure: events written before personal fields were sealed keep them in the clear in EventStoreDB, which cannot rewrite them (README, Personal data)',
      ),
    ...(afterErasure !== undefined ? { afterErasure } : {}),
    deviceStates,
  });
  const tokens = withAccessRevocations(createTokens(infra.secrets), revocations.revocations);
  const devices = createDeviceCommands({
    eventStore: infra.eventStore,
    readStore: infra.readStore,
    ...settle,
    maxDevicesPerUser: config.maxDevicesPerUser,
    heartbeatRetentionSeconds: config.heartbeatRetentionSeconds,
    deviceStates,
    keyring: infra.keyring,
    onHeartbeat: () => metrics.heartbeats.inc(),
    ...(infra.redis !== null
      ? { owners: redisOneAtATime(infra.redis, 'owner', DEFAULT_LEASE_OPTIONS, (userId, why) => logger.warn({ userId, why }, 'device limit checked without the cross-process lease')) }
      : {}),
  });
  const mailer = config.smtpUrl !== undefined ? createSmtpMailer(config.smtpUrl, config.mailFrom) : createLogMailer(logger, config.mailFrom);
  const hasher = createPasswordHasher();
  metrics.sources.passwordHashesWaiting = () => hasher.stats().waiting;
  const auth = createAuthCommands({
    eventStore: infra.eventStore,
    readStore: infra.readStore,
    credentials: infra.credentials,
    hasher,
    onLogin: (outcome) => metrics.logins.inc({ outcome }),
    tokens,
    sessions,
    mailer,
    logger,
    ...settle,
    adminEmails: config.adminEmails,
    appOrigin: config.appOrigin,
    revocationsApplied: revoked,
  });
  const account = createAccountCommands({ eventStore: infra.eventStore, readStore: infra.readStore, credentials: infra.credentials, hasher, erasure, clock });
  return { sessions, users, revocations, reach, tokens, devices, mailer, auth, erasure, account };
}

export async function startApiRole(deps: ApiRoleDeps): Promise<ApiRole> {
  const { config, infra, logger, metrics, clock, readiness } = deps;
  const { users, revocations, reach, tokens, devices, mailer, auth, erasure, account } = await startUseCases(deps);
  // Counters kept by client IP are named by a keyed hash: neither Redis nor the memory counters
  // hold an address, and the names kept of the addresses go with any revocation (an erasure).
  const limiter = withKeyedCounters(
    infra.redis === null ? createMemoryRateLimiter(config.rateLimits) : createRedisRateLimiter(infra.redis, config.rateLimits, onRateLimitStoreError(logger, metrics)),
    infra.privacyKeys.counterKey,
  );
  // Handshakes refused by that limit are remembered by address: forgotten with the names.
  const handshakeLimiter = handshakeLimiterFrom(limiter, (tier) => metrics.rateLimitRejections.inc({ tier }));
  revocations.revocations.onRevoked(() => {
    limiter.forgetAddresses();
    handshakeLimiter.forgetAddresses?.();
  });

  const isAdmin = createAdminCheck(infra.readStore, config.adminEmails);
  const app = createApp({
    rateLimit: rateLimit({
      limiter,
      tokens,
      matchApiKey: createApiKeyMatcher(infra.secrets.internalApiKeys),
      onRejected: (tier) => metrics.rateLimitRejections.inc({ tier }),
    }),
    metrics,
    logger,
    appOrigin: config.appOrigin,
    trustProxy: config.trustProxy,
    health: { readiness },
    auth: { internalApiKeys: infra.secrets.internalApiKeys, users, auth, tokens },
    users: { tokens, readStore: infra.readStore, adminEmails: config.adminEmails },
    devices: { tokens, readStore: infra.readStore, devices, isAdmin },
    audit: { tokens, readStore: infra.readStore, eventStore: infra.eventStore, clock, isAdmin },
    admin: { tokens, rebuildReadModels: () => infra.readModels.rebuild(allProjections()), isAdmin },
    privacy: { tokens, internalApiKeys: infra.secrets.internalApiKeys, erasure, account },
  });
  const server = createServer(app);
  // The tunnel's client IP is HTTP's: the same proxy trust (TRUST_PROXY) as Express applies.
  const trust = app.get('trust proxy fn') as Parameters<typeof proxyaddr>[1];
  const clientIp = (request: IncomingMessage): string => proxyaddr(request, trust);
  const tunnel = await createTunnel(server, {
    tokens,
    limiter: tunnelLimiterFrom(limiter, (tier) => metrics.rateLimitRejections.inc({ tier })),
    handshakeLimiter,
    clientIp,
    eventStore: infra.eventStore,
    readStore: infra.readStore,
    logger,
    clock,
    redis: config.mode === 'distributed' ? { url: config.redisUrl } : null,
    appOrigin: config.appOrigin,
    admission: { perSecond: config.tunnelHandshakesPerSecond },
    onRelayed: (direction) => metrics.tunnelMessages.inc({ direction }),
    accessRevocations: revocations.revocations,
    // A token revoked through another process: the heartbeat path re-reads the device stream
    // instead of trusting its fold (src/commands/devices.ts).
    onDeviceRevoked: (streamName) => deps.deviceStates.forget(streamName),
    deviceStates: deps.deviceStates,
    // A burst the limits allow is never refused for being a burst (decisions §5).
    options: {
      maxPendingPerSocket: Math.max(
        DEFAULT_TUNNEL_OPTIONS.maxPendingPerSocket,
        config.rateLimits.tunnelMessage.points + config.rateLimits.tunnelSubscribe.points,
      ),
    },
  });
  // Head-room below the limit of open files, once the tunnel's upgrade listener is in place.
  guardDescriptors(server, { limit: openFileLimit(), logger });
  metrics.sources.tunnel = () => tunnel.stats();
  metrics.sources.admission = () => tunnel.admission();

  return {
    server,
    stopBeforeHttp: [{ name: 'tunnel', run: () => tunnel.close() }],
    stopAfterHttp: [
      { name: 'revocations', run: async () => Promise.all([reach.stop(), revocations.stop()]).then(() => undefined) },
      // Reset mails still on their way are sent before the stores close.
      {
        name: 'mail',
        run: async () => {
          await auth.drain();
          mailer.close();
        },
      },
    ],
  };
}

/** Fail open, loudly: one log line per tier and minute while the counters' store is unreachable. */
function onRateLimitStoreError(logger: Logger, metrics: Metrics): (tier: Tier, error: Error) => void {
  const lastLogged = new Map<Tier, number>();
  return (tier, error) => {
    metrics.rateLimitStoreErrors.inc({ tier });
    const now = Date.now();
    if (now - (lastLogged.get(tier) ?? 0) < 60_000) return;
    lastLogged.set(tier, now);
    logger.warn({ tier, err: error.message }, 'rate-limit store unreachable: letting requests through');
  };
}
