/**
 * The session aggregate: one refresh-token family per login, stream `session-<familyId>`.
 * Tokens are known by their `jti` only; no event holds a refresh token.
 *
 * Reuse of a rotated token is both a state change and a failure: `decide` returns
 * `RefreshReuseDetected` + `RefreshRevoked` (they must be appended) and the handler then
 * answers 401. `rotationOutcome(events)` tells the handler which of the two it is.
 */
import type { Command, Decider, DomainEvent } from './messages';
import { ConflictError, UnauthorizedError } from './errors';

export const REFRESH_TOKEN_TTL_SECONDS = 30 * 24 * 60 * 60;

/**
 * A rotated token presented again within this long of its rotation lost a race to a
 * concurrent refresh (refused, the family kept); later, it is reuse (decisions §3).
 */
export const REFRESH_RACE_WINDOW_MS = 5_000;

export const SESSION_MESSAGES = {
  invalid: 'Invalid refresh token',
  expired: 'Refresh token has expired',
  revoked: 'Refresh token has been revoked',
  familyExists: 'Session family already exists',
} as const;

export type RefreshStatus = 'active' | 'rotated' | 'revoked';
export type RevokeReason = 'logout' | 'reuse' | 'password-reset' | 'deactivated' | 'erased';

export interface RefreshRecord {
  readonly jti: string;
  readonly status: RefreshStatus;
  readonly issuedAt: string;
  readonly expiresAt: string;
  readonly replacedBy: string | null;
  /** When it was rotated (the `RefreshRotated` event's time), or null while it was not. */
  readonly rotatedAt: string | null;
}

export interface OpenSession {
  readonly exists: true;
  readonly familyId: string;
  readonly userId: string;
  readonly revoked: boolean;
  readonly revokedReason: RevokeReason | null;
  readonly tokens: Readonly<Record<string, RefreshRecord>>;
}

export type SessionState = { readonly exists: false } | OpenSession;

// ---------------------------------------------------------------------------------------
// Commands

interface ClientInfo {
  readonly ip: string | null;
  readonly userAgent: string | null;
}

export type IssueRefresh = Command<
  'IssueRefresh',
  { readonly familyId: string; readonly jti: string; readonly userId: string; readonly now: string } & ClientInfo
>;

export type RotateRefresh = Command<
  'RotateRefresh',
  {
    readonly familyId: string;
    /** The presented token's jti. */
    readonly jti: string;
    /** The jti of the token that replaces it. */
    readonly newJti: string;
    readonly now: string;
    /** How long after a rotation a second presentation is a lost race; REFRESH_RACE_WINDOW_MS unless given. */
    readonly raceWindowMs?: number;
  } & ClientInfo
>;

export type RevokeFamily = Command<
  'RevokeFamily',
  { readonly familyId: string; readonly reason: RevokeReason; readonly now: string }
>;

export type SessionCommand = IssueRefresh | RotateRefresh | RevokeFamily;

// ---------------------------------------------------------------------------------------
// Events

export type RefreshIssued = DomainEvent<
  'RefreshIssued',
  {
    readonly familyId: string;
    readonly jti: string;
    readonly userId: string;
    readonly issuedAt: string;
    /** The JWT's `exp` is derived from this. */
    readonly expiresAt: string;
  } & ClientInfo
>;

export type RefreshRotated = DomainEvent<
  'RefreshRotated',
  { readonly familyId: string; readonly jti: string; readonly replacedBy: string; readonly rotatedAt: string }
>;

export type RefreshReuseDetected = DomainEvent<
  'RefreshReuseDetected',
  {
    readonly familyId: string;
    readonly userId: string;
    /** The rotated token that was presented again. */
    readonly jti: string;
    readonly detectedAt: string;
  } & ClientInfo
>;

export type RefreshRevoked = DomainEvent<
  'RefreshRevoked',
  { readonly familyId: string; readonly userId: string; readonly reason: RevokeReason; readonly revokedAt: string }
>;

export type SessionEvent = RefreshIssued | RefreshRotated | RefreshReuseDetected | RefreshRevoked;

// ---------------------------------------------------------------------------------------
// Decide

/**
 * The family's token `jti`, if it has one: its own entries only, so a jti named like a member
 * of every object (`toString`, `constructor`, `__proto__`) is a token or nothing, never that member.
 */
function tokenOf(tokens: Readonly<Record<string, RefreshRecord>>, jti: string): RefreshRecord | undefined {
  return Object.hasOwn(tokens, jti) ? tokens[jti] : undefined;
}

