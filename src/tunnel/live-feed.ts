import type { AccessRevocations } from '../auth/access-revocations';
import { asHomeHubEvent, STREAM_PREFIXES } from '../domain/events';
import type { EventStore, GlobalPosition, RecordedEvent, Subscription } from '../infra/eventstore/port';
import type { AppSockets } from './apps';
import { deviceSessionsOf, errorText, type DeviceSession, type TunnelContext } from './context';
import { tunnelSeq, type DeviceSockets } from './devices';
import { TUNNEL_MESSAGES } from './errors';

/**
 * The live feed: every API process follows the `device-*` events from the head and acts
 * on its own sockets. Presence transitions become `device:status`; unlinks, deletions and
 * new token generations revoke; a deactivated account's app sockets are closed.
 */

export interface LiveFeed {
  stop(): Promise<void>;
}

const RESUBSCRIBE_MS = 1000;

export async function startLiveFeed(
  ctx: TunnelContext,
  deps: {
    readonly eventStore: EventStore;
    readonly apps: Pick<AppSockets, 'removeSubscription'>;
    readonly devices: Pick<DeviceSockets, 'end' | 'tunnel' | 'sendStatus'>;
    readonly accessRevocations: Pick<AccessRevocations, 'onRevoked' | 'isRevoked'> | undefined;
    /** The heartbeat path's folds of device streams: a revocation made elsewhere makes them stale. */
    readonly onDeviceRevoked?: ((streamName: string) => void) | undefined;
  },
): Promise<LiveFeed> {
  const { sessions, access, logger } = ctx;
  const { eventStore, apps, devices } = deps;

  /** A presence transition: each process tells its own subscribers, with whether the device's tunnel socket is up anywhere. */
  const announcePresence = (uuid: string, isOnline: boolean, lastSeenAt: string | null): void => {
    if (!sessions.subscribers.has(uuid)) return;
    ctx.track(
      Promise.resolve(devices.tunnel(uuid)).then((tunnel) =>
        devices.sendStatus(uuid, { deviceUuid: uuid, isOnline, lastSeenAt, tunnelConnected: tunnel.connected, tunnelSeq: tunnelSeq(tunnel) }, true),
      ),
      'device status',
    );
  };

  const revokeSubscriptions = (uuid: string, revision: bigint, userId: string | null): void => {
    const set = sessions.subscribers.get(uuid);
    if (set === undefined) return;
    for (const session of [...set]) {
      if (userId !== null && session.userId !== userId) continue;
      const checkedAt = session.subscriptions.get(uuid);
      if (checkedAt === undefined || checkedAt >= revision) continue;
      apps.removeSubscription(session, uuid);
      session.socket.emit('tunnel:error', { code: 'ACCESS_REVOKED', message: TUNNEL_MESSAGES.accessRevoked(uuid) });
    }
  };

  const revokeDevices = (uuid: string, revoked: (session: DeviceSession) => boolean): void => {
    for (const session of deviceSessionsOf(sessions, uuid)) {
      if (revoked(session)) devices.end(session, { code: 'ACCESS_REVOKED', message: TUNNEL_MESSAGES.deviceRevoked });
    }
  };

  const react = (recorded: RecordedEvent): void => {
    const event = asHomeHubEvent(recorded);
    if (event === null) return;
    const uuid = recorded.streamName.slice(STREAM_PREFIXES.device.length);
    switch (event.type) {
      case 'DeviceWentOnline':
        announcePresence(uuid, true, event.data.lastSeenAt);
        return;
      case 'DeviceWentOffline':
        announcePresence(uuid, false, event.data.lastSeenAt);
        return;
      case 'UserUnlinked':
        revokeSubscriptions(uuid, recorded.revision, event.data.userId);
        return;
      case 'DeviceDeleted':
        deps.onDeviceRevoked?.(recorded.streamName);
        revokeSubscriptions(uuid, recorded.revision, null);
        revokeDevices(uuid, (session) => session.authorizedAt < recorded.revision);
        return;
      case 'DeviceTokenIssued':
        deps.onDeviceRevoked?.(recorded.streamName);
        revokeDevices(uuid, (session) => session.gen < event.data.gen);
        return;
      default:
        return;
    }
  };

  // Tokens that ended (a deactivation, a password reset, a reused family): every process closes the sockets it holds with them.
  const revocations = deps.accessRevocations;
  revocations?.onRevoked((userId) => {
    for (const session of [...sessions.all.values()]) {
      if (session.kind !== 'app' || session.userId !== userId) continue;
      const auth = session.socket.data.auth;
      if (auth.kind === 'app' && !revocations.isRevoked({ sub: auth.userId, iat: auth.iat, fam: auth.fam })) continue;
      session.socket.emit('tunnel:error', { code: 'ACCESS_REVOKED', message: TUNNEL_MESSAGES.accountRevoked });
      session.socket.disconnect(true);
    }
  });

  let stopped = false;
  let subscription: Subscription | null = null;
  let wake: () => void = () => undefined;
  const pause = (): Promise<void> =>
    new Promise<void>((resolve) => {
      wake = resolve;
      setTimeout(resolve, RESUBSCRIBE_MS).unref();
    });
  /**
   * Where the feed starts: the head, so only what happens from now on is acted on. A store
   * that cannot say (an embedded log refusing writes after a failed one, or opened read-only
   * on a full disk) appends nothing new meanwhile either: ask again after a pause, without
   * holding up the start.
   */
  const head = async (): Promise<GlobalPosition | null | undefined> => {
    for (let attempt = 0; !stopped; attempt++) {
      try {
        return await eventStore.headPosition();
      } catch (error) {
        if (attempt === 0) logger.warn({ err: errorText(error) }, 'tunnel: the event store head is unavailable; the device event feed starts once it is');
        await pause();
      }
    }
    return undefined;
  };
  const follow = async (): Promise<void> => {
    const start = await head();
    if (start === undefined) return;
    let from = start;
    while (!stopped) {
      const current = eventStore.subscribe({ ...(from !== null ? { fromPosition: from } : {}), streamPrefixes: [STREAM_PREFIXES.device] });
      subscription = current;
      try {
        for await (const item of current) {
          if (item.kind !== 'event') continue;
          from = item.event.position;
          access.apply(item.event);
          try {
            react(item.event);
          } catch (error) {
            logger.error({ err: errorText(error), type: item.event.type }, 'tunnel: reaction failed');
          }
        }
      } catch (error) {
        if (!stopped) logger.warn({ err: errorText(error) }, 'tunnel: device event subscription failed; resubscribing');
      }
      await current.close().catch(() => undefined);
      if (stopped) return;
      await pause();
    }
  };
  const following = follow();

  return {
    async stop() {
      stopped = true;
      await subscription?.close().catch(() => undefined);
      wake();
      await following;
    },
  };
}
