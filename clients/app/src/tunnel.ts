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
  /**
   * The subscriptions the client made by itself, once every one of them was answered: those
   * made again after a reconnect, or those `subscribe()` was refused `RATE_LIMITED` for, made
   * again after `retryAfter` (as often as the service refuses them so). `deviceUuids` are the
   * devices the service accepted; a device refused otherwise (link gone) is dropped.
   */
  | { readonly type: 'resubscribed'; readonly deviceUuids: readonly string[] }
  /** A refused handshake, or a `tunnel:error` `RATE_LIMITED` (a subscribe or a message refused). */
  | { readonly type: 'refused'; readonly code: string; readonly retryAfter: number }
  /**
   * Every `tunnel:error`. An `ACCESS_REVOKED` naming a device (its message does: the user lost
   * access to it, and the service ended the subscription) has dropped that device from
   * `subscribed()` and from the devices subscribed again after a reconnect by the time it is
   * reported.
   */
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

/** Subscriptions the client makes by itself, reported (`resubscribed`) once all are answered. */
interface Round {
  readonly devices: readonly string[];
  /** Those not answered yet (a device refused `RATE_LIMITED` stays until it is answered otherwise). */
  readonly open: Set<string>;
  readonly epoch: number;
}

/**
 * The tunnel as an app sees it: typed messages, `device:status` as a callback, and the
 * subscriptions it asked for kept across reconnects (made again after each one). The
 * client owns reconnection (socket.io-client's own ignores `retryAfter`): capped
 * exponential backoff with full jitter, `retryAfter` obeyed, one token refresh when the
 * handshake finds the access token expired.
 *
 * Subscribes and messages are limited by separate tiers (decisions §6): a subscribe refused
 * `RATE_LIMITED` holds back the subscribes until its `retryAfter` (plus up to a second) has
 * passed, and the client then makes the refused ones again; a message refused so holds back
 * the messages. Each device is subscribed once per connection: a `subscribe()` meeting one
 * under way (say the connect handler's, for a `subscribe()` made before the connection)
 * shares its answer, unless an `unsubscribe()` of the device came after it (the service
 * handles a socket's events in order, so that answer is undone): it then sends its own.
 *
 * A subscription the service ends (`tunnel:error` `ACCESS_REVOKED` naming the device: its
 * link was removed, or it was deleted) is dropped as an `unsubscribe()` would drop it.
 * `close()` ends every call still waiting: for a connection or out a rate-limit pause.
 */
export class AppTunnel {
  private readonly socket: AppSocket;
  /** The devices the app subscribed to (until `unsubscribe()`, a refusal other than `RATE_LIMITED`, or an `ACCESS_REVOKED` naming them). */
  private readonly wanted = new Set<string>();
  /** Those whose last subscribe the service accepted, with the epoch of the connection that did. */
  private readonly accepted = new Map<string, number>();
  /** This connection's subscribes waiting for their ack. */
  private readonly inFlight = new Map<string, Promise<SubscribeAck>>();
  /** Subscribes an `unsubscribe()` of their device was sent after: their answers change nothing. */
  private readonly undone = new WeakSet<Promise<SubscribeAck>>();
  /** Devices to subscribe (again) once subscribes may be sent, with the round they belong to. */
  private readonly deferred = new Map<string, Round | null>();
  /** Bumped at every connect and disconnect: an answer from an earlier connection changes nothing. */
  private epoch = 0;
  private subscribesPausedUntil = 0;
  private messagesPausedUntil = 0;
  private cancelFlush: (() => void) | null = null;
  /** The last `tunnel:error`: the service sends it just before the ack of the event it refuses. */
  private lastError: TunnelError | null = null;
  private readonly connectWaiters = new Set<{ resolve: () => void; reject: (error: Error) => void }>();
  /** Calls waiting out a rate-limit pause: each function wakes one (and cancels its timer). */
  private readonly sleepers = new Set<() => void>();
  private readonly statusListeners = new Set<(status: DeviceStatus) => void>();
  private readonly messageListeners = new Set<(message: MessageFromDevice) => void>();
  private readonly eventListeners = new Set<(event: AppTunnelEvent) => void>();
  private readonly random: () => number;
  private attempt = 0;
  private refreshedForHandshake = false;
  private refreshOnDisconnect = false;
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
    this.socket.on('connect', () => this.onConnect());
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