function plusSeconds(iso: string, seconds: number): string {
  // Pure date arithmetic on a time the command carries, not a clock read.
  return new Date(Date.parse(iso) + seconds * 1000).toISOString();
}

function issued(familyId: string, jti: string, userId: string, now: string, client: ClientInfo): RefreshIssued {
  return {
    type: 'RefreshIssued',
    data: {
      familyId,
      jti,
      userId,
      issuedAt: now,
      expiresAt: plusSeconds(now, REFRESH_TOKEN_TTL_SECONDS),
      ip: client.ip,
      userAgent: client.userAgent,
    },
  };
}

function decideIssue(command: IssueRefresh, state: SessionState): SessionEvent[] {
  const c = command.data;
  if (state.exists) throw new ConflictError(SESSION_MESSAGES.familyExists);
  return [issued(c.familyId, c.jti, c.userId, c.now, c)];
}

/**
 * Order of the checks: unknown → expired → revoked → rotated (a lost race within
 * REFRESH_RACE_WINDOW_MS of the rotation, else reuse) → active. Expiry
 * comes first to agree with the JWT check at the edge, which refuses an expired token
 * before this decider sees it.
 */
function decideRotate(command: RotateRefresh, state: SessionState): SessionEvent[] {
  const c = command.data;
  const token = state.exists ? tokenOf(state.tokens, c.jti) : undefined;
  if (!state.exists || token === undefined) throw new UnauthorizedError(SESSION_MESSAGES.invalid);
  if (Date.parse(c.now) >= Date.parse(token.expiresAt)) throw new UnauthorizedError(SESSION_MESSAGES.expired);
  if (state.revoked || token.status === 'revoked') throw new UnauthorizedError(SESSION_MESSAGES.revoked);

  if (token.status === 'rotated') {
    // Presented again soon after its rotation: a concurrent refresh that lost, whatever its
    // connection or process (the rotation time comes from the event). The family lives on.
    const window = c.raceWindowMs ?? REFRESH_RACE_WINDOW_MS;
    if (token.rotatedAt !== null && Date.parse(c.now) - Date.parse(token.rotatedAt) < window) {
      throw new UnauthorizedError(SESSION_MESSAGES.revoked);
    }
    return [
      {
        type: 'RefreshReuseDetected',
        data: {
          familyId: state.familyId,
          userId: state.userId,
          jti: c.jti,
          detectedAt: c.now,
          ip: c.ip,
          userAgent: c.userAgent,
        },
      },
      {
        type: 'RefreshRevoked',
        data: { familyId: state.familyId, userId: state.userId, reason: 'reuse', revokedAt: c.now },
      },
    ];
  }

  return [
    { type: 'RefreshRotated', data: { familyId: state.familyId, jti: c.jti, replacedBy: c.newJti, rotatedAt: c.now } },
    issued(state.familyId, c.newJti, state.userId, c.now, c),
  ];
}

/** Idempotent: an unknown or already revoked family gives no events. */
function decideRevoke(command: RevokeFamily, state: SessionState): SessionEvent[] {
  const c = command.data;
  if (!state.exists || state.revoked) return [];
  return [
    {
      type: 'RefreshRevoked',
      data: { familyId: state.familyId, userId: state.userId, reason: c.reason, revokedAt: c.now },
    },
  ];
}

export function decideSession(command: SessionCommand, state: SessionState): SessionEvent[] {
  switch (command.type) {
    case 'IssueRefresh':
      return decideIssue(command, state);
    case 'RotateRefresh':
      return decideRotate(command, state);
    case 'RevokeFamily':
      return decideRevoke(command, state);
    default: {
      const _exhaustive: never = command;
      return _exhaustive;
    }
  }
}

export type RotationOutcome =
  | { readonly ok: true; readonly issued: RefreshIssued['data'] }
  | { readonly ok: false; readonly error: UnauthorizedError };

/**
 * What a `RotateRefresh` decision means for the caller. The handler appends the events
 * whatever the outcome, then answers with `issued` or throws `error`.
 */
export function rotationOutcome(events: readonly SessionEvent[]): RotationOutcome {
  if (events.some((event) => event.type === 'RefreshReuseDetected')) {
    return { ok: false, error: new UnauthorizedError(SESSION_MESSAGES.revoked) };
  }
  const newToken = events.find((event): event is RefreshIssued => event.type === 'RefreshIssued');
  if (newToken === undefined) return { ok: false, error: new UnauthorizedError(SESSION_MESSAGES.invalid) };
  return { ok: true, issued: newToken.data };
}

