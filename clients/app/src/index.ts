/**
 * Home Hub Cloud for apps, in a browser or Node 20+:
 *
 *   const cloud = new AppClient({ baseUrl: 'https://cloud.example.com' });
 *   await cloud.login('ada@example.com', 'correct horse battery');
 *   const { data } = await cloud.api.GET('/devices', { params: { query: { limit: 20 } } });  // typed from the OpenAPI document
 *   const tunnel = cloud.tunnel();
 *   tunnel.onStatus((status) => render(status));
 *   await tunnel.subscribe(deviceUuid);                                                   // kept across reconnects
 *
 * A subscribe refused `RATE_LIMITED` is made again by the client after `retryAfter` (the
 * `resubscribed` event tells when); it holds back the subscribes only, as a message refused so
 * holds back the messages only (separate rate tiers).
 *
 * Every operation of the REST API is typed (`npm run generate:app-client` regenerates the
 * types from the service's document). The access token is attached to every request and
 * refreshed once, in a single flight, however many requests find it expired at the same
 * time: concurrent refreshes of one token would make the service revoke the whole session.
 */
import createClient, { type Client, type Middleware } from 'openapi-fetch';
import type { components, paths } from './openapi';
import { expiryOf, issuedAtOf, memorySessionStore, type Session, type SessionStore } from './session';
import { realTimers, type Timers } from './timers';
import { AppTunnel, type AppTunnelOptions } from './tunnel';

export type { components, operations, paths } from './openapi';
export { memorySessionStore, expiryOf, type Session, type SessionStore } from './session';
export { backoffDelay, retryAfterDelay, realTimers, type BackoffOptions, type Timers } from './timers';
export { AppTunnel, type AppTunnelEvent, type AppTunnelOptions } from './tunnel';
/** The tunnel's payloads the app sees (`onStatus`, `onMessage`, the acks, `tunnel:error`), from the tunnel contract. */
export type { DeviceStatus, MessageAck, MessageFromDevice, SubscribeAck, TunnelError } from '@home-hub-cloud/tunnel-contract';

export type LoginResult = components['schemas']['PostAuthLoginResponse201'];

/** The session ended: its refresh token was refused (logged out, revoked, expired). Log in again. */
export class SessionEndedError extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
    this.name = 'SessionEndedError';
  }
}

/** A request the service refused: its status, message and, for 429, the seconds to wait. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly retryAfter?: number,
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

export interface AppClientOptions {
  /** The service, without `/api/v1`. */
  readonly baseUrl: string;
  /** Where the session is kept (default: in memory). */
  readonly session?: SessionStore;
  /** Refresh an access token this many seconds before its `exp` (default 30). */
  readonly refreshAheadSeconds?: number;
  readonly fetch?: typeof fetch;
  readonly timers?: Timers;
  /** Told when the session ended (a refresh was refused). */
  readonly onSessionEnded?: (error: SessionEndedError) => void;
}

const NO_AUTH_PATHS = new Set(['/auth/login', '/auth/refresh', '/auth/password-reset/request', '/auth/password-reset/confirm', '/auth/sync-customer', '/health', '/health/ready']);

export class AppClient {
  /** Every operation of the REST API, typed: `api.GET('/devices/{id}', { params: { path: { id } } })`. */
  readonly api: Client<paths>;
  readonly baseUrl: string;
  readonly timers: Timers;
  private readonly store: SessionStore;
  private kept: Session | null | undefined = undefined;
  private refreshing: Promise<Session> | null = null;
  private readonly fetchImpl: typeof fetch;
  /** The service's clock minus this one, ms, learnt from the `iat` of the tokens it just issued: `exp` is the service's time. */
  private skewMs = 0;
  /** Refreshes made so far (a figure for tests and the simulator). */
  refreshes = 0;

