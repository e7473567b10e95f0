import { randomUUID } from 'node:crypto';
import type Redis from 'ioredis';
import { ServiceUnavailableError } from '../domain/errors';
import { comparePositions, formatPosition, parsePosition, type GlobalPosition } from '../infra/eventstore/port';
import type { Logger } from '../logger';
import type { AccessRevocationFeed } from './access-revocations';

/**
 * A revocation answers only once every API process refuses what it revoked (decisions §3:
 * "on every process"): a deactivation, a password reset. Each process's revocation feed
 * says how far it has applied the log; the process that made the revocation waits until
 * every live process is past its position.
 *
 * - One process (embedded): its own feed.
 * - Redis (distributed): every API process keeps `position|time` in one hash, written after
 *   what it applied and every few seconds; an entry not refreshed for `STALE_MS` is a process
 *   that is gone (a process that starts catches up with the log before it serves, and before
 *   it writes its entry). Past the timeout the caller gets 503: what it asked is done, but
 *   not yet everywhere, and asking again is harmless.
 */
export interface RevocationReach {
  untilEveryProcess(position: GlobalPosition): Promise<void>;
  stop(): Promise<void>;
}

export const FEEDS_KEY = 'hhc:access-revocations:feeds';
const HEARTBEAT_MS = 2000;
const STALE_MS = 8000;
const POLL_MS = 20;
const STOP_WAIT_MS = 500;
const UNAVAILABLE = 'Revocation not yet applied on every server; try again';

export function localReach(feed: Pick<AccessRevocationFeed, 'waitFor'>, timeoutMs: number): RevocationReach {
  return {
    async untilEveryProcess(position) {
      if (!(await feed.waitFor(position, timeoutMs))) throw new ServiceUnavailableError(UNAVAILABLE);
    },
    stop: () => Promise.resolve(),
  };
}

export function redisReach(
  redis: Redis,
  feed: Pick<AccessRevocationFeed, 'waitFor' | 'position' | 'onApplied'>,
  options: { readonly timeoutMs: number; readonly logger: Logger; readonly now?: () => number },
): RevocationReach {
  const processId = randomUUID();
  const now = options.now ?? Date.now;
  let scheduled = false;
  let stopped = false;

  const publish = (): void => {
    // Nothing queued while Redis is away: the next heartbeat after it is back says where this process is.
    if (stopped || redis.status !== 'ready') return;
    const position = feed.position();
    const value = `${position === null ? '' : formatPosition(position)}|${now()}`;
    redis.hset(FEEDS_KEY, processId, value).catch((error: unknown) => {
      options.logger.warn({ err: error instanceof Error ? error.message : String(error) }, 'access revocations: could not publish this process position');
    });
  };
  feed.onApplied(() => {
    if (scheduled) return;
    scheduled = true;
    setImmediate(() => {
      scheduled = false;
      publish();
    });
  });
  publish();
  const heartbeat = setInterval(publish, HEARTBEAT_MS);
  heartbeat.unref();

  /** Whether every live process has applied `position`. */
  const everywhere = async (position: GlobalPosition): Promise<boolean> => {
    const entries = await redis.hgetall(FEEDS_KEY);
    const oldest = now() - STALE_MS;
    for (const [id, value] of Object.entries(entries)) {
      const [at, time] = value.split('|');
      if (Number(time) < oldest) {
        if (Number(time) < oldest - STALE_MS) void redis.hdel(FEEDS_KEY, id).catch(() => undefined);
        continue;
      }
      if (at === undefined || at === '' || comparePositions(parsePosition(at), position) < 0) return false;
    }
    return true;
  };

  return {
    async untilEveryProcess(position) {
      const deadline = now() + options.timeoutMs;
      if (!(await feed.waitFor(position, options.timeoutMs))) throw new ServiceUnavailableError(UNAVAILABLE);
      for (;;) {
        // Bounded: a Redis that does not answer is a reach that cannot be confirmed (503).
        const remaining = Math.max(0, deadline - now());
        const known = await Promise.race([
          everywhere(position).catch(() => false),
          new Promise<false>((resolve) => setTimeout(() => resolve(false), remaining).unref()),
        ]);
        if (known) return;
        if (now() >= deadline) {
          options.logger.warn({ position: formatPosition(position) }, 'access revocations: not applied by every process in time');
          throw new ServiceUnavailableError(UNAVAILABLE);
        }
        await new Promise((resolve) => setTimeout(resolve, POLL_MS));
      }
    },
    async stop() {
      stopped = true;
      clearInterval(heartbeat);
      // Bounded: with Redis away the entry simply goes stale.
      if (redis.status !== 'ready') return;
      await Promise.race([redis.hdel(FEEDS_KEY, processId).catch(() => undefined), new Promise((resolve) => setTimeout(resolve, STOP_WAIT_MS).unref())]);
    },
  };
}
