/**
 * The hub's side of Home Hub Cloud, done right by default (docs/hub-protocol.md says the same
 * in words): heartbeats on a jittered interval; the device token renewed well before it
 * expires; the tunnel kept open, reconnecting after any drop with capped exponential backoff
 * and full jitter; every `retryAfter` of the service obeyed; a revoked device or a replaced
 * session reported once instead of fought.
 *
 *   const hub = new HubClient({ baseUrl, uuid, tokens: { load: () => readFile(path, 'utf8'), save: (t) => writeFile(path, t) } });
 *   hub.onMessage((message, reply) => reply({ type: `${message.type}.done`, payload: {} }));
 *   hub.on((event) => event.type === 'stopped' && console.error(event.reason));
 *   await hub.start();
 */
import { io, type ManagerOptions, type Socket, type SocketOptions } from 'socket.io-client';
import { TUNNEL_NAMESPACE, UNAUTHORIZED } from '@home-hub-cloud/tunnel-contract';
import type { DeviceMessage, DeviceToServerEvents, MessageAck, MessageToDevice, ServerToDeviceEvents, TunnelError } from '@home-hub-cloud/tunnel-contract';
import { backoffDelay, realTimers, retryAfterDelay, type BackoffOptions, type Timers } from './timers';
import { tokenTimes } from './token';
import type { HttpFetch } from './http';

export { backoffDelay, retryAfterDelay, realTimers, type BackoffOptions, type Timers } from './timers';
export { tokenTimes, type TokenTimes } from './token';
export { agentFetch, type AgentFetchOptions, type HttpFetch, type HttpRequestInit, type HttpResponse } from './http';

/** Where the hub keeps its device token between runs (a file, a secure element, ...). */
export interface TokenStore {
  load(): Promise<string | null> | string | null;
  save(token: string): Promise<void> | void;
}

/** Why the client stopped for good; anything but `stopped` needs a person (or the owner's app). */
export type StopReason =
  /** `stop()` was called. */
  | 'stopped'
  /** The store had no token. */
  | 'no-token'
  /** 401 `Token has been revoked`: the device was deleted, or its owner issued a newer token. */
  | 'revoked'
  /** 401 `Token has expired`: the hub was off longer than its token lives; the owner issues a new one. */
  | 'expired'
  /** Another instance of this hub connected with the same device: it keeps the tunnel. */
  | 'replaced'
  /** Refused again right after a renewal, or a token of another device (403). */
  | 'unauthorized';

export type HubEvent =
  | { readonly type: 'connected' }
  | { readonly type: 'disconnected'; readonly reason: string }
  | { readonly type: 'reconnecting'; readonly attempt: number; readonly delayMs: number; readonly cause: string }
  /** The service refused for now and said when to come back (handshake `rate_limited`, `tunnel:error RATE_LIMITED`, HTTP 429). */
  | { readonly type: 'refused'; readonly code: string; readonly retryAfter: number }
  | { readonly type: 'heartbeat'; readonly ok: boolean; readonly status: number }
  | { readonly type: 'renewed'; readonly expiresAt: number }
  | { readonly type: 'error'; readonly where: 'heartbeat' | 'renew' | 'tunnel' | 'handler'; readonly message: string }
  | { readonly type: 'stopped'; readonly reason: StopReason; readonly message: string };

/** What a reply carries; `replyTo` is filled in. */
export type Reply = Omit<DeviceMessage, 'replyTo'>;
export type MessageHandler = (message: MessageToDevice, reply: (answer: Reply) => Promise<MessageAck>) => void | Promise<void>;

type SocketFactory = (url: string, options: Partial<ManagerOptions & SocketOptions>) => Socket;

export interface HubClientOptions {
  /** The service, without `/api/v1` (e.g. `https://cloud.example.com`). */
  readonly baseUrl: string;
  readonly uuid: string;
  readonly tokens: TokenStore;
  /** Heartbeat cadence, ms (default 60000: well inside the service's 300 s offline deadline). */
  readonly heartbeatIntervalMs?: number;
  /** Each interval is spread by ± this fraction (default 0.1). */
  readonly heartbeatJitter?: number;
  /** The heartbeat's body (`ipAddress`, `metadata`); default none. */
  readonly heartbeatBody?: () => Record<string, unknown> | undefined;
  /** Renew at a random point between these fractions of the token's lifetime (default [0.5, 0.8]). */
  readonly renewBetween?: readonly [number, number];
  /** Tunnel reconnection (default 1 s doubling to 10 s, full jitter). */
  readonly reconnect?: BackoffOptions;
  /** Renewal retries (default 1 s doubling to 60 s, full jitter). */
  readonly renewRetry?: BackoffOptions;
  /** How long a request or an ack may take, ms (default 10000). */
  readonly requestTimeoutMs?: number;
  /**
   * How long one tunnel connection attempt may take, from the TCP connect to the handshake's
   * answer, ms (default 30000, as MQTT clients wait). After a crash the whole fleet is queued
   * at the service: an attempt given up early is thrown away work on both sides, and the retry
   * joins the back of the same queue.
   */
  readonly connectTimeoutMs?: number;
  readonly timers?: Timers;
  readonly random?: () => number;
  /** HTTP for heartbeats and renewals (default the global `fetch`; `agentFetch()` for many hubs in one process). */
  readonly fetch?: HttpFetch;
  /** The Socket.IO client (default `io` of `socket.io-client`). */
  readonly io?: SocketFactory;
}