  constructor(private readonly options: AppClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, '');
    this.store = options.session ?? memorySessionStore();
    this.timers = options.timers ?? realTimers;
    this.fetchImpl = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.api = createClient<paths>({ baseUrl: `${this.baseUrl}/api/v1`, fetch: (request) => this.fetchImpl(request) });
    this.api.use(this.authMiddleware());
  }

  /** Logs in and keeps the session. */
  async login(email: string, password: string): Promise<LoginResult> {
    const { data, error, response } = await this.api.POST('/auth/login', { body: { email, password } });
    if (data === undefined) {
      const body = error as { message?: unknown; retryAfter?: unknown } | undefined;
      throw new ApiError(response.status, typeof body?.message === 'string' ? body.message : `login answered ${response.status}`, typeof body?.retryAfter === 'number' ? body.retryAfter : undefined);
    }
    await this.keep({ accessToken: data.accessToken, refreshToken: data.refreshToken });
    this.learnClock(data.accessToken);
    return data;
  }

  /** Ends the session on the service and forgets it here. */
  async logout(): Promise<void> {
    try {
      await this.api.POST('/auth/logout');
    } finally {
      await this.keep(null);
    }
  }

  /** A valid access token: the current one, or a fresh one when it is about to expire. */
  async accessToken(): Promise<string> {
    const session = await this.current();
    if (session === null) throw new SessionEndedError(401, 'Not logged in');
    const exp = expiryOf(session.accessToken);
    const ahead = this.options.refreshAheadSeconds ?? 30;
    if (exp !== null && exp - ahead <= (this.timers.now() + this.skewMs) / 1000) return (await this.refresh(session.accessToken)).accessToken;
    return session.accessToken;
  }

  /**
   * Refreshes the session once for everyone: callers that saw `stale` expire share one
   * request; a caller whose stale token was already replaced gets the new session at once.
   */
  async refresh(stale?: string): Promise<Session> {
    if (this.refreshing === null) {
      this.refreshing = this.refreshOnce(stale).finally(() => {
        this.refreshing = null;
      });
    }
    return this.refreshing;
  }

  /** The session kept (null when logged out). */
  session(): Promise<Session | null> {
    return this.current();
  }

  /** The tunnel (apps' side), with this client's tokens. */
  tunnel(options: AppTunnelOptions = {}): AppTunnel {
    return new AppTunnel(this, options);
  }

  // -------------------------------------------------------------------------------------

  private async current(): Promise<Session | null> {
    if (this.kept === undefined) this.kept = (await this.store.load()) ?? null;
    return this.kept;
  }

  private async keep(session: Session | null): Promise<void> {
    this.kept = session;
    await this.store.save(session);
  }

  /**
   * The store is read again first: another instance of the app sharing it (a second tab, a
   * second process) may have rotated the pair already, and replaying the refresh token it
   * replaced would make the service revoke the whole session.
   */
  private async refreshOnce(stale: string | undefined): Promise<Session> {
    const known = this.kept;
    const stored = (await this.store.load()) ?? null;
    this.kept = stored;
    if (stored === null) throw new SessionEndedError(401, 'Not logged in');
    const mine = stale ?? (known === undefined ? stored.accessToken : known?.accessToken);
    if (stored.accessToken !== mine) return stored;
    return this.rotate(stored);
  }

  private learnClock(accessToken: string): void {
    const iat = issuedAtOf(accessToken);
    if (iat !== null) this.skewMs = iat * 1000 - this.timers.now();
  }

  private async rotate(session: Session): Promise<Session> {
    this.refreshes++;
    const res = await this.fetchImpl(`${this.baseUrl}/api/v1/auth/refresh`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ refreshToken: session.refreshToken }),
    });
    const body = (await res.json().catch(() => null)) as { accessToken?: string; refreshToken?: string; message?: string } | null;
    if (res.status === 201 && typeof body?.accessToken === 'string' && typeof body.refreshToken === 'string') {
      const next = { accessToken: body.accessToken, refreshToken: body.refreshToken };
      await this.keep(next);
      this.learnClock(next.accessToken);
      return next;
    }
    if (res.status === 401 || res.status === 400) {
      const ended = new SessionEndedError(res.status, body?.message ?? 'Refresh refused');
      await this.keep(null);
      this.options.onSessionEnded?.(ended);
      throw ended;
    }
    throw new Error(`refresh answered ${res.status}: ${body?.message ?? ''}`);
  }

  private authMiddleware(): Middleware {
    // The request as it was before it was sent, to send it again after a refresh.
    const originals = new Map<string, Request>();
    return {
      onRequest: async ({ request, schemaPath, id }) => {
        if (NO_AUTH_PATHS.has(schemaPath) || request.headers.has('Authorization')) return undefined;
        if ((await this.current()) === null) return undefined;
        const token = await this.accessToken();
        request.headers.set('Authorization', `Bearer ${token}`);
        originals.set(id, request.clone());
        return request;
      },
      onResponse: async ({ response, id }) => {
        const original = originals.get(id);
        originals.delete(id);
        if (original === undefined || response.status !== 401) return undefined;
        const body = (await response.clone().json().catch(() => null)) as { message?: string } | null;
        if (body?.message !== 'Token has expired') return undefined;
        // The token expired on the way (or the clocks disagree): one refresh, one retry.
        const used = (original.headers.get('Authorization') ?? '').replace(/^Bearer /, '');
        const fresh = await this.refresh(used);
        const retry = new Request(original, { headers: new Headers(original.headers) });
        retry.headers.set('Authorization', `Bearer ${fresh.accessToken}`);
        return this.fetchImpl(retry);
      },
    };
  }
}
