import { io, type Socket } from 'socket.io-client';
import { TUNNEL_NAMESPACE, UNAUTHORIZED } from '@home-hub-cloud/tunnel-contract';
import type { AppToServerEvents, DeviceStatus, MessageAck, MessageFromDevice, ServerToAppEvents, SubscribeAck, TunnelError } from '@home-hub-cloud/tunnel-contract';
import { backoffDelay, retryAfterDelay, type BackoffOptions } from './timers';
import type { AppClient } from './index';

export interface AppTunnelOptions {
  /** Reconnection after a drop (default 1 s doubling to 10 s, full jitter). */
  readonly reconnect?: BackoffOptions;
  /** How long an ack may take, ms (default 10000). */
  readonly ackTimeoutMs?: number;
  readonly random?: () => number;
}

export type AppTunnelEvent =
  | { readonly type: 'connected' }
  | { readonly type: 'disconnected'; readonly reason: string }
  | { readonly type: 'reconnecting'; readonly attempt: number; readonly delayMs: number; readonly cause: string }
  | { readonly type: 'resubscribed'; readonly deviceUuids: readonly string[] }
  | { readonly type: 'refused'; readonly code: string; readonly retryAfter: number }
  | { readonly type: 'error'; readonly error: TunnelError }
  | { readonly type: 'closed'; readonly reason: 'closed' | 'session-ended'; readonly message: string };

type AppSocket = Socket<ServerToAppEvents, AppToServerEvents>;

/** Calls every listener; one that throws is its own failure, not the tunnel's (the others and the client carry on). */
function notify<T>(listeners: ReadonlySet<(value: T) => void>, value: T): void {
  for (const listener of [...listeners]) {
    try {
      listener(value);
    } catch {
      // the app's listener failed; nothing the tunnel can do for it
    }
  }
}

/** Without `retryAfter`, a `RATE_LIMITED` means 10 seconds (the contract). */
const DEFAULT_RETRY_AFTER = 10;

/**
 * The tunnel as an app sees it: typed messages, `device:status` as a callback, and the
 * subscriptions it asked for kept across reconnects (made again after each one). The
 * client owns reconnection (socket.io-client's own ignores `retryAfter`): capped
 * exponential backoff with full jitter, `retryAfter` obeyed, one token refresh when the
 * handshake finds the access token expired.
 */
export class AppTunnel {
  private readonly socket: AppSocket;
  private readonly subscriptions = new Set<string>();
  private readonly statusListeners = new Set<(status: DeviceStatus) => void>();
  private readonly messageListeners = new Set<(message: MessageFromDevice) => void>();
  private readonly eventListeners = new Set<(event: AppTunnelEvent) => void>();
  private readonly random: () => number;
  private attempt = 0;
  private refreshedForHandshake = false;
  private refreshOnDisconnect = false;
  private pausedUntil = 0;
  private closed = false;
  private cancelRetry: (() => void) | null = null;
  private firstConnect: Promise<void>;
  private settleFirst: { resolve: () => void; reject: (error: Error) => void } = { resolve: () => undefined, reject: () => undefined };

  constructor(
    private readonly client: AppClient,
    private readonly options: AppTunnelOptions,
  ) {
    this.random = options.random ?? Math.random;
    this.firstConnect = new Promise((resolve, reject) => (this.settleFirst = { resolve, reject }));
    this.firstConnect.catch(() => undefined);
    this.socket = io(`${client.baseUrl}${TUNNEL_NAMESPACE}`, {
      auth: (cb: (data: object) => void) => {
        this.client.accessToken().then(
          (token) => cb({ token }),
          () => cb({ token: '' }),
        );
      },
      transports: ['websocket'],
      reconnection: false,
      forceNew: true,
      autoConnect: false,
    }) as AppSocket;
    this.socket.on('connect', () => void this.onConnect());
    this.socket.on('connect_error', (error: Error & { data?: unknown }) => void this.onRefused(error));
    this.socket.on('disconnect', (reason: string) => this.onDisconnect(reason));
    this.socket.on('device:status', (status) => {
      notify(this.statusListeners, status);
    });
    this.socket.on('tunnel:message', (message) => {
      notify(this.messageListeners, message);
    });
    this.socket.on('tunnel:error', (error) => this.onTunnelError(error));
    this.socket.connect();
  }

  /** Resolves at the first connection (rejects when the session ended first). */
  connected(): Promise<void> {
    return this.firstConnect;
  }

  get isConnected(): boolean {
    return this.socket.connected;
  }

  onStatus(listener: (status: DeviceStatus) => void): () => void {
    this.statusListeners.add(listener);
    return () => this.statusListeners.delete(listener);
  }

  onMessage(listener: (message: MessageFromDevice) => void): () => void {
    this.messageListeners.add(listener);
    return () => this.messageListeners.delete(listener);
  }

  on(listener: (event: AppTunnelEvent) => void): () => void {
    this.eventListeners.add(listener);
    return () => this.eventListeners.delete(listener);
  }

  /** Subscribes now (when connected) and after every reconnect. */
  async subscribe(deviceUuid: string): Promise<SubscribeAck> {
    this.subscriptions.add(deviceUuid);
    await this.firstConnect;
    const ack = await this.emitWithAck<SubscribeAck>('tunnel:subscribe', { deviceUuid });
    if (!ack.success && ack.error.code !== 'RATE_LIMITED') this.subscriptions.delete(deviceUuid);
    return ack;
  }

