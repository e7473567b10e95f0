import { randomUUID } from 'node:crypto';
import { deviceDecider, offlineDeadline, type DeviceState, type HeartbeatReceived } from '../domain/device';
import { deviceStream, heartbeatStream } from '../domain/events';
import type { Actor } from '../domain/messages';
import type { EventStore } from '../infra/eventstore/port';
import type { Keyring } from '../privacy/keyring';
import { createDeviceSnapshots, DEVICE_SNAPSHOT_EVERY } from './snapshots';
import { createDeviceStateCache } from '../privacy/kept-folds';
import { handleCommand, newCommandContext, type Clock, type CommandContext, type StateCache } from './handler';

/**
 * Presence expiry (decisions §4): what an expiry job does when it fires. It reads the newest
 * heartbeat and issues `MarkOffline` through the one command handler, which appends
 * `DeviceWentOffline` only when that heartbeat is older than the timeout, with the device
 * stream's expected revision — so two workers firing at once append one transition.
 *
 * The race with a heartbeat that lands while the job decides: the heartbeat use case
 * appends `HeartbeatReceived` first and decides transitions afterwards (src/commands/devices.ts),
 * and this job looks at the heartbeat stream once more after it appended `DeviceWentOffline`.
 * Whichever of the two comes second sees the other's write, so a device that was heard
 * never stays offline: either the heartbeat appends `DeviceWentOnline`, or this job does
 * (`ConfirmPresence`). Both at once append it once (expected revision again).
 */

export const EXPIRY_ACTOR: Actor = { type: 'system', id: 'presence-expiry' };

/** Device states kept folded by the expiry worker, so a job reads only what is new in the device stream. */
const EXPIRY_STATE_CACHE_SIZE = 20_000;

export interface PresenceCommandDeps {
  readonly eventStore: EventStore;
  readonly clock: Clock;
  readonly offlineAfterSeconds: number;
  /**
   * Folded device states. In a process that also runs the API, share its cache: the API has
   * every device that sends heartbeats folded already, so a job reads only what is new.
   */
  readonly deviceStates?: StateCache<DeviceState>;
  /** The event store's keyring: a device with no data key yet gets one before its snapshot is due (src/commands/snapshots.ts). */
  readonly keyring?: Pick<Keyring, 'keyFor'>;
}

export interface LastHeartbeat {
  readonly at: string;
  /** Revision in `heartbeat-<uuid>`: revisions keep growing even when $maxAge hides old events. */
  readonly revision: bigint;
}

export type ExpiryOutcome =
  /** `DeviceWentOffline` was appended. */
  | { readonly kind: 'offline' }
  /** Online, deadline not reached (or back online at once): look again at `nextCheckAt` (epoch ms). */
  | { readonly kind: 'alive'; readonly nextCheckAt: number }
  /** Offline already, deleted, or never registered: the job ends. */
  | { readonly kind: 'not-online' };

export interface PresenceCommands {
  /** One run of the expiry job of a device. */
  expire(uuid: string): Promise<ExpiryOutcome>;
  /** The newest heartbeat of a device, or null when its heartbeat stream is empty (or aged out). */
  lastHeartbeat(uuid: string): Promise<LastHeartbeat | null>;
}

/** When an outcome wants the job to fire again, or null when the job ends. */
export function nextCheckAt(outcome: ExpiryOutcome): number | null {
  return outcome.kind === 'alive' ? outcome.nextCheckAt : null;
}

export function createPresenceCommands(deps: PresenceCommandDeps): PresenceCommands {
  const { eventStore, clock, offlineAfterSeconds } = deps;
  const cache = deps.deviceStates ?? createDeviceStateCache(EXPIRY_STATE_CACHE_SIZE);
  const snapshots = createDeviceSnapshots(eventStore, DEVICE_SNAPSHOT_EVERY, deps.keyring);

  const lastHeartbeat = async (uuid: string): Promise<LastHeartbeat | null> => {
    let newest: LastHeartbeat | null = null;
    // Read to the end (one event) rather than leave the loop: a read left early is cancelled.
    for await (const recorded of eventStore.readStream(heartbeatStream(uuid), { direction: 'backwards', maxCount: 1 })) {
      if (recorded.type === 'HeartbeatReceived') newest = { at: (recorded.data as HeartbeatReceived['data']).receivedAt, revision: recorded.revision };
    }
    return newest;
  };

  const context = (): CommandContext => newCommandContext(EXPIRY_ACTOR, randomUUID());

  const alive = (state: DeviceState, lastHeartbeatAt: string | null): ExpiryOutcome => {
    const deadline = offlineDeadline(state, lastHeartbeatAt, offlineAfterSeconds);
    return deadline === null ? { kind: 'not-online' } : { kind: 'alive', nextCheckAt: Date.parse(deadline) };
  };

  return {
    lastHeartbeat,

    async expire(uuid) {
      const stream = deviceStream(uuid);
      const ctx = context();
      const seen = await lastHeartbeat(uuid);
      const marked = await handleCommand(
        eventStore,
        deviceDecider,
        stream,
        {
          type: 'MarkOffline',
          data: { uuid, lastHeartbeatAt: seen?.at ?? null, offlineAfterSeconds, now: clock.now().toISOString() },
        },
        ctx,
        clock,
        { cache, snapshots },
      );
      if (marked.events.length === 0) return alive(marked.state, seen?.at ?? null);

      // Offline now. A heartbeat appended after our read answered (or will answer) online.
      const newer = await lastHeartbeat(uuid);
      if (newer === null || (seen !== null && newer.revision <= seen.revision)) return { kind: 'offline' };
      const confirmed = await handleCommand(
        eventStore,
        deviceDecider,
        stream,
        { type: 'ConfirmPresence', data: { uuid, heartbeatAt: newer.at, now: clock.now().toISOString() } },
        ctx,
        clock,
        { cache, snapshots },
      );
      const outcome = alive(confirmed.state, newer.at);
      return outcome.kind === 'alive' ? outcome : { kind: 'offline' };
    },
  };
}