  /**
   * Subscribes once connected (waiting out a subscribe `RATE_LIMITED` first) and again after
   * every reconnect; answers with the ack of this connection's subscribe of the device (one
   * already under way is shared, not sent twice, unless the device was unsubscribed since it
   * was sent). Refused `RATE_LIMITED`, the device is kept and subscribed again by the client
   * after `retryAfter` (`resubscribed` tells when); refused otherwise, it is dropped. Rejects
   * when the tunnel is closed before the subscribe is sent.
   */
  async subscribe(deviceUuid: string): Promise<SubscribeAck> {
    this.wanted.add(deviceUuid);
    await this.firstConnect;
    for (;;) {
      if (this.closed) throw new Error('The tunnel is closed');
      const underWay = this.inFlight.get(deviceUuid);
      if (underWay !== undefined) return underWay;
      if (!this.wanted.has(deviceUuid)) throw new Error(`${deviceUuid} was unsubscribed before its subscribe was sent`);
      if (!this.socket.connected) {
        await this.nextConnection();
        continue;
      }
      const wait = this.subscribesPausedUntil - this.client.timers.now();
      if (wait <= 0) return this.subscribeNow(deviceUuid);
      await this.sleep(wait);
    }
  }

  /**
   * Drops the device (not subscribed again after a reconnect). A subscribe of it under way
   * is undone by this: a later `subscribe()` sends its own.
   */
  async unsubscribe(deviceUuid: string): Promise<void> {
    this.drop(deviceUuid);
    const underWay = this.inFlight.get(deviceUuid);
    if (underWay !== undefined) {
      this.undone.add(underWay);
      this.inFlight.delete(deviceUuid);
    }
    if (this.socket.connected) await this.request('tunnel:unsubscribe', { deviceUuid });
  }

  /**
   * A message to a device (needs the Control permission); waits out a message `RATE_LIMITED`
   * first. Not connected (or closed meanwhile), it answers `{success: false, delivered: false}`.
   */
  async send(deviceUuid: string, type: string, payload: unknown, id?: string): Promise<MessageAck> {
    const wait = this.messagesPausedUntil - this.client.timers.now();
    if (wait > 0) await this.sleep(wait);
    if (this.closed || !this.socket.connected) return { success: false, delivered: false };
    const { ack, error } = await this.request<MessageAck>('tunnel:message', { deviceUuid, type, payload, ...(id !== undefined ? { id } : {}) });
    if (!ack.success && error?.code === 'RATE_LIMITED') {
      const seconds = error.retryAfter ?? DEFAULT_RETRY_AFTER;
      this.messagesPausedUntil = Math.max(this.messagesPausedUntil, this.client.timers.now() + seconds * 1000);
    }
    return ack;
  }

  /**
   * The devices subscribed: those whose last subscribe the service accepted (kept across
   * reconnects, as they are made again after each one). A device whose subscribe is under way,
   * or was refused and waits to be made again, is not among them.
   */
  subscribed(): string[] {
    return [...this.accepted.keys()];
  }

  close(): void {
    this.finish('closed', 'close() was called');
  }

  // -------------------------------------------------------------------------------------

  /**
   * Emits an event and waits for its ack, with the `tunnel:error` the service sent just before
   * it when it refused the event (the ack of a refused message does not say why). The ack
   * callback runs as its packet arrives, so no later `tunnel:error` is taken for it.
   */
  private request<T>(event: 'tunnel:subscribe' | 'tunnel:unsubscribe' | 'tunnel:message', payload: object): Promise<{ ack: T; error: TunnelError | null }> {
    type Emitter = { emit(event: string, payload: object, ack: (err: Error | null, response: T) => void): void };
    const emitter = this.socket.timeout(this.options.ackTimeoutMs ?? 10_000) as unknown as Emitter;
    return new Promise((resolve, reject) => {
      emitter.emit(event, payload, (err, response) => {
        if (err !== null) {
          reject(err);
          return;
        }
        const error = this.lastError;
        this.lastError = null;
        resolve({ ack: response, error });
      });
    });
  }