  async unsubscribe(deviceUuid: string): Promise<void> {
    this.subscriptions.delete(deviceUuid);
    if (this.socket.connected) await this.emitWithAck('tunnel:unsubscribe', { deviceUuid });
  }

  /** A message to a device (needs the Control permission); waits out a `RATE_LIMITED` first. */
  async send(deviceUuid: string, type: string, payload: unknown, id?: string): Promise<MessageAck> {
    const wait = this.pausedUntil - this.client.timers.now();
    if (wait > 0) await new Promise<void>((resolve) => this.client.timers.after(wait, resolve));
    if (!this.socket.connected) return { success: false, delivered: false };
    return this.emitWithAck<MessageAck>('tunnel:message', { deviceUuid, type, payload, ...(id !== undefined ? { id } : {}) });
  }

  /** The device uuids kept subscribed. */
  subscribed(): string[] {
    return [...this.subscriptions];
  }

  close(): void {
    this.finish('closed', 'close() was called');
  }

  // -------------------------------------------------------------------------------------

  private emitWithAck<T>(event: 'tunnel:subscribe' | 'tunnel:unsubscribe' | 'tunnel:message', payload: object): Promise<T> {
    const emitter = this.socket.timeout(this.options.ackTimeoutMs ?? 10_000) as unknown as { emitWithAck(event: string, payload: object): Promise<T> };
    return emitter.emitWithAck(event, payload);
  }

  private emit(event: AppTunnelEvent): void {
    notify(this.eventListeners, event);
  }

  private finish(reason: 'closed' | 'session-ended', message: string): void {
    if (this.closed) return;
    this.closed = true;
    this.cancelRetry?.();
    this.socket.disconnect();
    this.settleFirst.reject(new Error(message));
    this.emit({ type: 'closed', reason, message });
  }

  private async onConnect(): Promise<void> {
    this.attempt = 0;
    this.refreshedForHandshake = false;
    this.settleFirst.resolve();
    this.emit({ type: 'connected' });
    const devices = [...this.subscriptions];
    if (devices.length === 0) return;
    const acks = await Promise.all(devices.map((deviceUuid) => this.emitWithAck<SubscribeAck>('tunnel:subscribe', { deviceUuid }).catch(() => null)));
    acks.forEach((ack, i) => {
      if (ack !== null && !ack.success && ack.error.code !== 'RATE_LIMITED') this.subscriptions.delete(devices[i] ?? '');
    });
    this.emit({ type: 'resubscribed', deviceUuids: devices.filter((d) => this.subscriptions.has(d)) });
  }

  private retry(cause: string, delayMs?: number): void {
    if (this.closed) return;
    const attempt = this.attempt++;
    const delay = delayMs ?? backoffDelay(attempt, this.options.reconnect ?? {}, this.random);
    this.emit({ type: 'reconnecting', attempt, delayMs: delay, cause });
    this.cancelRetry = this.client.timers.after(delay, () => {
      this.cancelRetry = null;
      if (!this.closed && !this.socket.connected) this.socket.connect();
    });
  }

  private async refreshThen(cause: string): Promise<void> {
    try {
      await this.client.refresh();
      this.retry(cause, 0);
    } catch (error) {
      if (error instanceof Error && error.name === 'SessionEndedError') this.finish('session-ended', error.message);
      else this.retry(cause);
    }
  }

  private async onRefused(error: Error & { data?: unknown }): Promise<void> {
    if (this.closed) return;
    const data = (typeof error.data === 'object' && error.data !== null ? error.data : {}) as { retryAfter?: unknown };
    if (error.message === UNAUTHORIZED) {
      if (this.refreshedForHandshake) {
        this.finish('session-ended', 'The tunnel refused the access token right after a refresh');
        return;
      }
      this.refreshedForHandshake = true;
      await this.refreshThen(UNAUTHORIZED);
      return;
    }
    if (typeof data.retryAfter === 'number') {
      this.emit({ type: 'refused', code: error.message, retryAfter: data.retryAfter });
      this.retry(error.message, retryAfterDelay(data.retryAfter, this.random));
      return;
    }
    this.retry(error.message);
  }

  private onDisconnect(reason: string): void {
    if (this.closed) return;
    this.emit({ type: 'disconnected', reason });
    if (reason === 'io client disconnect') return;
    if (this.refreshOnDisconnect) {
      this.refreshOnDisconnect = false;
      void this.refreshThen('token expired');
      return;
    }
    this.retry(reason);
  }

  private onTunnelError(error: TunnelError): void {
    if (error.code === 'TOKEN_EXPIRED') this.refreshOnDisconnect = true;
    if (error.code === 'RATE_LIMITED') {
      const seconds = error.retryAfter ?? DEFAULT_RETRY_AFTER;
      this.pausedUntil = Math.max(this.pausedUntil, this.client.timers.now() + seconds * 1000);
      this.emit({ type: 'refused', code: error.code, retryAfter: seconds });
    }
    this.emit({ type: 'error', error });
  }
}
