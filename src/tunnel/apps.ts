import { randomUUID } from 'node:crypto';
import { activeRole, can, type DeviceState } from '../domain/device';
import { andThen, deviceRoom, subscribersRoom, userSubscribersRoom, type AppSession, type Maybe, type TunnelContext } from './context';
import { DELIVERED, NOT_DELIVERED, type DeviceSockets } from './devices';
import { TunnelFailure, TUNNEL_MESSAGES } from './errors';
import type { MessageAck, MessageToDevice, SubscribeAck, TunnelError, UnsubscribeAck } from './events';
import { parse, type EventRunner } from './limits';
import { appMessage, subscribeRequest, type AppMessageInput } from './schemas';

/**
 * App sockets (a user's access token): subscribe to devices they are linked to,
 * unsubscribe, and send messages to a device (Control: owner or editor).
 */

export interface AppSockets {
  onSubscribe(session: AppSession, args: readonly unknown[]): void;
  onUnsubscribe(session: AppSession, args: readonly unknown[]): void;
  onMessage(session: AppSession, args: readonly unknown[]): void;
  /** Ends one subscription (unsubscribe, unlink, deletion). */
  removeSubscription(session: AppSession, uuid: string): void;
  /** The socket closed: every subscription ends. */
  left(session: AppSession): void;
}

const notFound = (): TunnelFailure => new TunnelFailure('NOT_FOUND', TUNNEL_MESSAGES.deviceNotFound);

/** Why the user may not control the device, or null when they may. */
function controlRefusal(state: DeviceState, userId: string): TunnelFailure | null {
  const role = activeRole(state, userId);
  if (role === null) return notFound();
  return can(role, 'Control') ? null : new TunnelFailure('FORBIDDEN', TUNNEL_MESSAGES.forbidden);
}

export function createAppSockets(ctx: TunnelContext, runner: EventRunner, devices: Pick<DeviceSockets, 'connected'>): AppSockets {
  const { access, cluster, sessions, nsp } = ctx;

  const removeSubscription = (session: AppSession, uuid: string): void => {
    if (!session.subscriptions.delete(uuid)) return;
    const set = sessions.subscribers.get(uuid);
    set?.delete(session);
    if (set?.size === 0) sessions.subscribers.delete(uuid);
    if (session.socket.connected) {
      void session.socket.leave(subscribersRoom(uuid));
      void session.socket.leave(userSubscribersRoom(uuid, session.userId));
    }
  };

  /** Still connected, and its session still the socket's (not ended by `left`). */
  const isOpen = (session: AppSession): boolean => session.socket.connected && sessions.all.get(session.socket.id) === session;

  const subscribe = async (session: AppSession, input: unknown): Promise<SubscribeAck> => {
    // Counted before it is validated: an invalid subscribe costs a point like any other.
    await runner.consume(session, 'subscribe');
    const { deviceUuid: uuid } = parse(subscribeRequest, input);
    const folded = await access.fresh(uuid);
    if (activeRole(folded.state, session.userId) === null) throw notFound();
    if (!session.socket.connected) return { success: false, error: notFound().toPayload() };
    const known = session.subscriptions.get(uuid);
    if (known === undefined) {
      const rooms = [subscribersRoom(uuid), userSubscribersRoom(uuid, session.userId)];
      await session.socket.join(rooms);
      await cluster.roomsReady();
      // The socket may have closed while this waited for Redis: its `left` has run already, so
      // nothing would ever take this subscription (or the rooms joined after the close) away.
      if (!isOpen(session)) {
        for (const room of rooms) void session.socket.leave(room);
        return { success: false, error: notFound().toPayload() };
      }
      session.subscriptions.set(uuid, folded.revision);
      let set = sessions.subscribers.get(uuid);
      if (set === undefined) sessions.subscribers.set(uuid, (set = new Set()));
      set.add(session);
      // An unlink the live subscription applied while this was joining.
      const latest = access.peek(uuid);
      if (latest !== undefined && activeRole(latest.state, session.userId) === null) {
        removeSubscription(session, uuid);
        throw notFound();
      }
    } else if (folded.revision > known) {
      session.subscriptions.set(uuid, folded.revision);
    }
    const isOnline = folded.state.status === 'active' && folded.state.isOnline;
    return { success: true, deviceUuid: uuid, isOnline, tunnelConnected: await devices.connected(uuid) };
  };

  const unsubscribe = (session: AppSession, input: unknown): UnsubscribeAck => {
    const { deviceUuid: uuid } = parse(subscribeRequest, input);
    removeSubscription(session, uuid);
    return { success: true, deviceUuid: uuid };
  };

  const relayToDevice = (session: AppSession, message: AppMessageInput): Maybe<MessageAck> => {
    const uuid = message.deviceUuid;
    const out: MessageToDevice = {
      id: message.id ?? randomUUID(),
      deviceUuid: uuid,
      from: { userId: session.userId },
      type: message.type,
      payload: message.payload ?? null,
      sentAt: ctx.now(),
    };
    const local = sessions.live.get(uuid);
    if (local !== undefined) {
      local.socket.emit('tunnel:message', out);
      ctx.onRelayed?.('to_device');
      return DELIVERED;
    }
    return andThen(cluster.remoteDevice(uuid), (remote) => {
      if (!remote.connected) return NOT_DELIVERED;
      nsp.to(deviceRoom(uuid)).emit('tunnel:message', out);
      ctx.onRelayed?.('to_device');
      return DELIVERED;
    });
  };

  /** The hot path: answered from memory unless the cache cannot tell. */
  const authorizeAndRelay = (session: AppSession, message: AppMessageInput): Maybe<MessageAck> => {
    const uuid = message.deviceUuid;
    const cached = access.peek(uuid);
    const refusal = cached === undefined ? notFound() : controlRefusal(cached.state, session.userId);
    if (refusal === null) return relayToDevice(session, message);
    // A refusal from the cache may predate a link just made through another process.
    if (cached !== undefined && access.verifiedRecently(uuid, ctx.options.denialRecheckMs)) throw refusal;
    return access.fresh(uuid).then((folded) => {
      const checked = controlRefusal(folded.state, session.userId);
      if (checked !== null) throw checked;
      return relayToDevice(session, message);
    });
  };

  const send = (session: AppSession, input: unknown): Maybe<MessageAck> => {
    // Counted before it is validated: an invalid message costs a point like any other.
    return andThen(runner.consume(session, 'message'), () => authorizeAndRelay(session, parse(appMessage, input)));
  };

  const failedMessage = (): MessageAck => ({ success: false, delivered: false });
  const failedSubscribe = (error: TunnelError): SubscribeAck => ({ success: false, error });

  return {
    onSubscribe: (session, args) => runner.run(session, args, failedSubscribe, (input) => subscribe(session, input)),
    onUnsubscribe: (session, args) => runner.run(session, args, failedSubscribe, (input) => unsubscribe(session, input)),
    onMessage: (session, args) => runner.run(session, args, failedMessage, (input) => send(session, input)),
    removeSubscription,
    left(session) {
      sessions.all.delete(session.socket.id);
      for (const uuid of [...session.subscriptions.keys()]) removeSubscription(session, uuid);
    },
  };
}
