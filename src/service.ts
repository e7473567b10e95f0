import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { Server as NetServer, type AddressInfo, type Socket } from 'node:net';
import Redis from 'ioredis';
import type { Config, Secrets } from './config';
import type { Logger } from './logger';
import { createApp, createOperationsApp } from './api/app';
import { createMetrics, type Metrics } from './metrics';
import { instrumentEventStore, type AppendObserver } from './infra/eventstore/instrumented';
import { createLagTracker } from './projections/lag';
import { rateLimit } from './api/rate-limit';
import { createApiKeyMatcher } from './auth/api-keys';
import { createMemoryRateLimiter, createRedisRateLimiter, type Tier } from './ratelimit/limiter';
import type { ReadinessReport } from './api/routes/health';
import { createStateCache, systemClock, type Clock, type StateCache } from './commands/handler';
import { createUserCommands } from './commands/users';
import { createDeviceCommands, DEVICE_STATE_CACHE_SIZE } from './commands/devices';
import type { DeviceState } from './domain/device';
import { createTunnel, DEFAULT_TUNNEL_OPTIONS, type Tunnel } from './tunnel/tunnel';
import { tunnelLimiterFrom } from './tunnel/limiter';
import { createTokens } from './auth/tokens';
import { startAccessRevocationFeed, withAccessRevocations, type AccessRevocationFeed } from './auth/access-revocations';
import type { EventStore } from './infra/eventstore/port';
import { comparePositions, formatPosition, type GlobalPosition } from './infra/eventstore/port';
import { openEmbeddedEventStore } from './infra/eventstore/embedded';
import { createEsdbEventStore } from './infra/eventstore/esdb';
import type { ReadStore } from './infra/readstore/port';
import { allProjections } from './projections';
import type { Projector } from './projections/projector';
import { openMemoryReadModels, openMongoReadModels, type ReadModels, type RebuildReport } from './projections/read-models';
import { createLocalWatermark, createRedisWatermark, type Watermark } from './projections/watermark';
import { createRedisLease, delay } from './projections/lease';
import { resolveEmbeddedSecrets } from './secrets';
import { createAuthCommands, type AuthCommands } from './commands/auth';
import { createSessionCommands } from './commands/sessions';
import { createPasswordHasher } from './auth/passwords';
import type { CredentialStore } from './infra/credentials/port';
import { openFileCredentialStore } from './infra/credentials/file';
import { openMongoCredentialStore } from './infra/credentials/mongo';
import { createLogMailer, createSmtpMailer, type Mailer } from './infra/mail/mailer';
import { createPresenceCommands } from './commands/presence';
import { startExpiryRole, type ExpiryRole } from './presence/expiry-role';
import { createTimerExpiryScheduler } from './presence/timer-scheduler';
import { createBullmqExpiryScheduler } from './presence/bullmq-scheduler';

export interface RunningService {
  /** The HTTP port: the API, or only health, readiness and metrics in a process without the api role. */
  readonly port: number;
  /** The event store this process writes to (tests and tools read streams back through it). */
  readonly eventStore: EventStore;
  /** The read models this process serves (the current generation, whichever that is). */
  readonly readStore: ReadStore;
  /** Rebuilds every read model into a fresh generation and switches once it has caught up (decisions §9). */
  readonly rebuildReadModels: () => Promise<RebuildReport>;
  readonly stop: () => Promise<void>;
}

interface Infrastructure {
  readonly eventStore: EventStore;
  readonly readStore: ReadStore;
  /** Generations of the read models: `readStore` follows the current one. */
  readonly readModels: ReadModels;
  readonly watermark: Watermark;
  readonly secrets: Secrets;
  readonly redis: Redis | null;
  /** Password hashes: not events, not a read model (never rebuilt). */
  readonly credentials: CredentialStore;
  readonly close: () => Promise<void>;
}

const PROJECTOR_LEASE_KEY = 'hhc:projector:lease';
/** After the projector stopped or failed, this long before this process bids for the lease again. */
const PROJECTOR_RETRY_MS = 1000;


