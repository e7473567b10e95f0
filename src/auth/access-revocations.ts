import { UnauthorizedError } from '../domain/errors';
import { STREAM_PREFIXES } from '../domain/events';
import type { EventStore, RecordedEvent, Subscription } from '../infra/eventstore/port';
import { comparePositions, parsePosition, type GlobalPosition } from '../infra/eventstore/port';
import type { ReadStore } from '../infra/readstore/port';
import type { Logger } from '../logger';
import { CHECKPOINT_NAME } from '../projections/projector';
import {
  accessRevocationIds,
  evolveAccessRevocationDoc,
  relevantAccessRevocations,
  type AccessRevocationDoc,
} from '../projections/access-revocations';
import { TOKEN_MESSAGES, type AccessClaims, type Tokens } from './tokens';

/** An access token's lifetime and a minute more for clocks that disagree. */
const CUT_MATTERS_MS = 960_000;

/**
 * Access tokens that end before they expire (decisions §3): a deactivation, a password reset,
 * a detected reuse. From that moment the tokens they cover are refused with 401 `Token has
 * been revoked`, on HTTP and on the tunnel, on every process.
 *
 * Checked in memory on every request. What is kept is the access-revocations read model
 * (src/projections/access-revocations.ts), the documents that still refuse something, folded
 * with the same pure `evolve` from the user and session events this process follows: a start
 * loads them at the projector's checkpoint and follows the log from there, so it never needs
 * a snapshot of its own and never forgets a cut made before it started.
 */

export interface AccessRevocations {
  /** True when this access token may no longer be used. */
  isRevoked(claims: Pick<AccessClaims, 'sub' | 'iat' | 'fam'>): boolean;
  /** Applies one event of a `user-` or `session-` stream, in log order. */
  apply(event: RecordedEvent): void;
  /** Adds documents read from the read model (before any event is applied). */
  load(docs: readonly AccessRevocationDoc[]): void;
  /** Told of every user some of whose tokens were just revoked (the tunnel closes those sockets). */
  onRevoked(listener: (userId: string) => void): void;
  /** Users currently tracked (for tests and metrics). */
  size(): number;
}

/** What revokes tokens at once (a reactivation or a new family never does). */
function revokes(event: RecordedEvent): boolean {
  switch (event.type) {
    case 'UserDeactivated':
    case 'UserErased':
      return true;
    case 'PasswordChanged':
      return (event.data as { reason?: unknown }).reason === 'reset';
    case 'RefreshRevoked':
      return (event.data as { reason?: unknown }).reason !== 'logout';
    default:
      return false;
  }
}

