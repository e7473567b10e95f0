import { UnauthorizedError } from '../domain/errors';
import { STREAM_PREFIXES, asHomeHubEvent } from '../domain/events';
import type { EventStore, RecordedEvent, Subscription } from '../infra/eventstore/port';
import { formatPosition, parsePosition } from '../infra/eventstore/port';
import type { ReadStore } from '../infra/readstore/port';
import type { Logger } from '../logger';
import { CHECKPOINT_NAME } from '../projections/projector';
import { USERS_COLLECTION, type UserDoc } from '../projections/users';
import { ACCESS_TOKEN_TTL_SECONDS, TOKEN_MESSAGES, type AccessClaims, type Tokens } from './tokens';

/**
 * Access tokens that end with their account (decisions §3): once the CRM deactivates a user,
 * every access token issued before that moment is refused with 401 `Token has been revoked`,
 * on HTTP and on the tunnel, on every process; after a reactivation the user logs in again.
 *
 * Checked in memory on every request: each API process follows the user and session streams
 * and keeps, per user deactivated within the last access-token lifetime (or still inactive),
 * what it takes to judge a token. A token's `iat` is in whole seconds, so a token issued in
 * the very second of the deactivation is judged by its refresh-token family: the families
 * the deactivation revoked are the ones opened before it.
 */

interface Cutoff {
  inactive: boolean;
  /** `iat` below this second: issued before the deactivation. */
  readonly second: number;
  /** When this entry stops mattering once the user is active again (every older token expired). */
  readonly forgetAfterMs: number;
  /** Families revoked by the deactivation: their tokens of that very second are refused. */
  readonly families: Set<string>;
}

export interface AccessRevocations {
  /** True when this access token may no longer be used. */
  isRevoked(claims: Pick<AccessClaims, 'sub' | 'iat' | 'fam'>): boolean;
  /** Applies one event of a `user-` or `session-` stream. */
  apply(event: RecordedEvent): void;
  /** Marks a user inactive, as read from the users read model at start. */
  markInactive(userId: string, sinceMs: number): void;
  /** Told of every user whose tokens were just revoked (the tunnel closes their sockets). */
  onRevoked(listener: (userId: string) => void): void;
  /** Users currently tracked (for tests and metrics). */
  size(): number;
  /** What is tracked, as plain values (a start snapshot keeps it). */
  exportState(): RevocationsState;
  /** Adds what `exportState` gave (before any event is applied). */
  importState(state: RevocationsState): void;
}

/** One tracked user, as a start snapshot keeps it. */
export interface RevokedUser {
  readonly userId: string;
  readonly inactive: boolean;
  readonly second: number;
  readonly forgetAfterMs: number;
  readonly families: readonly string[];
}

export type RevocationsState = readonly RevokedUser[];

/** Margin on top of the access-token lifetime before a reactivated user's entry is dropped. */
const FORGET_MARGIN_MS = 60_000;

export function createAccessRevocations(now: () => number = Date.now): AccessRevocations {
  const cutoffs = new Map<string, Cutoff>();
  const listeners: Array<(userId: string) => void> = [];

  const forgetExpired = (): void => {
    const t = now();
    for (const [userId, cutoff] of cutoffs) if (!cutoff.inactive && cutoff.forgetAfterMs < t) cutoffs.delete(userId);
  };

  const deactivate = (userId: string, atMs: number): void => {
    cutoffs.set(userId, {
      inactive: true,
      second: Math.floor(atMs / 1000),
      forgetAfterMs: atMs + ACCESS_TOKEN_TTL_SECONDS * 1000 + FORGET_MARGIN_MS,
      families: new Set(),
    });
    for (const listener of listeners) listener(userId);
  };

  return {
    isRevoked({ sub, iat, fam }) {
      const cutoff = cutoffs.get(sub);
      if (cutoff === undefined) return false;
      if (cutoff.inactive) return true;
      if (iat < cutoff.second) return true;
      if (iat > cutoff.second) return false;
      return fam === undefined || cutoff.families.has(fam);
    },
    apply(recorded) {
      const event = asHomeHubEvent(recorded);
      if (event === null) return;
      switch (event.type) {
        case 'UserDeactivated':
          forgetExpired();
          deactivate(event.data.userId, Date.parse(event.data.deactivatedAt));
          return;
        case 'UserReactivated': {
          const cutoff = cutoffs.get(event.data.userId);
          if (cutoff !== undefined) cutoff.inactive = false;
          return;
        }
        case 'UserErased': {
          // Every token the user ever had was issued before the erasure (none can be issued after it).
          forgetExpired();
          const atMs = Date.parse(event.data.erasedAt);
          cutoffs.set(event.data.userId, {
            inactive: false,
            second: Math.floor(atMs / 1000) + 1,
            forgetAfterMs: atMs + ACCESS_TOKEN_TTL_SECONDS * 1000 + FORGET_MARGIN_MS,
            families: new Set(),
          });
          for (const listener of listeners) listener(event.data.userId);
          return;
        }
        case 'RefreshRevoked':
          if (event.data.reason === 'deactivated') cutoffs.get(event.data.userId)?.families.add(event.data.familyId);
          return;
        default:
          return;
      }
    },
    markInactive(userId, sinceMs) {
      if (!cutoffs.has(userId)) deactivate(userId, sinceMs);
    },
    onRevoked(listener) {
      listeners.push(listener);
    },
    size: () => cutoffs.size,
    exportState: () =>
      [...cutoffs].map(([userId, c]) => ({ userId, inactive: c.inactive, second: c.second, forgetAfterMs: c.forgetAfterMs, families: [...c.families] })),
    importState(state) {
      for (const user of state) {
        const { inactive, second, forgetAfterMs } = user;
        cutoffs.set(user.userId, { inactive, second, forgetAfterMs, families: new Set(user.families) });
      }
      forgetExpired();
    },
  };
}