/** Ready only while the projections are caught up within this much (decisions §8). */
const PROJECTOR_READY_LAG_MS = 5000;

async function connectInfrastructure(config: Config, logger: Logger, appends: AppendObserver): Promise<Infrastructure> {
  if (config.mode === 'embedded') {
    const { secrets, file } = resolveEmbeddedSecrets(config);
    if (config.secrets.internalApiKeys === undefined) {
      logger.info({ file }, 'INTERNAL_API_KEYS not set: a generated key is kept in the secrets file');
    }
    const eventStore = instrumentEventStore(await openEmbeddedEventStore(config.dataDir), appends);
    const readModels = await openMemoryReadModels(eventStore);
    const readStore = readModels.readStore;
    const watermark = createLocalWatermark();
    const credentials = await openFileCredentialStore(config.dataDir);
    return {
      eventStore,
      readStore,
      readModels,
      watermark,
      secrets,
      redis: null,
      credentials,
      close: async () => {
        await watermark.close();
        await readStore.close();
        await credentials.close();
        await eventStore.close();
      },
    };
  }

  const redisOptions = { maxRetriesPerRequest: null, lazyConnect: false } as const;
  const redis = new Redis(config.redisUrl, redisOptions);
  const subscriber = new Redis(config.redisUrl, redisOptions);
  redis.on('error', (error: Error) => logger.warn({ err: error.message }, 'redis connection error'));
  subscriber.on('error', (error: Error) => logger.warn({ err: error.message }, 'redis subscriber connection error'));
  const eventStore = instrumentEventStore(createEsdbEventStore(config.eventStoreUrl), appends);
  const readModels = await openMongoReadModels(config.mongodbUri, eventStore, {
    isProjectorRunning: async () => (await redis.exists(PROJECTOR_LEASE_KEY)) === 1,
  });
  const readStore = readModels.readStore;
  const watermark = await createRedisWatermark(redis, subscriber, readStore);
  // The `credentials` collection of the read models' database, on a client of its own.
  const credentials = await openMongoCredentialStore(config.mongodbUri);
  return {
    eventStore,
    readStore,
    readModels,
    watermark,
    secrets: config.secrets,
    redis,
    credentials,
    close: async () => {
      await watermark.close();
      await readStore.close();
      await credentials.close();
      await eventStore.close();
      subscriber.disconnect();
      redis.disconnect();
    },
  };
}

/** Logs a projector's progress: once caught up, then every ten seconds while it applies events. */
function reportProgress(logger: Logger): (projector: Projector) => Projector {
  return (projector) => {
    const started = Date.now();
    void projector.caughtUp.then(() => {
      const { eventsApplied, position, caughtUp } = projector.progress();
      if (!caughtUp) return; // it failed before: logged by its onError
      logger.info({ eventsApplied, position: position === null ? null : formatPosition(position), ms: Date.now() - started }, 'projector caught up');
    });
    let reported = 0;
    const timer = setInterval(() => {
      const { eventsApplied, position, lastEventAt } = projector.progress();
      if (eventsApplied === reported) return;
      const at = position === null ? null : formatPosition(position);
      logger.info({ eventsApplied, newEvents: eventsApplied - reported, position: at, lastEventAt }, 'projector progress');
      reported = eventsApplied;
    }, 10_000);
    timer.unref();
    void projector.done.catch(() => undefined).finally(() => clearInterval(timer));
    return {
      ...projector,
      stop: async () => {
        clearInterval(timer);
        await projector.stop();
      },
    };
  };
}

/**
 * Runs the projector role. Embedded: straight away, and the API waits until it has caught
 * up (read models are rebuilt in memory at start). Distributed: only while holding the
 * lease in Redis; a standby takes over when the active one dies.
 */