export function createAccessRevocations(now: () => number = Date.now): AccessRevocations {
  const docs = new Map<string, AccessRevocationDoc>();
  const listeners: Array<(userId: string) => void> = [];
  let nextSweep = 0;

  const forgetExpired = (): void => {
    const t = now();
    if (t < nextSweep) return;
    nextSweep = t + 60_000;
    const iso = new Date(t).toISOString();
    for (const [userId, doc] of docs) if (doc.relevantUntil <= iso) docs.delete(userId);
  };

  return {
    isRevoked({ sub, iat, fam }) {
      const doc = docs.get(sub);
      if (doc === undefined) return false;
      if (doc.inactive) return true;
      if (Date.parse(doc.relevantUntil) <= now()) return false;
      if (fam === undefined) {
        // Never issued by login or refresh: judged by the deactivation second alone.
        return doc.deactivatedAt !== null && iat <= Math.floor(Date.parse(doc.deactivatedAt) / 1000);
      }
      if (doc.revokedFamilies.some((f) => f.familyId === fam)) return true;
      // The cut matters while a token from before it can still be alive.
      if (doc.cutAt === null || Date.parse(doc.cutAt) + CUT_MATTERS_MS <= now()) return false;
      return !doc.openedAfterCut.includes(fam);
    },
    apply(recorded) {
      for (const id of accessRevocationIds(recorded)) {
        const before = docs.get(id) ?? null;
        const after = evolveAccessRevocationDoc(before, recorded, id);
        if (after === before) continue;
        if (after === null) docs.delete(id);
        else docs.set(id, after);
        if (revokes(recorded)) for (const listener of listeners) listener(id);
      }
      forgetExpired();
    },
    load(loaded) {
      for (const doc of loaded) docs.set(doc.id, doc);
    },
    onRevoked(listener) {
      listeners.push(listener);
    },
    size: () => docs.size,
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
  /** The position of the last event applied (null: none since the checkpoint it started from). */
  position(): GlobalPosition | null;
  /** True once every event up to `position` is applied here; false when `timeoutMs` passed first. */
  waitFor(position: GlobalPosition, timeoutMs: number): Promise<boolean>;
  /** Told of every position applied (the cluster registry publishes it). */
  onApplied(listener: (position: GlobalPosition) => void): void;
  stop(): Promise<void>;
}

const FEED_RETRY_MS = 1000;

/**
 * Starts following the user and session streams. Resolves once the revocations are complete:
 * the read model's documents at the projector's checkpoint P are loaded, and every event
 * after P up to the head of the log is applied (a process never serves with a partial view,
 * decisions §3). The subscription then goes on live.
 */
export async function startAccessRevocationFeed(deps: {
  readonly eventStore: EventStore;
  readonly readStore: ReadStore;
  readonly logger: Logger;
  readonly now?: () => number;
}): Promise<AccessRevocationFeed> {
  const { eventStore, readStore, logger } = deps;
  const now = deps.now ?? Date.now;
  const revocations = createAccessRevocations(now);
  let stopped = false;
  let subscription: Subscription | null = null;
  const appliedListeners: Array<(position: GlobalPosition) => void> = [];
  let waiters: Array<{ position: GlobalPosition; resolve: (reached: boolean) => void; timer: NodeJS.Timeout }> = [];

  const checkpoint = await readStore.getCheckpoint(CHECKPOINT_NAME);
  revocations.load(await relevantAccessRevocations(readStore, new Date(now())));
  let from = checkpoint === null ? null : parsePosition(checkpoint);
  const reached = (p: GlobalPosition): boolean => from !== null && comparePositions(from, p) >= 0;

  const advanced = (): void => {
    if (from === null) return;
    const position = from;
    for (const listener of appliedListeners) listener(position);
    if (waiters.length === 0) return;
    const still: typeof waiters = [];
    for (const w of waiters) {
      if (reached(w.position)) {
        clearTimeout(w.timer);
        w.resolve(true);
      } else still.push(w);
    }
    waiters = still;
  };

  let markCaughtUp: () => void = () => undefined;
  const caughtUp = new Promise<void>((resolve) => (markCaughtUp = resolve));
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
          advanced();
        }
      } catch (error) {
        if (!stopped) logger.warn({ err: error instanceof Error ? error.message : String(error) }, 'access revocations: subscription failed; resubscribing');
      }
      await current.close().catch(() => undefined);
      if (!stopped) await new Promise((resolve) => setTimeout(resolve, FEED_RETRY_MS).unref());
    }
  })();
  // Every cut made before this start is known before the API opens (a stale or missing snapshot, a new process).
  await Promise.race([caughtUp, loop]);

  return {
    revocations,
    position: () => from,
    waitFor(position, timeoutMs) {
      if (reached(position)) return Promise.resolve(true);
      return new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => {
          waiters = waiters.filter((w) => w.timer !== timer);
          resolve(false);
        }, timeoutMs);
        waiters.push({ position, resolve, timer });
      });
    },
    onApplied(listener) {
      appliedListeners.push(listener);
    },
    async stop() {
      stopped = true;
      for (const w of waiters) {
        clearTimeout(w.timer);
        w.resolve(false);
      }
      waiters = [];
      await subscription?.close().catch(() => undefined);
      await loop;
    },
  };
}
