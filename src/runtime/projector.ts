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

/**
 * Resolves once `pendingSince()` (the start of the oldest read-store call still unanswered)
 * lies `boundMs` or more in the past, looked at a few times per bound; never once `signal`
 * aborts.
 */
export function stallOf(pendingSince: () => number | null, boundMs: number, signal: AbortSignal): Promise<'stalled'> {
  return new Promise((resolve) => {
    if (signal.aborted) return;
    const timer = setInterval(() => {
      const since = pendingSince();
      if (since === null || Date.now() - since < boundMs) return;
      clearInterval(timer);
      resolve('stalled');
    }, Math.max(50, Math.floor(boundMs / 4)));
    timer.unref();
    signal.addEventListener('abort', () => clearInterval(timer), { once: true });
  });
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
  const backOff = async (atLeastMs = 0): Promise<void> => {
    failuresInARow += 1;
    const waitMs = Math.max(atLeastMs, restartDelayMs(failuresInARow));
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
  // A holder whose read store has not answered for this long gives the lease up, so that a
  // process that reaches the store projects meanwhile: the same bound as a holder cut off
  // from Redis, whose lease passes on after this long too.
  const stallBoundMs = config.projectorLeaseMs;
  // Backing off after a failure or a stall leaves the others time to bid (they bid every bidEveryMs).
  const giveWayMs = 2 * lease.bidEveryMs;
  /** A projector given up while it still waited on its store stops in the background; this process bids again once it has. */
  let stopping: Promise<void> = Promise.resolve();
  const whenAborted = new Promise<void>((resolve) => abort.signal.addEventListener('abort', () => resolve(), { once: true }));
  const loop = (async () => {
    while (!abort.signal.aborted) {
      await Promise.race([stopping, whenAborted]);
      if (abort.signal.aborted) return;
      try {
        await lease.acquire(abort.signal);
      } catch {
        return; // aborted: the role is stopping
      }
      let outcome: 'lost' | 'stopped' | 'failed' | 'stalled' = 'lost';
      const tenure = new AbortController();
      try {
        const epoch = lease.epoch();
        if (epoch === null) continue; // lost again already: the finally below gives it up
        logger.warn({ owner: lease.owner, epoch }, 'projector lease acquired');
        void lease.lost().then(() => logger.warn({ owner: lease.owner, epoch, heldUntil: lease.heldUntil() }, 'projector lease lost; applying stopped'));
        // Fencing: nothing is written once this tenure's lease is not certainly held, and the checkpoint carries the epoch.
        const fencing = { epoch, held: () => lease.epoch() === epoch };
        const lost = lease.lost().then(() => 'lost' as const);
        const startedAt = Date.now();
        const starting = infra.readModels.startProjector(projections, { ...options, fencing });
        // The start reads the checkpoint and declares indexes: a store that does not answer holds it up too.
        const first = await Promise.race([starting, lost, stallOf(() => startedAt, stallBoundMs, tenure.signal)]);
        if (first === 'lost' || first === 'stalled') {
          outcome = first;
          stopping = starting.then((late) => late.stop()).catch(() => undefined);
        } else {
          const projector = started(reportProgress(logger)(first));
          active = projector;
          outcome = await Promise.race([
            lost,
            projector.done.then(
              () => 'stopped' as const,
              () => 'failed' as const,
            ),
            stallOf(() => projector.progress().pendingSince, stallBoundMs, tenure.signal),
          ]);
          active = null;
          // A stalled projector stops once its store answers (or its client gives up), after the lease is given up below.
          if (outcome === 'stalled') stopping = projector.stop().catch(() => undefined);
          else await projector.stop();
        }
        if (outcome === 'stalled') logger.warn({ owner: lease.owner, epoch, boundMs: stallBoundMs }, 'projector stalled on the read store; giving the lease up');
      } catch (error) {
        // The read store unreachable at start or at the last checkpoint.
        outcome = 'failed';
        logger.error({ err: errorMessage(error) }, 'projector failed');
      } finally {
        tenure.abort();
        active = null;
        // Given up either way, so that a standby may take over while this one waits.
        await lease.release().catch(() => undefined);
      }
      if (abort.signal.aborted) return;
      if (outcome === 'failed' || outcome === 'stalled') {
        await backOff(giveWayMs);
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
