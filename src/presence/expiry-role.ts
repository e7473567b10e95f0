import { nextCheckAt, type PresenceCommands } from '../commands/presence';
import type { DeviceWentOnline } from '../domain/device';
import { STREAM_PREFIXES } from '../domain/events';
import type { EventStore, Subscription } from '../infra/eventstore/port';
import { parsePosition } from '../infra/eventstore/port';
import type { ReadStore } from '../infra/readstore/port';
import type { Logger } from '../logger';
import { listOnlineDevices } from '../projections/devices';
import { CHECKPOINT_NAME } from '../projections/projector';
import type { ExpiryScheduler } from './scheduler';

/**
 * The `expiry` role: every online device has an expiry job, and the jobs run.
 *
 * Where jobs come from — the feed: the devices read model says which devices are online at
 * the projector's checkpoint P (their documents reflect at least P), and a subscription to
 * the device streams from P schedules every later `DeviceWentOnline`. Together they cover
 * every device that is online, whatever happened before: a process that died between an
 * append and a schedule, a restart of this role (embedded mode: the in-process jobs are
 * rebuilt exactly so), or a Redis that came back empty (`resync()` starts the feed again).
 * Scheduling is idempotent, so covering a device twice costs nothing; the job re-checks the
 * event store when it fires, so a stale read model only makes it fire early and re-delay.
 *
 * The API never touches the scheduler: a heartbeat, even the one that brings a device
 * online, costs no Redis round trip for expiry.
 */

export interface ExpiryRoleDeps {
  readonly eventStore: EventStore;
  readonly readStore: ReadStore;
  readonly scheduler: ExpiryScheduler;
  readonly presence: PresenceCommands;
  readonly offlineAfterSeconds: number;
  readonly logger: Logger;
  /** Schedules in flight at once while the feed catches up. */
  readonly concurrency?: number;
  /** Told of every device this process's jobs took offline (for `offline_expiries_total`). */
  readonly onOffline?: (uuid: string) => void;
  /**
   * Told of every device deleted, through whichever process, from the feed's start on: this
   * process's folds of it go (src/runtime/expiry.ts), also in a process without the API's feed.
   */
  readonly onDeleted?: (uuid: string) => void;
}

export interface ExpiryRole {
  /** Resolves once every device that was online at start has a job. */
  readonly ready: Promise<void>;
  /** Schedules every online device again (after Redis came back: it may have lost the jobs). */
  resync(): void;
  /** Stops the feed and the jobs (running ones finish first). */
  stop(): Promise<void>;
}

const FEED_RETRY_MS = 1000;

/** Runs tasks with at most `limit` in flight; `drain` waits for all of them. */
function boundedRunner(limit: number): { run: (task: () => Promise<void>) => Promise<void>; drain: () => Promise<void> } {
  const inFlight = new Set<Promise<void>>();
  return {
    async run(task) {
      while (inFlight.size >= limit) await Promise.race(inFlight);
      const p = task().finally(() => inFlight.delete(p));
      inFlight.add(p);
    },
    async drain() {
      await Promise.allSettled([...inFlight]);
    },
  };
}

export async function startExpiryRole(deps: ExpiryRoleDeps): Promise<ExpiryRole> {
  const { eventStore, readStore, scheduler, presence, logger } = deps;
  const windowMs = deps.offlineAfterSeconds * 1000;
  const concurrency = deps.concurrency ?? 64;
  let stopped = false;
  let subscription: Subscription | null = null;
  /** Bumped by resync(): a feed run of an older generation starts over. */
  let generation = 0;
  let markReady: () => void = () => undefined;
  const ready = new Promise<void>((resolve) => (markReady = resolve));

  await scheduler.start(async (uuid) => {
    const outcome = await presence.expire(uuid);
    if (outcome.kind === 'offline') {
      logger.debug({ uuid }, 'device went offline: heartbeat timeout');
      deps.onOffline?.(uuid);
    }
    return nextCheckAt(outcome);
  });

  const schedule = async (uuid: string, lastSeenAt: string | null): Promise<void> => {
    const at = lastSeenAt === null ? Date.now() : Date.parse(lastSeenAt) + windowMs;
    for (;;) {
      try {
        await scheduler.schedule(uuid, at);
        return;
      } catch (error) {
        if (stopped) return;
        logger.warn({ uuid, err: error instanceof Error ? error.message : String(error) }, 'presence expiry: scheduling failed, retrying');
        await new Promise((resolve) => setTimeout(resolve, FEED_RETRY_MS));
      }
    }
  };

  const runFeed = async (): Promise<void> => {
    const runner = boundedRunner(concurrency);
    const started = generation;
    try {
      const checkpoint = await readStore.getCheckpoint(CHECKPOINT_NAME);
      const online = await listOnlineDevices(readStore);
      for (const device of online) await runner.run(() => schedule(device.uuid, device.lastSeenAt));
      await runner.drain();
      logger.info({ online: online.length }, 'presence expiry: online devices scheduled');
      markReady();

      if (stopped || generation !== started) return;
      const feed = eventStore.subscribe({
        ...(checkpoint !== null ? { fromPosition: parsePosition(checkpoint) } : {}),
        streamPrefixes: [STREAM_PREFIXES.device],
      });
      subscription = feed;
      for await (const item of feed) {
        if (item.kind !== 'event') continue;
        if (item.event.type === 'DeviceDeleted') deps.onDeleted?.(item.event.streamName.slice(STREAM_PREFIXES.device.length));
        if (item.event.type !== 'DeviceWentOnline') continue;
        const data = item.event.data as DeviceWentOnline['data'];
        await runner.run(() => schedule(data.uuid, data.lastSeenAt));
      }
    } finally {
      await runner.drain();
    }
  };

  const loop = (async () => {
    while (!stopped) {
      try {
        await runFeed();
      } catch (error) {
        if (stopped) return;
        logger.warn({ err: error instanceof Error ? error.message : String(error) }, 'presence expiry feed failed; starting it again');
        await new Promise((resolve) => setTimeout(resolve, FEED_RETRY_MS));
      }
    }
  })();

  return {
    ready,
    resync() {
      if (stopped) return;
      logger.info('presence expiry: scheduling every online device again');
      generation++;
      // Ending the subscription ends this run of the feed; the loop starts a fresh one.
      void subscription?.close();
    },
    async stop() {
      stopped = true;
      await subscription?.close();
      // Closing the scheduler first fails a schedule still waiting for Redis, so the feed ends.
      await scheduler.close();
      await loop;
    },
  };
}
