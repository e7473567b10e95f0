import type { Config } from '../config';
import type { Logger } from '../logger';
import { formatPosition } from '../infra/eventstore/port';
import { allProjections } from '../projections';
import type { Projector } from '../projections/projector';
import { createRedisLease, delay } from '../projections/lease';
import type { Watermark } from '../projections/watermark';
import { PROJECTOR_LEASE_KEY, type Infrastructure } from './adapters';

/** After the lease was lost, this long before this process bids for it again. */
const PROJECTOR_RETRY_MS = 1000;
/** After a failure (a store unreachable, say), the first wait before the projector starts again from its checkpoint. */
const RESTART_FIRST_MS = 500;
/** The waits double with each failure in a row up to this bound, and start over once a projector has caught up. */
const RESTART_MAX_MS = 15_000;

/** How long to wait before restarting after `failuresInARow` failures (1, 2, ...). */
export function restartDelayMs(failuresInARow: number): number {
  return Math.min(RESTART_MAX_MS, RESTART_FIRST_MS * 2 ** Math.max(0, failuresInARow - 1));
}

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

  const errorMessage = (error: unknown): string => (error instanceof Error ? error.message : String(error));
  const abort = new AbortController();
  let active: Projector | null = null;
  let failuresInARow = 0;
  /** A projector that catches up ends a run of failures. */
  const started = (projector: Projector): Projector => {
    void projector.caughtUp.then(() => {
      if (projector.progress().caughtUp) failuresInARow = 0;
    });
    return projector;
  };
  /** After a failure: logged, then a wait that grows with the failures in a row (bounded). */
  const backOff = async (): Promise<void> => {
    failuresInARow += 1;
    const waitMs = restartDelayMs(failuresInARow);
    logger.warn({ failuresInARow, waitMs }, 'projector restarting');
    await delay(waitMs, abort.signal);
  };

  if (config.mode === 'embedded' || infra.redis === null) {
    // One process: the projector runs from the start; one that fails (an I/O error reading
    // the log, say) starts again from the checkpoint of the read models after a wait.
    let resolveReady: () => void = () => undefined;
    const ready = new Promise<void>((resolve) => (resolveReady = resolve));
    const loop = (async () => {
      while (!abort.signal.aborted) {
        try {
          const projector = started(reportProgress(logger)(await infra.readModels.startProjector(projections, options)));
          active = projector;
          // The API waits for the first catch-up (or the first failure, as before any restart).
          void projector.caughtUp.then(resolveReady);
          await projector.done;
          return; // stopped by stop()
        } catch (error) {
          // Failures of a running projector were logged by its onError.
          if (active === null) logger.error({ err: errorMessage(error) }, 'projector failed');
          resolveReady();
        } finally {
          const failed = active;
          active = null;
          if (failed !== null && !abort.signal.aborted) await failed.stop().catch(() => undefined);
        }
        if (abort.signal.aborted) return;
        await backOff();
      }
    })();
    return {
      ready,
      current: () => null,
      stop: async () => {
        abort.abort();
        const p = active;
        active = null;
        if (p !== null) await p.stop();
        await loop;
      },
    };
  }

  const lease = createRedisLease(infra.redis, PROJECTOR_LEASE_KEY, config.projectorLeaseMs);
  const loop = (async () => {
    while (!abort.signal.aborted) {
      try {
        await lease.acquire(abort.signal);
      } catch {
        return; // aborted: the role is stopping
      }
      let failed = false;
      try {
        const epoch = lease.epoch();
        if (epoch === null) continue; // lost again already: the finally below gives it up
        logger.warn({ owner: lease.owner, epoch }, 'projector lease acquired');
        void lease.lost().then(() => logger.warn({ owner: lease.owner, epoch, heldUntil: lease.heldUntil() }, 'projector lease lost; applying stopped'));
        // Fencing: nothing is written once the lease is not certainly held, and the checkpoint carries the epoch.
        const fencing = { epoch, held: () => lease.isHeld() };
        const projector = started(reportProgress(logger)(await infra.readModels.startProjector(projections, { ...options, fencing })));
        active = projector;
        const outcome = await Promise.race([
          lease.lost().then(() => 'lost' as const),
          projector.done.then(
            () => 'stopped' as const,
            () => 'failed' as const,
          ),
        ]);
        failed = outcome === 'failed';
        active = null;
        await projector.stop();
      } catch (error) {
        // The read store unreachable at start or at the last checkpoint.
        failed = true;
        logger.error({ err: errorMessage(error) }, 'projector failed');
      } finally {
        active = null;
        // Given up either way, so that a standby may take over while this one waits.
        await lease.release().catch(() => undefined);
      }
      if (abort.signal.aborted) return;
      if (failed) {
        await backOff();
      } else {
        logger.warn('projector lease lost or projector stopped; standing by');
        await delay(PROJECTOR_RETRY_MS, abort.signal);
      }
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
