import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Config } from './config';
import type { Logger } from './logger';
import { createOperationsApp } from './api/app';
import { DOCS_PATH } from './api/routes/docs';
import { systemClock, type Clock } from './commands/handler';
import { DEVICE_STATE_CACHE_SIZE } from './commands/devices';
import type { EventStore } from './infra/eventstore/port';
import type { ReadStore } from './infra/readstore/port';
import { createMetrics } from './metrics';
import { createDeviceStateCache } from './privacy/kept-folds';
import { allProjections } from './projections';
import { createLagTracker } from './projections/lag';
import type { RebuildReport } from './projections/read-models';
import type { Watermark } from './projections/watermark';
import { connectInfrastructure } from './runtime/adapters';
import { startApiRole, type ApiRole } from './runtime/api';
import { startExpiryRole } from './runtime/expiry';
import { drainHttpServer, trackTraffic } from './runtime/http-drain';
import { startProjectorRole } from './runtime/projector';
import { createReadiness } from './runtime/readiness';
import { runShutdown } from './runtime/shutdown';
import { answerClientErrors } from './runtime/client-errors';
import { startEmbeddedSnapshots, type SnapshotWriter } from './runtime/snapshot-writer';

/**
 * The composition root: what runs in this process, top to bottom. The adapters are picked
 * from the configuration (runtime/adapters.ts); then each role in `ROLES` starts
 * (runtime/projector.ts, runtime/expiry.ts, runtime/api.ts); then the HTTP server listens.
 * `stop()` is the shutdown sequence (runtime/shutdown.ts), in the reverse order.
 */


/**
 * Connections the kernel holds for the process to accept (capped by net.core.somaxconn).
 * Node's default, 511, overflows when thousands of hubs reconnect at once while the event
 * loop is busy: the kernel then drops their TCP handshakes and each client waits for its own
 * retransmissions (seconds apart, doubling), some past the client's connect timeout.
 */
export const LISTEN_BACKLOG = 8192;

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

/** How long requests in flight may still run after SIGTERM before their connections are cut (the process has 10 s in all). */
const SHUTDOWN_HTTP_GRACE_MS = 5000;

export async function startService(config: Config, logger: Logger, clock: Clock = systemClock): Promise<RunningService> {
  // 1. Metrics, and the stores chosen by the configuration (the event store reports its appends to the lag tracker).
  const metrics = createMetrics();
  let watermark: Watermark | null = null;
  const lag = createLagTracker(() => watermark?.current() ?? null);
  let snapshots: SnapshotWriter | null = null;
  const infra = await connectInfrastructure(config, logger, {
    appendSeconds: metrics.eventStoreAppendSeconds,
    onAppended: (position, count) => {
      lag.appended(position, count);
      snapshots?.appended(count);
    },
  });
  watermark = infra.watermark;
  metrics.sources.projectorLag = () => lag.lag();
  const roles = new Set(config.roles);

  // 2. The projector (embedded: the read models are complete before anything serves).
  const projector = roles.has('projector') ? startProjectorRole(config, infra, logger) : null;
  if (projector !== null) await projector.ready;

  // 3. Offline expiry. Device states are folded once per process: heartbeats and expiry jobs share them
  // (a deleted device's without its personal data, src/privacy/kept-folds.ts).
  const deviceStates = createDeviceStateCache(DEVICE_STATE_CACHE_SIZE);
  const expiry = roles.has('expiry') ? await startExpiryRole(config, infra, logger, clock, deviceStates, metrics) : null;

  // 4. The API and the tunnel, or, without the api role, health, readiness and metrics only.
  const readiness = createReadiness(infra, lag, logger);
  const api: ApiRole | null = roles.has('api')
    ? await startApiRole({ config, infra, logger, metrics, clock, deviceStates, readiness, afterErasure: async () => snapshots?.writeOrFail() })
    : null;
  const server: Server = api?.server ?? createServer(createOperationsApp({ logger, metrics, health: { readiness } }));
  answerClientErrors(server);
  const traffic = trackTraffic(server);
  await new Promise<void>((resolve, reject) => {
    // EADDRINUSE, EACCES, ENOTFOUND (a HOST that names no address): said with the variables that chose the address.
    server.once('error', (error: Error) => reject(new Error(`HOST ${config.host}, PORT ${config.port}: ${error.message}`, { cause: error })));
    server.listen({ port: config.port, host: config.host, backlog: LISTEN_BACKLOG }, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  // 5. Embedded: start snapshots, the first one now if the start replayed anything.
  if (config.mode === 'embedded' && projector !== null && infra.snapshot !== null) {
    snapshots = startEmbeddedSnapshots(config, infra.snapshot, logger);
    void snapshots.write();
  }
  logger.info(
    { port, mode: config.mode, roles: [...roles], version: config.version, ...(api !== null ? { docs: `http://localhost:${port}${DOCS_PATH}` } : {}) },
    'service started',
  );

  return {
    port,
    eventStore: infra.eventStore,
    readStore: infra.readStore,
    rebuildReadModels: () => infra.readModels.rebuild(allProjections()),
    stop: async () => {
      // Stop accepting first: the listening socket closes now; requests in flight run to their end.
      const closed = drainHttpServer(server, traffic, SHUTDOWN_HTTP_GRACE_MS);
      await runShutdown(
        [
          ...(api?.stopBeforeHttp ?? []),
          { name: 'http', run: () => closed },
          ...(api?.stopAfterHttp ?? []),
          { name: 'expiry', run: async () => expiry?.stop() },
          { name: 'projector', run: async () => projector?.stop() },
          // After the projector: the last snapshot covers everything applied.
          { name: 'snapshot', run: async () => snapshots?.write().then(() => snapshots?.stop()) },
          { name: 'stores', run: () => infra.close() },
        ],
        logger,
      );
    },
  };
}
