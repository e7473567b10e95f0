import { randomUUID } from 'node:crypto';
import { io, type Socket } from 'socket.io-client';
import type { ClientToServerEvents, ServerToClientEvents } from '../../src/tunnel/events';
import { api, type createUser, type TestService } from './harness';

/** Real `socket.io-client` sockets on the tunnel, with every event they receive kept in order. */

export type TunnelClient = Socket<ServerToClientEvents, ClientToServerEvents>;

export interface Received {
  readonly event: string;
  readonly args: readonly unknown[];
}

export interface Probe {
  readonly socket: TunnelClient;
  /** Everything received so far, `disconnect` (with its reason) included. */
  readonly received: Received[];
  /** The first payload of `event` not handed out yet that matches; waits for it up to `timeoutMs`. */
  next<T = unknown>(event: string, where?: (payload: T) => boolean, timeoutMs?: number): Promise<T>;
  /** Payloads of `event` received so far. */
  all<T = unknown>(event: string): T[];
  close(): void;
}

const DEFAULT_WAIT_MS = 5000;

function probe(socket: TunnelClient): Probe {
  const received: Received[] = [];
  const taken = new Set<Received>();
  const waiters = new Set<() => void>();
  const push = (event: string, args: unknown[]): void => {
    received.push({ event, args });
    for (const wake of [...waiters]) wake();
  };
  socket.onAny((event: string, ...args: unknown[]) => push(event, args));
  socket.on('disconnect', (reason) => push('disconnect', [reason]));

  return {
    socket,
    received,
    next<T>(event: string, where: (payload: T) => boolean = () => true, timeoutMs = DEFAULT_WAIT_MS): Promise<T> {
      const find = (): Received | undefined => received.find((r) => r.event === event && !taken.has(r) && where(r.args[0] as T));
      return new Promise<T>((resolve, reject) => {
        const check = (): boolean => {
          const hit = find();
          if (hit === undefined) return false;
          taken.add(hit);
          resolve(hit.args[0] as T);
          return true;
        };
        if (check()) return;
        const timer = setTimeout(() => {
          waiters.delete(wake);
          reject(new Error(`no ${event} within ${timeoutMs} ms; received: ${JSON.stringify(received.map((r) => [r.event, r.args[0]]))}`));
        }, timeoutMs);
        const wake = (): void => {
          if (check()) {
            clearTimeout(timer);
            waiters.delete(wake);
          }
        };
        waiters.add(wake);
      });
    },
    all<T>(event: string): T[] {
      return received.filter((r) => r.event === event).map((r) => r.args[0] as T);
    },
    close: () => {
      socket.disconnect();
    },
  };
}

function open(baseUrl: string, auth: Record<string, unknown> | undefined, namespace = '/tunnel', headers?: Record<string, string>): TunnelClient {
  return io(`${baseUrl}${namespace}`, {
    ...(auth !== undefined ? { auth } : {}),
    ...(headers !== undefined ? { extraHeaders: headers } : {}),
    transports: ['websocket'],
    reconnection: false,
    forceNew: true,
    timeout: 5000,
  });
}

/** How one handshake ended: connected, or its connect_error's message and data. */
export interface HandshakeOutcome {
  readonly connected: boolean;
  readonly message?: string;
  readonly data?: { readonly retryAfter?: number; readonly message?: string };
}

/**
 * One handshake from client address `ip`, sent as X-Forwarded-For (the service must trust it:
 * TRUST_PROXY), then closed.
 */
export function handshakeFrom(target: Pick<TestService, 'baseUrl'>, ip: string, token: string): Promise<HandshakeOutcome> {
  const socket = open(target.baseUrl, { token }, '/tunnel', { 'X-Forwarded-For': ip });
  return new Promise<HandshakeOutcome>((resolve) => {
    socket.once('connect', () => resolve({ connected: true }));
    socket.once('connect_error', (error: Error & { data?: HandshakeOutcome['data'] }) =>
      resolve({ connected: false, message: error.message, ...(error.data !== undefined ? { data: error.data } : {}) }),
    );
  }).finally(() => socket.disconnect());
}