  /** Waits `ms`, or less when the tunnel is closed meanwhile. */
  private sleep(ms: number): Promise<void> {
    if (this.closed) return Promise.resolve();
    return new Promise<void>((resolve) => {
      let cancel: () => void = () => undefined;
      let woken = false;
      const wake = (): void => {
        if (woken) return;
        woken = true;
        this.sleepers.delete(wake);
        cancel();
        resolve();
      };
      this.sleepers.add(wake);
      const cancelTimer = this.client.timers.after(ms, wake);
      if (woken) return;
      cancel = cancelTimer;
    });
  }

  /** The device is no longer wanted nor subscribed, nor waiting to be subscribed again. */
  private drop(deviceUuid: string): void {
    this.wanted.delete(deviceUuid);
    this.accepted.delete(deviceUuid);
    const round = this.deferred.get(deviceUuid);
    this.deferred.delete(deviceUuid);
    if (round !== undefined && round !== null) this.settle(round, deviceUuid);
  }

  /** Resolves at the next connection (rejects when the tunnel is closed first). */
  private nextConnection(): Promise<void> {
    return new Promise((resolve, reject) => this.connectWaiters.add({ resolve, reject }));
  }

  /** Subscribes the device on this connection now; its answer is shared with `subscribe()` calls meanwhile. */
  private subscribeNow(deviceUuid: string, round: Round | null = this.deferred.get(deviceUuid) ?? null): Promise<SubscribeAck> {
    this.deferred.delete(deviceUuid);
    const epoch = this.epoch;
    const answer = this.request<SubscribeAck>('tunnel:subscribe', { deviceUuid }).then(({ ack }) => ack);
    this.inFlight.set(deviceUuid, answer);
    // Registered before any caller's handler: the state is up to date when the caller sees the ack.
    void answer.then(
      (ack) => this.answered(deviceUuid, ack, round, epoch, answer),
      () => this.answered(deviceUuid, null, round, epoch, answer),
    );
    return answer;
  }

  /** A subscribe answered (`null`: no ack in time, or the connection dropped first). */
  private answered(deviceUuid: string, ack: SubscribeAck | null, round: Round | null, epoch: number, answer: Promise<SubscribeAck>): void {
    if (this.inFlight.get(deviceUuid) === answer) this.inFlight.delete(deviceUuid);
    if (epoch !== this.epoch || this.closed) return; // that connection is gone: the next one subscribes again
    if (this.undone.has(answer)) {
      // An unsubscribe was sent after it: whatever it says, the service no longer has it.
      if (round !== null) this.settle(round, deviceUuid);
      return;
    }
    const wanted = this.wanted.has(deviceUuid);
    const acceptedHere = this.accepted.get(deviceUuid) === epoch;
    if (ack !== null && ack.success) {
      if (wanted) this.accepted.set(deviceUuid, epoch);
    } else if (ack !== null && ack.error.code !== 'RATE_LIMITED') {
      this.wanted.delete(deviceUuid);
      this.accepted.delete(deviceUuid);
    } else if (!acceptedHere) {
      // Refused RATE_LIMITED (made again after retryAfter), or not answered in time (made again
      // at the next connection): not subscribed until then.
      this.accepted.delete(deviceUuid);
      if (ack !== null && wanted) {
        this.defer(deviceUuid, round, ack.error.retryAfter ?? DEFAULT_RETRY_AFTER);
        return;
      }
    }
    if (round !== null) this.settle(round, deviceUuid);
  }

  /** Holds the subscribes back for `retryAfter` (plus up to a second) and the device for after it. */
  private defer(deviceUuid: string, round: Round | null, retryAfterSeconds: number): void {
    this.deferred.set(deviceUuid, round);
    const until = this.client.timers.now() + retryAfterDelay(retryAfterSeconds, this.random);
    this.subscribesPausedUntil = Math.max(this.subscribesPausedUntil, until);
    this.scheduleFlush();
  }

  private scheduleFlush(): void {
    this.cancelFlush?.();
    const wait = Math.max(0, this.subscribesPausedUntil - this.client.timers.now());
    this.cancelFlush = this.client.timers.after(wait, () => {
      this.cancelFlush = null;
      this.flush();
    });
  }

