import type { Config } from '../config';
import type { Logger } from '../logger';
import { formatPosition } from '../infra/eventstore/port';
import { allProjections } from '../projections';
import type { Projector } from '../projections/projector';
import { createRedisLease, delay } from '../projections/lease';
import type { Watermark } from '../projections/watermark';
import { PROJECTOR_LEASE_KEY, type Infrastructure } from './adapters';

/** After the projector stopped or failed, this long before this process bids for the lease again. */
const PROJECTOR_RETRY_MS = 1000;

export interface ProjectorRole {
  /** Embedded: resolves once the read models have caught up with the log. Distributed: at once. */
  readonly ready: Promise<void>;
  /** The projector running in this process now (it holds the lease), if any. */
  readonly current: () => Projector | null;
  readonly stop: () => Promise<void>;
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
export function startProjectorRole(config: Config, infra: Infrastructure, logger: Logger): ProjectorRole {
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
        const epoch = lease.epoch();
        if (epoch === null) continue; // lost again already: the finally below gives it up
        logger.warn({ owner: lease.owner, epoch }, 'projector lease acquired');
        void lease.lost().then(() => logger.warn({ owner: lease.owner, epoch, heldUntil: lease.heldUntil() }, 'projector lease lost; applying stopped'));
        // Fencing: nothing is written once the lease is not certainly held, and the checkpoint carries the epoch.
        const fencing = { epoch, held: () => lease.isHeld() };
        const projector = reportProgress(logger)(await infra.readModels.startProjector(projections, { ...options, fencing }));
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