/** The tokens of this process with the revocation check added to every access-token verification. */
export function withAccessRevocations(tokens: Tokens, revocations: AccessRevocations): Tokens {
  return {
    ...tokens,
    verifyAccess(token) {
      const claims = tokens.verifyAccess(token);
      if (revocations.isRevoked(claims)) throw new UnauthorizedError(TOKEN_MESSAGES.revoked);
      return claims;
    },
  };
}

export interface AccessRevocationFeed {
  readonly revocations: AccessRevocations;
  /** The state with the position of the last event it reflects (for a start snapshot). */
  exportState(): RevocationsSnapshot;
  stop(): Promise<void>;
}

/** The revocations at a log position: a start goes on from there. */
export interface RevocationsSnapshot {
  /** Formatted global position (null: before the first event). */
  readonly position: string | null;
  readonly state: RevocationsState;
}

const FEED_RETRY_MS = 1000;

/**
 * Starts following deactivations. Resolves once the users that are inactive at the
 * projector's checkpoint P are known; the subscription then goes on from P, so nothing
 * between the read and the subscription is missed.
 *
 * With `restored` (embedded mode, from a start snapshot taken at R <= P), what was tracked
 * at R is known too — users reactivated within the token lifetime among them, which the
 * read model cannot tell — and the subscription goes on from R instead.
 */
export async function startAccessRevocationFeed(deps: {
  readonly eventStore: EventStore;
  readonly readStore: ReadStore;
  readonly logger: Logger;
  readonly restored?: RevocationsSnapshot;
}): Promise<AccessRevocationFeed> {
  const { eventStore, readStore, logger } = deps;
  const revocations = createAccessRevocations();
  let stopped = false;
  let subscription: Subscription | null = null;

  const checkpoint = await readStore.getCheckpoint(CHECKPOINT_NAME);
  if (deps.restored !== undefined) revocations.importState(deps.restored.state);
  const inactive = await readStore.collection<UserDoc>(USERS_COLLECTION).find({ where: { isActive: false } });
  for (const user of inactive) revocations.markInactive(user.id, Date.parse(user.updatedAt));

  let markCaughtUp: () => void = () => undefined;
  const caughtUp = new Promise<void>((resolve) => (markCaughtUp = resolve));
  const start = deps.restored !== undefined ? deps.restored.position : checkpoint;
  let from = start === null ? null : parsePosition(start);
  const loop = (async () => {
    while (!stopped) {
      const current = eventStore.subscribe({
        ...(from !== null ? { fromPosition: from } : {}),
        streamPrefixes: [STREAM_PREFIXES.user, STREAM_PREFIXES.session],
      });
      subscription = current;
      try {
        for await (const item of current) {
          if (item.kind !== 'event') {
            markCaughtUp();
            continue;
          }
          from = item.event.position;
          revocations.apply(item.event);
        }
      } catch (error) {
        if (!stopped) logger.warn({ err: error instanceof Error ? error.message : String(error) }, 'access revocations: subscription failed; resubscribing');
      }
      await current.close().catch(() => undefined);
      if (!stopped) await new Promise((resolve) => setTimeout(resolve, FEED_RETRY_MS).unref());
    }
  })();
  // From a snapshot, what happened since R may reactivate a user the snapshot has as inactive: known before the API opens.
  if (deps.restored !== undefined) await caughtUp;

  return {
    revocations,
    exportState: () => ({ position: from === null ? null : formatPosition(from), state: revocations.exportState() }),
    async stop() {
      stopped = true;
      await subscription?.close().catch(() => undefined);
      await loop;
    },
  };
}
