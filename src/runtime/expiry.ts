import type { Config } from '../config';
import type { Logger } from '../logger';
import type { Metrics } from '../metrics';
import type { Clock, StateCache } from '../commands/handler';
import { createPresenceCommands } from '../commands/presence';
import type { DeviceState } from '../domain/device';
import { deviceStream } from '../domain/events';
import { startExpiryRole as startExpiryFeed, type ExpiryRole } from '../presence/expiry-role';
import { createTimerExpiryScheduler } from '../presence/timer-scheduler';
import type { Infrastructure } from './adapters';

/**
 * Runs the expiry role (decisions §4): in-process timers in embedded mode, rebuilt from the
 * read model at start; BullMQ delayed jobs in Redis in distributed mode, worked by every
 * process with this role, and scheduled again whenever the connection to Redis comes back.
 */
export async function startExpiryRole(
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
      : // BullMQ (and its Redis client) load only here: never in embedded mode.
        (await import('../presence/bullmq-scheduler')).createBullmqExpiryScheduler({ redisUrl: config.redisUrl, onReconnect: () => role?.resync(), onError: warn });
  role = await startExpiryFeed({
    eventStore: infra.eventStore,
    readStore: infra.readStore,
    scheduler,
    presence: createPresenceCommands({ eventStore: infra.eventStore, clock, offlineAfterSeconds: config.offlineAfterSeconds, deviceStates, keyring: infra.keyring }),
    offlineAfterSeconds: config.offlineAfterSeconds,
    logger,
    onOffline: () => metrics.offlineExpiries.inc(),
    // A device deleted through another process: no fold of it stays here (decisions §11), in a
    // process with the API role as in one without (the API's live feed drops it there too).
    onDeleted: (uuid) => deviceStates.forget(deviceStream(uuid)),
  });
  // Embedded: the read model is complete by now, so every deadline is restored before the API opens.
  if (config.mode === 'embedded') await role.ready;
  return role;
}
