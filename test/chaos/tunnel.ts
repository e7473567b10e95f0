import { randomUUID } from 'node:crypto';
import { io, type Socket } from 'socket.io-client';
import type { MessageAck, MessageFromDevice, MessageToDevice, SubscribeAck } from '../../src/tunnel/events';

/**
 * Hubs and apps talking through the tunnel, as real clients do: socket.io clients that
 * reconnect by themselves after a crash, an app that subscribes again on every connect, and
 * a hub that answers every message. In distributed mode the app and its hub talk to
 * different API processes, so every relay crosses Redis.
 */

export interface TunnelPair {
  readonly deviceUuid: string;
  readonly app: Socket;
  readonly hub: Socket;
  /** Messages relayed (acknowledged delivered) and answers that came back. */
  relayed: number;
  answered: number;
  readonly replies: Set<string>;
  /** When the hub's socket was connected, as its client saw it (`to` is +∞ while it is). */
  readonly hubConnected: Array<{ from: number; to: number }>;
  /** Every message's ack, with when it was sent and answered. */
  readonly acks: Array<{ readonly sentAt: number; readonly ackedAt: number; readonly delivered: boolean }>;
}

function open(baseUrl: string, token: string): Socket {
  return io(`${baseUrl}/tunnel`, {
    auth: { token },
    transports: ['websocket'],
    reconnection: true,
    reconnectionDelay: 200,
    reconnectionDelayMax: 1000,
    timeout: 5000,
  });
}

export function openPair(appUrl: string, hubUrl: string, accessToken: string, deviceToken: string, deviceUuid: string): TunnelPair {
  const app = open(appUrl, accessToken);
  const hub = open(hubUrl, deviceToken);
  const pair: TunnelPair = { deviceUuid, app, hub, relayed: 0, answered: 0, replies: new Set(), hubConnected: [], acks: [] };
  hub.on('connect', () => pair.hubConnected.push({ from: Date.now(), to: Number.POSITIVE_INFINITY }));
  hub.on('disconnect', () => {
    const last = pair.hubConnected[pair.hubConnected.length - 1];
    if (last !== undefined && last.to === Number.POSITIVE_INFINITY) last.to = Date.now();
  });
  app.on('connect', () => {
    app.timeout(5000).emit('tunnel:subscribe', { deviceUuid }, () => undefined);
  });
  app.on('tunnel:message', (message: MessageFromDevice) => {
    if (message.replyTo !== undefined) pair.replies.add(message.replyTo);
  });
  hub.on('tunnel:message', (message: MessageToDevice) => {
    hub.emit('tunnel:message', { replyTo: message.id, type: 'pong', payload: message.payload });
  });
  return pair;
}

async function waitFor(condition: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (condition()) return true;
    await new Promise((r) => setTimeout(r, 25));
  }
  return condition();
}

/**
 * One message from the app to its hub and the hub's answer back; whether both arrived. Sent
 * whether or not the hub is connected (an app cannot know): its ack is checked against the
 * hub's socket (watchers.ts).
 */
export async function ping(pair: TunnelPair, waitMs = 2000): Promise<boolean> {
  if (!pair.app.connected) return false;
  const id = randomUUID();
  let ack: MessageAck;
  const sentAt = Date.now();
  try {
    ack = (await pair.app.timeout(waitMs).emitWithAck('tunnel:message', { deviceUuid: pair.deviceUuid, id, type: 'ping', payload: { id } })) as MessageAck;
  } catch {
    return false;
  }
  pair.acks.push({ sentAt, ackedAt: Date.now(), delivered: ack.delivered });
  if (!ack.delivered) return false;
  pair.relayed += 1;
  const answered = await waitFor(() => pair.replies.has(id), waitMs);
  if (answered) pair.answered += 1;
  return answered;
}

/** After the faults: both ends connected again, subscribed, and a message relayed both ways. */
export async function checkReconnected(pair: TunnelPair, timeoutMs: number): Promise<string | null> {
  if (!(await waitFor(() => pair.app.connected && pair.hub.connected, timeoutMs))) {
    return `not reconnected (app ${pair.app.connected ? 'connected' : 'disconnected'}, hub ${pair.hub.connected ? 'connected' : 'disconnected'})`;
  }
  for (let attempt = 0; attempt < 5; attempt++) {
    try {
      const ack = (await pair.app.timeout(5000).emitWithAck('tunnel:subscribe', { deviceUuid: pair.deviceUuid })) as SubscribeAck;
      if (ack.success && (await ping(pair, 5000))) return null;
    } catch {
      // no answer in time: try again
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
  return 'connected, but no message relayed both ways';
}

export function closePair(pair: TunnelPair): void {
  pair.app.disconnect();
  pair.hub.disconnect();
}