  /** Subscribes the deferred devices, once subscribes may be sent again. */
  private flush(): void {
    if (this.closed || !this.socket.connected || this.deferred.size === 0) return;
    if (this.subscribesPausedUntil > this.client.timers.now()) {
      this.scheduleFlush();
      return;
    }
    const devices = [...this.deferred];
    // Devices a subscribe() was refused for: made again by the client, reported together.
    const orphans = devices.filter(([, round]) => round === null).map(([deviceUuid]) => deviceUuid);
    const ownRound = orphans.length > 0 ? this.newRound(orphans) : null;
    for (const [deviceUuid, round] of devices) void this.subscribeNow(deviceUuid, round ?? ownRound).catch(() => undefined);
  }

  private newRound(devices: readonly string[]): Round {
    return { devices, open: new Set(devices), epoch: this.epoch };
  }

  /** One device of a round answered; the last one reports the round. */
  private settle(round: Round, deviceUuid: string): void {
    if (!round.open.delete(deviceUuid) || round.open.size > 0 || round.epoch !== this.epoch) return;
    this.emit({ type: 'resubscribed', deviceUuids: round.devices.filter((d) => this.accepted.has(d)) });
  }

  private emit(event: AppTunnelEvent): void {
    notify(this.eventListeners, event);
  }

  private finish(reason: 'closed' | 'session-ended', message: string): void {
    if (this.closed) return;
    this.closed = true;
    this.cancelRetry?.();
    this.cancelFlush?.();
    this.cancelFlush = null;
    this.socket.disconnect();
    this.settleFirst.reject(new Error(message));
    for (const waiter of this.connectWaiters) waiter.reject(new Error(message));
    this.connectWaiters.clear();
    for (const wake of [...this.sleepers]) wake();
    this.emit({ type: 'closed', reason, message });
  }

  private onConnect(): void {
    this.attempt = 0;
    this.refreshedForHandshake = false;
    this.newConnection();
    // Every device is subscribed again (after the subscribe pause, if one is still running).
    // Synchronously, before a subscribe() waiting for the connection resumes: it then finds
    // its device's subscribe under way and shares it.
    const devices = [...this.wanted];
    if (devices.length > 0) {
      const round = this.newRound(devices);
      for (const deviceUuid of devices) this.deferred.set(deviceUuid, round);
    }
    this.settleFirst.resolve();
    this.emit({ type: 'connected' });
    this.flush();
    for (const waiter of this.connectWaiters) waiter.resolve();
    this.connectWaiters.clear();
  }

  /** A connection began or ended: what was under way or deferred belonged to the one before. */
  private newConnection(): void {
    this.epoch++;
    this.inFlight.clear();
    this.deferred.clear();
    this.cancelFlush?.();
    this.cancelFlush = null;
    this.lastError = null;
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
    this.newConnection();
    this.emit({ type: 'disconnected', reason });
    if (reason === 'io client disconnect') return;
    if (this.refreshOnDisconnect) {
      this.refreshOnDisconnect = false;
      void this.refreshThen('token expired');
      return;
    }
    this.retry(reason);
  }

  /**
   * A `RATE_LIMITED` comes just before the ack of the event it refuses, which decides what is
   * held back: subscribes (the ack says `RATE_LIMITED`) or messages (`request`, `send`).
   */
  /**
   * `ACCESS_REVOKED` names in its message the device the service ended the subscription of
   * (one for the whole connection names none: the socket is closed, and the next handshake
   * is refused). A subscribe of it sent since, still unanswered, was handled after the
   * revocation: its answer decides.
   */
  private revoked(message: string): void {
    const text = message.toLowerCase();
    const known = new Set([...this.wanted, ...this.accepted.keys(), ...this.deferred.keys()]);
    for (const deviceUuid of known) {
      if (!text.includes(deviceUuid.toLowerCase())) continue;
      if (this.inFlight.has(deviceUuid)) this.accepted.delete(deviceUuid);
      else this.drop(deviceUuid);
    }
  }

  private onTunnelError(error: TunnelError): void {
    this.lastError = error;
    if (error.code === 'TOKEN_EXPIRED') this.refreshOnDisconnect = true;
    if (error.code === 'ACCESS_REVOKED') this.revoked(error.message);
    if (error.code === 'RATE_LIMITED') {
      this.emit({ type: 'refused', code: error.code, retryAfter: error.retryAfter ?? DEFAULT_RETRY_AFTER });
    }
    this.emit({ type: 'error', error });
  }
}