function runProjectorRole(config: Config, infra: Infrastructure, logger: Logger): { ready: Promise<void>; current: () => Projector | null; stop: () => Promise<void> } {
  const projections = allProjections();
  const options = {
    onApplied: (position: Parameters<Watermark['advance']>[0]) => infra.watermark.advance(position),
    onError: (error: unknown) => logger.error({ err: error instanceof Error ? error.message : String(error) }, 'projector failed'),
  };

  if (config.mode === 'embedded' || infra.redis === null) {
    const started = infra.readModels.startProjector(projections, options).then(reportProgress(logger));
    return {
      ready: started.then((p) => p.caughtUp),
      current: () => null,
      stop: async () => (await started).stop(),
    };
  }

  const lease = createRedisLease(infra.redis, PROJECTOR_LEASE_KEY, config.projectorLeaseMs);
  const abort = new AbortController();
  let active: Projector | null = null;
  const errorMessage = (error: unknown): string => (error instanceof Error ? error.message : String(error));
  const loop = (async () => {
    while (!abort.signal.aborted) {
      try {
        await lease.acquire(abort.signal);
      } catch {
        return; // aborted: the role is stopping
      }
      try {
        logger.info({ owner: lease.owner }, 'projector lease acquired');
        const projector = reportProgress(logger)(await infra.readModels.startProjector(projections, options));
        active = projector;
        await Promise.race([lease.lost(), projector.done.catch(() => undefined)]);
        active = null;
        await projector.stop();
      } catch (error) {
        // The read store unreachable at start or at the last checkpoint: give the lease up, try again.
        logger.error({ err: errorMessage(error) }, 'projector failed');
      } finally {
        active = null;
        await lease.release().catch(() => undefined);
      }
      if (abort.signal.aborted) return;
      logger.warn('projector lease lost or projector stopped; standing by');
      await delay(PROJECTOR_RETRY_MS, abort.signal);
    }
  })();
  return {
    ready: Promise.resolve(),
    current: () => active,
    stop: async () => {
      abort.abort();
      const p = active;
      active = null;
      await lease.release();
      if (p !== null) await p.stop();
      await loop;
    },
  };
}

/**
 * Runs the expiry role (decisions §4): in-process timers in embedded mode, rebuilt from the
 * read model at start; BullMQ delayed jobs in Redis in distributed mode, worked by every
 * process with this role, and scheduled again whenever the connection to Redis comes back.
 */