type HubSocket = Socket<ServerToDeviceEvents, DeviceToServerEvents>;

interface HttpAnswer {
  readonly status: number;
  readonly body: Record<string, unknown> | null;
  readonly retryAfter: number | undefined;
}

/** Seconds the service asked to wait: the body's `retryAfter`, else `Retry-After`. */
function retryAfterOf(body: Record<string, unknown> | null, header: string | null): number | undefined {
  if (typeof body?.retryAfter === 'number') return body.retryAfter;
  const seconds = header === null ? NaN : Number(header);
  return Number.isFinite(seconds) ? seconds : undefined;
}

/** How long a tunnel connection attempt may take by default, ms (`connectTimeoutMs`). */
export const DEFAULT_CONNECT_TIMEOUT_MS = 30_000;

/** Without `retryAfter`, a `RATE_LIMITED` means 10 seconds (the contract). */
const DEFAULT_RETRY_AFTER = 10;

export class HubClient {
  private readonly timers: Timers;
  private readonly random: () => number;
  private readonly fetchImpl: HttpFetch;
  private readonly base: string;
  private token: string | null = null;
  private socket: HubSocket | null = null;
  private handler: MessageHandler | null = null;
  private readonly listeners = new Set<(event: HubEvent) => void>();
  private readonly cancels = new Set<() => void>();
  private cancelRenew: (() => void) | null = null;
  private renewing: Promise<boolean> | null = null;
  private attempt = 0;
  private renewedForHandshake = false;
  private renewOnDisconnect = false;
  private pausedUntil = 0;
  /** The last heartbeat did not reach the service: beat again as soon as the tunnel is back. */
  private heartbeatMissed = false;
  private cancelBeat: (() => void) | null = null;
  /** Gives up the tunnel connection attempt in flight (`connectTimeoutMs`). */
  private cancelAttempt: (() => void) | null = null;
  private halted: { reason: StopReason; message: string } | null = null;
  /** The service's clock minus this one, ms, from the `Date` of its answers: token times are the service's. */
  private skewMs = 0;
  private renewPoint: { token: string | null; fraction: number } | null = null;
  private readonly stoppedWith: Promise<{ reason: StopReason; message: string }>;
  private resolveStopped: (value: { reason: StopReason; message: string }) => void = () => undefined;

  constructor(private readonly options: HubClientOptions) {
    this.timers = options.timers ?? realTimers;
    this.random = options.random ?? Math.random;
    this.fetchImpl = options.fetch ?? ((input, init) => fetch(input, init));
    this.base = options.baseUrl.replace(/\/+$/, '');
    this.stoppedWith = new Promise((resolve) => (this.resolveStopped = resolve));
  }