// ---------------------------------------------------------------------------------------
// Evolve

export function initialSessionState(): SessionState {
  return { exists: false };
}

function withToken(session: OpenSession, token: RefreshRecord): OpenSession {
  return { ...session, tokens: { ...session.tokens, [token.jti]: token } };
}

export function evolveSession(state: SessionState, event: SessionEvent): SessionState {
  switch (event.type) {
    case 'RefreshIssued': {
      const e = event.data;
      const session: OpenSession = state.exists
        ? state
        : { exists: true, familyId: e.familyId, userId: e.userId, revoked: false, revokedReason: null, tokens: {} };
      return withToken(session, {
        jti: e.jti,
        status: 'active',
        issuedAt: e.issuedAt,
        expiresAt: e.expiresAt,
        replacedBy: null,
        rotatedAt: null,
      });
    }
    case 'RefreshRotated': {
      if (!state.exists) return state;
      const token = tokenOf(state.tokens, event.data.jti);
      if (token === undefined) return state;
      return withToken(state, { ...token, status: 'rotated', replacedBy: event.data.replacedBy, rotatedAt: event.data.rotatedAt });
    }
    case 'RefreshReuseDetected':
      // Recorded for auditors; the revocation that follows changes the state.
      return state;
    case 'RefreshRevoked': {
      if (!state.exists) return state;
      const tokens = Object.fromEntries(
        Object.entries(state.tokens).map(([jti, token]) => [
          jti,
          token.status === 'active' ? { ...token, status: 'revoked' as const } : token,
        ]),
      );
      return { ...state, revoked: true, revokedReason: event.data.reason, tokens };
    }
    default: {
      const _exhaustive: never = event;
      return _exhaustive;
    }
  }
}

/**
 * `events.reduce(evolveSession, state)`, with one copy of the tokens for all of `events`
 * instead of one per event: a family's fold reads every token it ever had (a reuse of any
 * rotated one revokes it), so folding a family refreshed n times one event at a time cost
 * n copies of up to n tokens (a refresh after 1,000 rotations took ~0.2 s of CPU).
 */
export function evolveSessionAll(state: SessionState, events: readonly SessionEvent[]): SessionState {
  let session = state;
  // The tokens being built, owned by this call until it returns (null: not copied yet).
  let tokens: Record<string, RefreshRecord> | null = null;
  const own = (open: OpenSession): Record<string, RefreshRecord> => (tokens ??= { ...open.tokens });
  // An own entry, as `evolveSession`'s object literals make (an assignment to `__proto__` would set the prototype instead).
  const put = (owned: Record<string, RefreshRecord>, jti: string, token: RefreshRecord): void => {
    if (jti === '__proto__') Object.defineProperty(owned, jti, { value: token, enumerable: true, writable: true, configurable: true });
    else owned[jti] = token;
  };
  for (const event of events) {
    switch (event.type) {
      case 'RefreshIssued': {
        const e = event.data;
        if (!session.exists) {
          session = { exists: true, familyId: e.familyId, userId: e.userId, revoked: false, revokedReason: null, tokens: {} };
          tokens = {};
        }
        put(own(session), e.jti, { jti: e.jti, status: 'active', issuedAt: e.issuedAt, expiresAt: e.expiresAt, replacedBy: null, rotatedAt: null });
        break;
      }
      case 'RefreshRotated': {
        if (!session.exists) break;
        const owned = own(session);
        const token = tokenOf(owned, event.data.jti);
        if (token !== undefined) put(owned, event.data.jti, { ...token, status: 'rotated', replacedBy: event.data.replacedBy, rotatedAt: event.data.rotatedAt });
        break;
      }
      case 'RefreshReuseDetected':
        break;
      case 'RefreshRevoked': {
        if (!session.exists) break;
        const owned = own(session);
        for (const [jti, token] of Object.entries(owned)) if (token.status === 'active') put(owned, jti, { ...token, status: 'revoked' });
        session = { ...session, revoked: true, revokedReason: event.data.reason };
        break;
      }
      default: {
        const _exhaustive: never = event;
        return _exhaustive;
      }
    }
  }
  return session.exists && tokens !== null ? { ...session, tokens } : session;
}

export const sessionDecider: Decider<SessionState, SessionCommand, SessionEvent> = {
  initialState: initialSessionState,
  evolve: evolveSession,
  evolveAll: evolveSessionAll,
  decide: decideSession,
};
