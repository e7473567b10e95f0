import { randomUUID } from 'node:crypto';
import { TOKEN_MESSAGES } from '../auth/tokens';
import { UnauthorizedError } from '../domain/errors';
import { deviceByUuidGathered } from '../projections/devices';
import type { ClusterNotice, DeviceClaim, GoneDevice } from './cluster';
import {
  addDeviceSession,
  andThen,
  CONNECTED_DEVICE_DATA,
  deviceRoom,
  deviceSession,
  removeDeviceSession,
  subscribersRoom,
  userSubscribersRoom,
  type Authenticated,
  type DeviceSession,
  type Maybe,
  type TunnelContext,
  type TunnelSocket,
} from './context';
import { TunnelFailure, TUNNEL_MESSAGES } from './errors';
import type { DeviceStatus, MessageAck, MessageFromDevice, TunnelError } from './events';
import { parse, type EventRunner } from './limits';
import { deviceMessage } from './schemas';

/**
 * Device sockets: the one live socket per device (claimed before the handshake is accepted,
 * so a hub is reachable from every process the moment its client sees `connect`), relay
 * from a device to its subscribers, and `device:status` when the socket connects or drops.
 */

export const DELIVERED: MessageAck = Object.freeze({ success: true, delivered: true });
export const NOT_DELIVERED: MessageAck = Object.freeze({ success: true, delivered: false });

export interface DeviceSockets {
  /** The device half of the handshake: its session, its room and its claim, before `connect`. */
  admit(socket: TunnelSocket, auth: Extract<Authenticated, { kind: 'device' }>): Promise<void>;
  /** The socket is connected (Socket.IO accepted it): what only its handshake needed is let go. */
  accepted(session: DeviceSession): void;
  /** `tunnel:message` from a device, in its turn. */
  onMessage(session: DeviceSession, args: readonly unknown[]): void;
  /** The socket closed (or its handshake failed): forget it, release the device, tell the subscribers. */
  left(session: DeviceSession): void;
  /** Ends a socket that lost its place: replaced by a newer one, or revoked. */
  end(session: DeviceSession, error: TunnelError): void;
  /** Another process claimed a device: a local socket with an older claim is replaced. */
  onNotice(notice: ClusterNotice): void;
  /** Whether the device's tunnel socket is connected, here or on any process. */
  connected(uuid: string): Maybe<boolean>;
  /** The same, with the order of that knowledge (`tunnelSeq` of `device:status`). */
  tunnel(uuid: string): Maybe<TunnelState>;
  /** Devices whose process died: this process's subscribers hear they are gone. */
  onGone(devices: readonly GoneDevice[]): void;
  /**
   * This process's own devices, claimed again and told to every subscriber under the new
   * claim (the others took this process for dead and told theirs the devices were gone, with a
   * `tunnelSeq` after the old claim); a device another process claimed meanwhile is let go.
   */
  reclaimHeld(): Promise<void>;
  /** The claims this process holds (written again after Redis restarts). */
  held(): Array<{ uuid: string; claim: DeviceClaim }>;
  sendStatus(uuid: string, status: DeviceStatus, localOnly: boolean): void;
}

export interface TunnelState {
  readonly connected: boolean;
  readonly claim: DeviceClaim;
}

/**
 * Orders what statuses say about a device's socket: claims grow with every connection (and
 * stay below 2^52: microseconds of Redis's clock), and a drop comes right after its claim.
 */
export function tunnelSeq(state: TunnelState): number {
  return state.claim * 2 + (state.connected ? 0 : 1);
}

const replaced = (): TunnelError => ({ code: 'SESSION_REPLACED', message: TUNNEL_MESSAGES.sessionReplaced });
const lostClaim = (): TunnelFailure => new TunnelFailure('SESSION_REPLACED', TUNNEL_MESSAGES.sessionReplaced);