/** A connected socket; fails with the connect_error when refused. */
export async function connect(target: Pick<TestService, 'baseUrl'>, token: string): Promise<Probe> {
  const socket = open(target.baseUrl, { token });
  const p = probe(socket);
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', () => resolve());
    socket.once('connect_error', (error) => {
      socket.disconnect();
      reject(error);
    });
  });
  return p;
}

/** The connect_error of a handshake that must be refused. */
export async function refusal(
  target: Pick<TestService, 'baseUrl'>,
  auth: Record<string, unknown> | undefined,
  namespace?: string,
): Promise<Error & { data?: unknown }> {
  const socket = open(target.baseUrl, auth, namespace);
  try {
    return await new Promise<Error & { data?: unknown }>((resolve, reject) => {
      socket.once('connect', () => reject(new Error('the handshake was accepted')));
      socket.once('connect_error', (error) => resolve(error));
    });
  } finally {
    socket.disconnect();
  }
}

/** An emit with an ack, bounded. */
export function request<T>(p: Probe, event: 'tunnel:subscribe' | 'tunnel:unsubscribe' | 'tunnel:message', payload: unknown): Promise<T> {
  const emitter = p.socket.timeout(DEFAULT_WAIT_MS) as unknown as { emitWithAck(event: string, payload: unknown): Promise<T> };
  return emitter.emitWithAck(event, payload);
}

// ---------------------------------------------------------------------------------------
// Devices and links, through the HTTP API

type User = Awaited<ReturnType<typeof createUser>>;

export interface Hub {
  readonly id: string;
  readonly uuid: string;
}

export async function registerHub(service: TestService, owner: User): Promise<Hub> {
  const res = await api(service, 'POST', '/devices/register', {
    token: owner.accessToken,
    body: { uuid: randomUUID(), deviceId: `HUB-${randomUUID().slice(0, 8)}`, name: 'Hub' },
  });
  if (res.status !== 201) throw new Error(`register answered ${res.status}: ${JSON.stringify(res.body)}`);
  return res.body as Hub;
}

export async function linkUser(service: TestService, hub: Hub, owner: User, user: User, role: 'owner' | 'editor' | 'viewer'): Promise<void> {
  const res = await api(service, 'POST', `/devices/${hub.id}/link`, { token: owner.accessToken, body: { email: user.email, role } });
  if (res.status !== 201 && res.status !== 200) throw new Error(`link answered ${res.status}: ${JSON.stringify(res.body)}`);
}

export async function deviceToken(service: TestService, hub: Hub, owner: User): Promise<string> {
  const res = await api(service, 'POST', `/devices/auth/${hub.uuid}`, { token: owner.accessToken });
  if (res.status !== 201) throw new Error(`device auth answered ${res.status}: ${JSON.stringify(res.body)}`);
  return (res.body as { token: string }).token;
}

export async function unlinkUser(service: TestService, hub: Hub, by: User, userId: string): Promise<void> {
  const res = await api(service, 'DELETE', `/devices/${hub.id}/users/${userId}`, { token: by.accessToken });
  if (res.status !== 200) throw new Error(`unlink answered ${res.status}: ${JSON.stringify(res.body)}`);
}

export async function deleteHub(service: TestService, hub: Hub, owner: User): Promise<void> {
  const res = await api(service, 'DELETE', `/devices/${hub.id}`, { token: owner.accessToken });
  if (res.status !== 200) throw new Error(`delete answered ${res.status}: ${JSON.stringify(res.body)}`);
}

export async function heartbeat(service: TestService, hub: Hub, token: string): Promise<{ lastSeenAt: string }> {
  const res = await api(service, 'POST', `/devices/heartbeat/${hub.uuid}`, { token });
  if (res.status !== 200) throw new Error(`heartbeat answered ${res.status}: ${JSON.stringify(res.body)}`);
  return (res.body as { device: { lastSeenAt: string } }).device;
}