async function runExpiryRole(
  config: Config,
  infra: Infrastructure,
  logger: Logger,
  clock: Clock,
  deviceStates: StateCache<DeviceState>,
  metrics: Metrics,
): Promise<ExpiryRole> {
  let lastWarned = 0;
  const warn = (error: unknown): void => {
    // Redis away: every reconnect attempt fails; one line per ten seconds says enough.
    if (Date.now() - lastWarned < 10_000) return;
    lastWarned = Date.now();
    logger.warn({ err: error instanceof Error ? error.message : String(error) }, 'presence expiry: error');
  };
  let role: ExpiryRole | null = null;
  const scheduler =
    config.mode === 'embedded'
      ? createTimerExpiryScheduler({ onError: (_key, error) => warn(error) })
      : createBullmqExpiryScheduler({ redisUrl: config.redisUrl, onReconnect: () => role?.resync(), onError: warn });
  role = await startExpiryRole({
    eventStore: infra.eventStore,
    readStore: infra.readStore,
    scheduler,
    presence: createPresenceCommands({ eventStore: infra.eventStore, clock, offlineAfterSeconds: config.offlineAfterSeconds, deviceStates }),
    offlineAfterSeconds: config.offlineAfterSeconds,
    logger,
    onOffline: () => metrics.offlineExpiries.inc(),
  });
  // Embedded: the read model is complete by now, so every deadline is restored before the API opens.
  if (config.mode === 'embedded') await role.ready;
  return role;
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

/** How long requests in flight may still run after SIGTERM before their connections are cut (the process has 10 s in all). */
const SHUTDOWN_HTTP_GRACE_MS = 5000;
/** The whole shutdown, within the 10 s an orchestrator gives between SIGTERM and SIGKILL (main.ts exits at 10 s regardless). */
const SHUTDOWN_BUDGET_MS = 9000;

/** Keep-alive connections that carry no request are closed from this long after SIGTERM on. */
const SHUTDOWN_IDLE_GRACE_MS = 500;

/** What an HTTP server is doing now, for a shutdown to find: responses being written, open sockets (upgraded ones included). */
interface Traffic {
  readonly responses: ReadonlySet<ServerResponse>;
  readonly sockets: ReadonlySet<Socket>;
}

function trackTraffic(server: Server): Traffic {
  const responses = new Set<ServerResponse>();
  const sockets = new Set<Socket>();
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  server.on('request', (_req: IncomingMessage, res: ServerResponse) => {
    responses.add(res);
    res.once('close', () => responses.delete(res));
  });
  return { responses, sockets };
}

/**
 * Closes an HTTP server gracefully: no new connections from now on; answers in flight
 * completed, with `Connection: close`, so their connections end with them; connections
 * that carry no request closed after a short grace; every socket still open (WebSockets
 * included) destroyed after `graceMs`.
 *
 * Not `server.close()` at first: since Node 19 it also closes at once every connection that
 * is "idle", which includes one whose request has arrived but not yet been parsed because
 * the event loop was busy: that request would be reset instead of answered. For the same
 * reason the idle sweeps run in the check phase (`setImmediate`), after pending input has
 * been read.
 */
function drainHttpServer(server: Server, traffic: Traffic, graceMs: number): Promise<void> {
  return new Promise<void>((resolve) => {
    const closeAfterAnswer = (res: ServerResponse): void => {
      if (!res.headersSent) res.setHeader('Connection', 'close');
    };
    for (const res of traffic.responses) closeAfterAnswer(res);
    server.on('request', (_req: IncomingMessage, res: ServerResponse) => closeAfterAnswer(res));
    const sweep = (): void => {
      setImmediate(() => server.closeIdleConnections());
    };
    let idle: NodeJS.Timeout | undefined;
    const startIdle = setTimeout(() => {
      sweep();
      idle = setInterval(sweep, 100);
    }, SHUTDOWN_IDLE_GRACE_MS);
    const cut = setTimeout(() => {
      server.closeAllConnections();
      for (const socket of traffic.sockets) socket.destroy();
    }, graceMs);
    NetServer.prototype.close.call(server, () => {
      clearTimeout(startIdle);
      clearInterval(idle);
      clearTimeout(cut);
      resolve();
    });
  });
}

export async function startService(config: Config, logger: Logger, clock: Clock = systemClock): Promise<RunningService> {
  const metrics = createMetrics();
  // The watermark comes with the infrastructure, whose event store reports to the tracker.
  let watermark: Watermark | null = null;
  const lag = createLagTracker(() => watermark?.current() ?? null);
  const infra = await connectInfrastructure(config, logger, {
    appendSeconds: metrics.eventStoreAppendSeconds,
    onAppended: (position, count) => lag.appended(position, count),
  });
  watermark = infra.watermark;
  metrics.sources.projectorLag = () => lag.lag();
  const roles = new Set(config.roles);
  const projector = roles.has('projector') ? runProjectorRole(config, infra, logger) : null;
  if (projector !== null) await projector.ready;
  // Device states folded once per process: the heartbeat use case and the expiry jobs share them.
  const deviceStates = createStateCache<DeviceState>(DEVICE_STATE_CACHE_SIZE);
  const expiry = roles.has('expiry') ? await runExpiryRole(config, infra, logger, clock, deviceStates, metrics) : null;

  let server: Server | null = null;
  let traffic: Traffic = { responses: new Set(), sockets: new Set() };
  let tunnel: Tunnel | null = null;
  /**
   * The oldest head position a probe saw that the projections had not reached yet, and when.
   * Under steady writes the watermark is nearly always a little behind the head of the
   * moment; what counts is whether a head seen at some time is applied within 5 s of it.
   */
  let pendingHead: { readonly position: GlobalPosition; readonly seenAt: number } | null = null;

  const readiness = async (): Promise<ReadinessReport> => {
    const checks: Record<string, { status: 'ok' | 'fail'; detail?: string }> = {};
    const check = async (name: string, probe: () => Promise<void>): Promise<void> => {
      let timer: NodeJS.Timeout | undefined;
      try {
        await Promise.race([probe(), new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error('timeout')), 2000)))]);
        checks[name] = { status: 'ok' };
      } catch (error) {
        checks[name] = { status: 'fail', detail: error instanceof Error ? error.message : 'unavailable' };
      } finally {
        clearTimeout(timer);
      }
    };
    let head: GlobalPosition | null = null;
    await Promise.all([
      check('eventStore', async () => {
        head = await infra.eventStore.headPosition();
      }),
      check('readStore', () => infra.readStore.ping()),
      check('credentials', () => infra.credentials.ping()),
      ...(infra.redis !== null ? [check('redis', async () => void (await infra.redis?.ping()))] : []),
    ]);
    const now = Date.now();
    const current = infra.watermark.current();
    const reached = (position: GlobalPosition): boolean => current !== null && comparePositions(current, position) >= 0;
    if (pendingHead !== null && reached(pendingHead.position)) pendingHead = null;
    // Assigned in a callback above, which the compiler's flow analysis does not follow.
    const seen = head as GlobalPosition | null;
    if (pendingHead === null && seen !== null && !reached(seen)) pendingHead = { position: seen, seenAt: now };
    // Behind since a head seen then, or since this process's oldest append still unapplied, whichever is longer.
    const lagMs = Math.max(pendingHead === null ? 0 : now - pendingHead.seenAt, lag.lag(now).ms);
    checks.projector = lagMs <= PROJECTOR_READY_LAG_MS ? { status: 'ok' } : { status: 'fail', detail: `behind for ${lagMs} ms` };
    return { ready: Object.values(checks).every((c) => c.status === 'ok'), checks };
  };

  let auth: AuthCommands | null = null;
  let mailer: Mailer | null = null;
  let revocationFeed: AccessRevocationFeed | null = null;
  if (roles.has('api')) {
    const sessions = createSessionCommands({
      eventStore: infra.eventStore,
      readStore: infra.readStore,
      watermark: infra.watermark,
      clock,
      readYourWritesTimeoutMs: config.readYourWritesTimeoutMs,
    });
    const users = createUserCommands({
      eventStore: infra.eventStore,
      watermark: infra.watermark,
      clock,
      readYourWritesTimeoutMs: config.readYourWritesTimeoutMs,
      revokeSessions: (userId, reason, ctx) => sessions.revokeAllForUser(userId, reason, ctx),
    });
    revocationFeed = await startAccessRevocationFeed({ eventStore: infra.eventStore, readStore: infra.readStore, logger });
    const tokens = withAccessRevocations(createTokens(infra.secrets), revocationFeed.revocations);
    const devices = createDeviceCommands({
      eventStore: infra.eventStore,
      readStore: infra.readStore,
      watermark: infra.watermark,
      clock,
      readYourWritesTimeoutMs: config.readYourWritesTimeoutMs,
      maxDevicesPerUser: config.maxDevicesPerUser,
      deviceStates,
      onHeartbeat: () => metrics.heartbeats.inc(),
    });
    mailer = config.smtpUrl !== undefined ? createSmtpMailer(config.smtpUrl, config.mailFrom) : createLogMailer(logger, config.mailFrom);
    const hasher = createPasswordHasher();
    metrics.sources.passwordHashesWaiting = () => hasher.stats().waiting;
    auth = createAuthCommands({
      eventStore: infra.eventStore,
      readStore: infra.readStore,
      credentials: infra.credentials,
      hasher,
      onLogin: (outcome) => metrics.logins.inc({ outcome }),
      tokens,
      sessions,
      mailer,
      logger,
      clock,
      watermark: infra.watermark,
      readYourWritesTimeoutMs: config.readYourWritesTimeoutMs,
      adminEmails: config.adminEmails,
      appOrigin: config.appOrigin,
    });
    const limiter =
      infra.redis === null
        ? createMemoryRateLimiter(config.rateLimits)
        : createRedisRateLimiter(infra.redis, config.rateLimits, onRateLimitStoreError(logger, metrics));
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
      devices: { tokens, readStore: infra.readStore, devices },
      audit: { tokens, readStore: infra.readStore, eventStore: infra.eventStore, clock },
      admin: { tokens, rebuildReadModels: () => infra.readModels.rebuild(allProjections()) },
    });
    server = createServer(app);
    traffic = trackTraffic(server);
    tunnel = await createTunnel(server, {
      tokens,
      limiter: tunnelLimiterFrom(limiter, (tier) => metrics.rateLimitRejections.inc({ tier })),
      eventStore: infra.eventStore,
      logger,
      clock,
      redis: config.mode === 'distributed' ? { url: config.redisUrl } : null,
      appOrigin: config.appOrigin,
      onRelayed: (direction) => metrics.tunnelMessages.inc({ direction }),
      accessRevocations: revocationFeed.revocations,
      // A burst the limits allow is never refused for being a burst (decisions §5).
      options: { maxPendingPerSocket: Math.max(DEFAULT_TUNNEL_OPTIONS.maxPendingPerSocket, config.rateLimits.tunnelMessage.points + config.rateLimits.tunnelSubscribe.points) },
      readStore: infra.readStore,
    });
    const running = tunnel;
    metrics.sources.tunnel = () => running.stats();
  } else {
    // Projector or expiry only: health, readiness and metrics still answer on PORT.
    server = createServer(createOperationsApp({ logger, metrics, health: { readiness } }));
    traffic = trackTraffic(server);
  }
  const listening = server;
  await new Promise<void>((resolve, reject) => {
    listening.once('error', reject);
    listening.listen(config.port, config.host, () => resolve());
  });

  const port = (listening.address() as AddressInfo).port;
  logger.info({ port, mode: config.mode, roles: [...roles] }, 'service started');

  return {
    port,
    eventStore: infra.eventStore,
    readStore: infra.readStore,
    rebuildReadModels: () => infra.readModels.rebuild(allProjections()),
    stop: async () => {
      const deadline = Date.now() + SHUTDOWN_BUDGET_MS;
      // One step of the shutdown, given the time left; a step that does not finish in it is
      // logged and left behind, so that the next ones still run (a store that hangs, say).
      const step = async (name: string, work: () => Promise<void>): Promise<void> => {
        let timer: NodeJS.Timeout | undefined;
        const outcome = await Promise.race([
          work().then(
            () => 'done' as const,
            (error: unknown) => {
              logger.warn({ step: name, err: error instanceof Error ? error.message : String(error) }, 'shutdown: step failed');
              return 'done' as const;
            },
          ),
          new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), Math.max(0, deadline - Date.now())))),
        ]);
        clearTimeout(timer);
        if (outcome === 'late') logger.warn({ step: name }, 'shutdown: step did not finish in time; going on');
      };
      // Stop accepting first: the listening socket closes now; requests in flight run to their end.
      const closed = server === null ? Promise.resolve() : drainHttpServer(server, traffic, SHUTDOWN_HTTP_GRACE_MS);
      // Tunnel sockets: their transports close, so their clients reconnect (to another process).
      await step('tunnel', async () => tunnel?.close());
      await step('revocations', async () => revocationFeed?.stop());
      await step('http', () => closed);
      // Reset mails still on their way are sent before the stores close.
      await step('mail', async () => {
        await auth?.drain();
        mailer?.close();
      });
      await step('expiry', async () => expiry?.stop());
      await step('projector', async () => projector?.stop());
      await step('stores', () => infra.close());
    },
  };
}