  /** Every event, as it happens; returns the unsubscribe. */
  on(listener: (event: HubEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Messages from apps; `reply` answers with `replyTo` set to the message's id. */
  onMessage(handler: MessageHandler): void {
    this.handler = handler;
  }

  /** Resolves once the client stopped for good, with the reason. */
  stopped(): Promise<{ reason: StopReason; message: string }> {
    return this.stoppedWith;
  }

  get connected(): boolean {
    return this.socket?.connected === true;
  }

  /** The device token in use (the latest renewal). */
  get currentToken(): string | null {
    return this.token;
  }

  /** Loads the token, then heartbeats, schedules the renewal and opens the tunnel. */
  async start(): Promise<void> {
    const loaded = await this.options.tokens.load();
    if (this.halted !== null) return;
    if (loaded === null || loaded.length === 0) {
      this.halt('no-token', 'The token store has no device token');
      return;
    }
    this.token = loaded.trim();
    this.scheduleRenew();
    void this.heartbeat();
    this.openTunnel();
  }

  /** Stops everything: timers, heartbeats, the tunnel. */
  stop(): void {
    this.halt('stopped', 'stop() was called');
  }

  /** A message to the apps (all subscribed, or one user's with `to`); waits out a `RATE_LIMITED` first. */
  async send(message: DeviceMessage): Promise<MessageAck> {
    const wait = this.pausedUntil - this.timers.now();
    if (wait > 0) await this.sleep(wait);
    const socket = this.socket;
    if (socket === null || !socket.connected || this.halted !== null) return { success: false, delivered: false };
    try {
      return await socket.timeout(this.options.requestTimeoutMs ?? 10_000).emitWithAck('tunnel:message', message);
    } catch (error) {
      this.emit({ type: 'error', where: 'tunnel', message: error instanceof Error ? error.message : String(error) });
      return { success: false, delivered: false };
    }
  }

  /** Renews the device token now (one renewal at a time; callers share it). False when the client stopped instead. */
  renew(): Promise<boolean> {
    if (this.renewing === null) {
      this.renewing = this.renewLoop().finally(() => {
        this.renewing = null;
      });
    }
    return this.renewing;
  }

  // -------------------------------------------------------------------------------------

  private emit(event: HubEvent): void {
    for (const listener of [...this.listeners]) {
      try {
        listener(event);
      } catch {
        // a listener's failure is its own
      }
    }
  }

  private halt(reason: StopReason, message: string): void {
    if (this.halted !== null) return;
    this.halted = { reason, message };
    this.settleAttempt();
    this.cancelRenew?.();
    for (const cancel of [...this.cancels]) cancel();
    this.cancels.clear();
    const socket = this.socket;
    this.socket = null;
    socket?.removeAllListeners();
    socket?.disconnect();
    this.emit({ type: 'stopped', reason, message });
    this.resolveStopped(this.halted);
  }

  /** A timer that halt() cancels (resolving the wait). */
  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      if (this.halted !== null) return resolve();
      const done = (): void => {
        this.cancels.delete(cancel);
        resolve();
      };
      const stopTimer = this.timers.after(ms, done);
      const cancel = (): void => {
        stopTimer();
        resolve();
      };
      this.cancels.add(cancel);
    });
  }

  private later(ms: number, fire: () => void): () => void {
    // Nothing is armed once the client stopped (a timer would keep the process alive).
    if (this.halted !== null) return () => undefined;
    const stopTimer = this.timers.after(ms, () => {
      this.cancels.delete(cancel);
      fire();
    });
    const cancel = (): void => {
      stopTimer();
      this.cancels.delete(cancel);
    };
    this.cancels.add(cancel);
    return cancel;
  }

  private async request(path: string, body: Record<string, unknown> | undefined): Promise<HttpAnswer> {
    const res = await this.fetchImpl(`${this.base}/api/v1${path}`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${this.token ?? ''}`, ...(body !== undefined ? { 'Content-Type': 'application/json' } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      signal: AbortSignal.timeout(this.options.requestTimeoutMs ?? 10_000),
    });
    this.observeClock(res.headers.get('Date'));
    let parsed: Record<string, unknown> | null = null;
    try {
      parsed = (await res.json()) as Record<string, unknown>;
    } catch {
      parsed = null;
    }
    return { status: res.status, body: parsed, retryAfter: retryAfterOf(parsed, res.headers.get('Retry-After')) };
  }

  /** Learns the service's clock from an answer's `Date`; a renewal armed on a clock far off is armed again. */
  private observeClock(date: string | null): void {
    const serverMs = date === null ? NaN : Date.parse(date);
    if (!Number.isFinite(serverMs)) return;
    const skew = serverMs - this.timers.now();
    const moved = Math.abs(skew - this.skewMs) > 30_000;
    this.skewMs = skew;
    if (moved && this.cancelRenew !== null && this.renewing === null && this.halted === null) this.scheduleRenew();
  }

  // Heartbeats ---------------------------------------------------------------------------

  private nextBeatIn(): number {
    const interval = this.options.heartbeatIntervalMs ?? 60_000;
    const jitter = this.options.heartbeatJitter ?? 0.1;
    return Math.round(interval * (1 - jitter + 2 * jitter * this.random()));
  }

  private async heartbeat(afterRenewal = false): Promise<void> {
    if (this.halted !== null) return;
    let next = this.nextBeatIn();
    try {
      const answer = await this.request(`/devices/heartbeat/${this.options.uuid}`, this.options.heartbeatBody?.() ?? {});
      if (this.halted !== null) return;
      this.emit({ type: 'heartbeat', ok: answer.status === 200, status: answer.status });
      if (answer.status === 401) {
        // An expired or replaced token: renew once, then beat again at once.
        if (afterRenewal) return this.halt('unauthorized', `heartbeat refused after a renewal: ${String(answer.body?.message)}`);
        if (await this.renew()) return this.heartbeat(true);
        return;
      }
      this.heartbeatMissed = answer.status >= 500;
      if (answer.status === 403) return this.halt('unauthorized', 'The token belongs to another device');
      if (answer.status === 429) {
        const seconds = answer.retryAfter ?? DEFAULT_RETRY_AFTER;
        this.emit({ type: 'refused', code: 'RATE_LIMITED', retryAfter: seconds });
        next = retryAfterDelay(seconds, this.random);
      } else if (answer.status !== 200) {
        this.emit({ type: 'error', where: 'heartbeat', message: `heartbeat answered ${answer.status}` });
      }
    } catch (error) {
      if (this.halted !== null) return;
      this.heartbeatMissed = true;
      this.emit({ type: 'error', where: 'heartbeat', message: error instanceof Error ? error.message : String(error) });
    }
    this.cancelBeat?.();
    this.cancelBeat = this.later(next, () => void this.heartbeat());
  }

  // Renewal ------------------------------------------------------------------------------

  private scheduleRenew(): void {
    this.cancelRenew?.();
    this.cancelRenew = null;
    const times = this.token === null ? null : tokenTimes(this.token);
    if (times === null) {
      this.emit({ type: 'error', where: 'renew', message: 'the device token has no expiry: renewal not scheduled' });
      return;
    }
    // One draw per token: armed again on a new reading of the service's clock, it keeps its place.
    if (this.renewPoint?.token !== this.token) {
      const [from, to] = this.options.renewBetween ?? [0.5, 0.8];
      this.renewPoint = { token: this.token, fraction: from + (to - from) * this.random() };
    }
    const fraction = this.renewPoint.fraction;
    const at = (times.iat + fraction * (times.exp - times.iat)) * 1000;
    this.cancelRenew = this.later(Math.max(0, at - (this.timers.now() + this.skewMs)), () => void this.renew());
  }

  private async renewLoop(): Promise<boolean> {
    for (let attempt = 0; this.halted === null; attempt++) {
      let wait: number;
      try {
        const answer = await this.request(`/devices/auth/${this.options.uuid}/renew`, undefined);
        if (this.halted !== null) return false;
        if (answer.status === 201 && typeof answer.body?.token === 'string') {
          this.token = answer.body.token;
          await this.options.tokens.save(this.token);
          this.scheduleRenew();
          this.emit({ type: 'renewed', expiresAt: (tokenTimes(this.token)?.exp ?? 0) * 1000 });
          return true;
        }
        const message = typeof answer.body?.message === 'string' ? answer.body.message : `renew answered ${answer.status}`;
        if (answer.status === 401) {
          this.halt(message === 'Token has been revoked' ? 'revoked' : message === 'Token has expired' ? 'expired' : 'unauthorized', message);
          return false;
        }
        if (answer.status === 403 || answer.status === 404) {
          this.halt('unauthorized', message);
          return false;
        }
        if (answer.status === 429) {
          const seconds = answer.retryAfter ?? DEFAULT_RETRY_AFTER;
          this.emit({ type: 'refused', code: 'RATE_LIMITED', retryAfter: seconds });
          wait = retryAfterDelay(seconds, this.random);
        } else {
          this.emit({ type: 'error', where: 'renew', message });
          wait = backoffDelay(attempt, this.options.renewRetry ?? { baseMs: 1000, capMs: 60_000 }, this.random);
        }
      } catch (error) {
        if (this.halted !== null) return false;
        this.emit({ type: 'error', where: 'renew', message: error instanceof Error ? error.message : String(error) });
        wait = backoffDelay(attempt, this.options.renewRetry ?? { baseMs: 1000, capMs: 60_000 }, this.random);
      }
      await this.sleep(wait);
    }
    return false;
  }

  // The tunnel ---------------------------------------------------------------------------

  private openTunnel(): void {
    const factory: SocketFactory = this.options.io ?? io;
    const socket = factory(`${this.base}${TUNNEL_NAMESPACE}`, {
      // The latest token at every attempt.
      auth: (cb: (data: object) => void) => cb({ token: this.token }),
      transports: ['websocket'],
      // This client owns reconnection: socket.io-client's own ignores `retryAfter`.
      reconnection: false,
      forceNew: true,
      autoConnect: false,
      timeout: this.options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS,
    }) as HubSocket;
    this.socket = socket;

    socket.on('connect', () => {
      this.settleAttempt();
      this.attempt = 0;
      this.renewedForHandshake = false;
      this.emit({ type: 'connected' });
      // The service is back (the tunnel admitted this hub): the missed heartbeat now, not at the next interval.
      if (this.heartbeatMissed) {
        this.heartbeatMissed = false;
        this.cancelBeat?.();
        void this.heartbeat();
      }
    });
    socket.on('connect_error', (error: Error & { data?: unknown }) => {
      this.settleAttempt();
      void this.onRefused(error);
    });
    socket.on('disconnect', (reason: string) => {
      this.settleAttempt();
      if (this.halted !== null) return;
      this.emit({ type: 'disconnected', reason });
      if (reason === 'io client disconnect') return;
      if (this.renewOnDisconnect) {
        this.renewOnDisconnect = false;
        void this.renew().then((ok) => ok && this.reconnect('token expired', 0));
        return;
      }
      this.reconnect(reason);
    });
    socket.on('tunnel:error', (error: TunnelError) => {
      switch (error.code) {
        case 'SESSION_REPLACED':
          this.halt('replaced', error.message);
          return;
        case 'TOKEN_EXPIRED':
          this.renewOnDisconnect = true;
          return;
        case 'RATE_LIMITED': {
          const seconds = error.retryAfter ?? DEFAULT_RETRY_AFTER;
          this.pausedUntil = Math.max(this.pausedUntil, this.timers.now() + seconds * 1000);
          this.emit({ type: 'refused', code: error.code, retryAfter: seconds });
          return;
        }
        default:
          this.emit({ type: 'error', where: 'tunnel', message: `${error.code}: ${error.message}` });
      }
    });
    socket.on('tunnel:message', (message: MessageToDevice) => void this.deliver(message));
    this.connectAttempt(socket);
  }

  /**
   * One connection attempt, given up after `connectTimeoutMs` from its start: Socket.IO's own
   * `timeout` covers the transport's opening only, and a handshake the service accepted the
   * connection for but never answered would otherwise wait for ever.
   */
  private connectAttempt(socket: HubSocket): void {
    this.settleAttempt();
    if (this.halted !== null) return;
    // Real time, as Socket.IO's own `timeout`: it bounds the network's answer, not the protocol's schedule.
    this.cancelAttempt = realTimers.after(this.options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS, () => {
      this.cancelAttempt = null;
      if (this.halted !== null || this.socket !== socket || socket.connected) return;
      // Not connected: no `disconnect` follows, and the next attempt opens a new transport.
      socket.disconnect();
      this.reconnect('timeout');
    });
    socket.connect();
  }

  private settleAttempt(): void {
    this.cancelAttempt?.();
    this.cancelAttempt = null;
  }

  private async deliver(message: MessageToDevice): Promise<void> {
    const handler = this.handler;
    if (handler === null) return;
    try {
      await handler(message, (answer) => this.send({ ...answer, replyTo: message.id }));
    } catch (error) {
      this.emit({ type: 'error', where: 'handler', message: error instanceof Error ? error.message : String(error) });
    }
  }

  private reconnect(cause: string, delayMs?: number): void {
    if (this.halted !== null || this.socket === null) return;
    const attempt = this.attempt++;
    const delay = delayMs ?? backoffDelay(attempt, this.options.reconnect ?? {}, this.random);
    this.emit({ type: 'reconnecting', attempt, delayMs: delay, cause });
    const socket = this.socket;
    this.later(delay, () => {
      if (this.halted === null && this.socket === socket && !socket.connected) this.connectAttempt(socket);
    });
  }

  private async onRefused(error: Error & { data?: unknown }): Promise<void> {
    if (this.halted !== null) return;
    const data = (typeof error.data === 'object' && error.data !== null ? error.data : {}) as { retryAfter?: unknown };
    if (error.message === UNAUTHORIZED) {
      // Once: a renewal, then straight back. Refused again: something a retry cannot fix.
      if (this.renewedForHandshake) {
        this.halt('unauthorized', 'The tunnel refused the device token right after a renewal');
        return;
      }
      this.renewedForHandshake = true;
      if (await this.renew()) this.reconnect(UNAUTHORIZED, 0);
      return;
    }
    if (typeof data.retryAfter === 'number') {
      this.emit({ type: 'refused', code: error.message, retryAfter: data.retryAfter });
      this.reconnect(error.message, retryAfterDelay(data.retryAfter, this.random));
      return;
    }
    this.reconnect(error.message);
  }
}