export function createDeviceSockets(ctx: TunnelContext, runner: EventRunner): DeviceSockets {
  const { nsp, cluster, sessions } = ctx;
  /**
   * The `close` listener of each device socket still in its handshake: Socket.IO says nothing
   * of a socket whose client leaves before it is connected. Removed once connected.
   */
  const claiming = new Map<DeviceSession, () => void>();
  /** The handshake is over (accepted or refused): the listener, and what it holds, goes. */
  const unwatch = (session: DeviceSession): void => {
    const onClose = claiming.get(session);
    if (onClose === undefined) return;
    claiming.delete(session);
    session.socket.conn.removeListener('close', onClose);
  };

  const sendStatus = (uuid: string, status: DeviceStatus, localOnly: boolean): void => {
    (localOnly ? nsp.local : nsp).to(subscribersRoom(uuid)).emit('device:status', status);
  };

  /** The read model's device documents, the reads of one turn of the event loop made as one query. */
  const readDevice = ctx.readStore === undefined ? undefined : deviceByUuidGathered(ctx.readStore);

  /** The heartbeat presence as the REST API shows it (the read model), else as the device stream last said. */
  const presenceOf = async (uuid: string): Promise<{ isOnline: boolean; lastSeenAt: string | null }> => {
    const doc = readDevice === undefined ? null : await readDevice(uuid);
    if (doc !== null) return { isOnline: doc.isOnline, lastSeenAt: doc.lastSeenAt };
    const state = ctx.access.peek(uuid)?.state;
    return state?.status === 'active' ? { isOnline: state.isOnline, lastSeenAt: state.lastSeenAt } : { isOnline: false, lastSeenAt: null };
  };

  /** The device's tunnel socket connected or dropped: every subscriber, on every process, hears it with the presence. */
  const announceTunnel = (uuid: string, state: TunnelState, localOnly = false): void => {
    ctx.track(
      presenceOf(uuid).then((presence) =>
        sendStatus(uuid, { deviceUuid: uuid, ...presence, tunnelConnected: state.connected, tunnelSeq: tunnelSeq(state) }, localOnly),
      ),
      'device status',
    );
  };

  const release = (session: DeviceSession): void => {
    sessions.live.delete(session.uuid);
    if (session.claim !== null) {
      ctx.track(cluster.releaseDevice(session.uuid, session.claim), 'device release');
      cluster.announce({ kind: 'device-gone', uuid: session.uuid, claim: session.claim });
    }
    announceTunnel(session.uuid, { connected: false, claim: session.claim ?? 0 });
  };

  const end = (session: DeviceSession, error: TunnelError): void => {
    if (session.ended) return;
    session.ended = true;
    // Replaced: the newer socket holds the device, nothing changes for the subscribers.
    if (sessions.live.get(session.uuid) === session) {
      if (error.code === 'SESSION_REPLACED') sessions.live.delete(session.uuid);
      else release(session);
    }
    session.socket.emit('tunnel:error', error);
    session.socket.disconnect(true);
  };

  const left = (session: DeviceSession): void => {
    sessions.all.delete(session.socket.id);
    removeDeviceSession(sessions, session);
    if (sessions.live.get(session.uuid) === session) release(session);
  };

  /** The socket is gone (or was refused) before its session ended. */
  const abandoned = (session: DeviceSession): boolean => session.ended || session.socket.conn.readyState !== 'open';

  /**
   * The device's room is how another process's app reaches it (apps.ts, `relayToDevice`); in a
   * process alone (the in-memory adapter) nobody else does, and its own apps find the socket in
   * `sessions.live`: the room would cost every hub an entry in the adapter's rooms and in its
   * socket's, for nothing.
   */
  const withRoom = cluster.adapter !== undefined;

  /** Room and claim; a newer claim elsewhere or a client gone meanwhile refuses the handshake. */
  const claim = async (session: DeviceSession): Promise<void> => {
    const { uuid, socket } = session;
    if (withRoom) await socket.join(deviceRoom(uuid));
    await cluster.roomsReady();
    const mine = await cluster.claimDevice(uuid, socket.id);
    session.claim = mine;
    if (abandoned(session)) {
      await cluster.releaseDevice(uuid, mine);
      throw lostClaim();
    }
    // A newer connection elsewhere may have claimed the device while this one was claiming.
    if ((await cluster.remoteDevice(uuid)).claim > mine || abandoned(session)) {
      session.ended = true;
      throw lostClaim();
    }
    const previous = sessions.live.get(uuid);
    if (previous !== undefined && previous !== session) {
      if ((previous.claim ?? 0) > mine) {
        session.ended = true;
        throw lostClaim();
      }
      end(previous, replaced());
    }
    sessions.live.set(uuid, session);
    cluster.announce({ kind: 'device-connected', uuid, claim: mine });
    announceTunnel(uuid, { connected: true, claim: mine });
  };

  const relay = (session: DeviceSession, input: unknown): Maybe<MessageAck> => {
    // Counted before it is validated: an invalid message costs a point like any other.
    return andThen(runner.consume(session, 'message'), () => {
      const message = parse(deviceMessage, input);
      const out: MessageFromDevice = {
        id: message.id ?? randomUUID(),
        deviceUuid: session.uuid,
        from: 'device',
        ...(message.replyTo !== undefined ? { replyTo: message.replyTo } : {}),
        type: message.type,
        payload: message.payload ?? null,
        sentAt: ctx.now(),
      };
      const room = message.to !== undefined ? userSubscribersRoom(session.uuid, message.to) : subscribersRoom(session.uuid);
      nsp.to(room).emit('tunnel:message', out);
      ctx.onRelayed?.('to_apps');
      return DELIVERED;
    });
  };

  const failedMessage = (): MessageAck => ({ success: false, delivered: false });

  return {
    async admit(socket, auth) {
      const session = deviceSession(socket, auth);
      // A deletion or a new token generation the live subscription applied during the handshake.
      const latest = ctx.access.peek(session.uuid);
      if (latest !== undefined && (latest.state.status !== 'active' || latest.state.gen !== session.gen)) {
        throw new UnauthorizedError(TOKEN_MESSAGES.revoked);
      }
      addDeviceSession(sessions, session);
      // Socket.IO says nothing of a socket whose client leaves before the connection is
      // accepted, nor takes a refused one out of the rooms it joined: both are done here.
      const abandon = (): void => {
        left(session);
        if (withRoom) void socket.leave(deviceRoom(session.uuid));
      };
      const onClose = (): void => {
        claiming.delete(session);
        if (!socket.connected) abandon();
      };
      socket.conn.once('close', onClose);
      claiming.set(session, onClose);
      try {
        await claim(session);
      } catch (error) {
        unwatch(session);
        abandon();
        throw error;
      }
      socket.data.device = session;
    },
    // Connected: its `disconnect` says when it leaves, and its session (in `sessions.all`) who it is.
    accepted(session) {
      unwatch(session);
      session.socket.data = CONNECTED_DEVICE_DATA;
    },
    onMessage: (session, args) => runner.run(session, args, failedMessage, (input) => relay(session, input)),
    left,
    end,
    onNotice(notice) {
      if (notice.kind !== 'device-connected') return;
      const local = sessions.live.get(notice.uuid);
      if (local !== undefined && local.claim !== null && local.claim < notice.claim) end(local, replaced());
    },
    connected: (uuid) => sessions.live.has(uuid) || andThen(cluster.remoteDevice(uuid), (remote) => remote.connected),
    tunnel: (uuid) => {
      const local = sessions.live.get(uuid);
      if (local !== undefined && local.claim !== null) return { connected: true, claim: local.claim };
      return andThen(cluster.remoteDevice(uuid), (remote) => ({ connected: remote.connected, claim: remote.claim }));
    },
    onGone(gone) {
      for (const device of gone) {
        // Held here now under a newer claim, or nobody here listens: nothing to tell.
        if (sessions.live.has(device.uuid) || !sessions.subscribers.has(device.uuid)) continue;
        announceTunnel(device.uuid, { connected: false, claim: device.claim }, true);
      }
    },
    async reclaimHeld() {
      for (const session of [...sessions.live.values()]) {
        const { uuid } = session;
        if (session.claim === null || session.ended) continue;
        // Claimed elsewhere while this process was taken for dead (its notice went unheard).
        if ((await cluster.remoteDevice(uuid)).claim > session.claim) {
          end(session, replaced());
          continue;
        }
        const mine = await cluster.claimDevice(uuid, session.socket.id);
        if (sessions.live.get(uuid) !== session || abandoned(session)) {
          await cluster.releaseDevice(uuid, mine);
          continue;
        }
        session.claim = mine;
        cluster.announce({ kind: 'device-connected', uuid, claim: mine });
        announceTunnel(uuid, { connected: true, claim: mine });
      }
    },
    held: () => [...sessions.live.values()].flatMap((s) => (s.claim !== null ? [{ uuid: s.uuid, claim: s.claim }] : [])),
    sendStatus,
  };
}
