import { randomUUID } from 'node:crypto';
import { ConflictError, UnauthorizedError } from '../domain/errors';
import { sessionStream } from '../domain/events';
import type { Decider } from '../domain/messages';
import {
  SESSION_MESSAGES,
  rotationOutcome,
  sessionDecider,
  type RefreshIssued,
  type RevokeReason,
  type SessionCommand,
  type SessionEvent,
  type SessionState,
} from '../domain/session';
import { comparePositions, type EventStore, type GlobalPosition } from '../infra/eventstore/port';
import type { ReadStore } from '../infra/readstore/port';
import { activeFamilyIds } from '../projections/sessions';
import type { Watermark } from '../projections/watermark';
import { handleCommand, type Clock, type CommandContext } from './handler';

/**
 * Refresh-token families (decisions §3): one `session-<familyId>` stream per login. Every
 * command here waits for its projection before it resolves (read-your-writes), so "all the
 * families of a user" is complete as soon as a login has answered.
 */
export interface SessionCommandDeps {
  readonly eventStore: EventStore;
  readonly readStore: ReadStore;
  readonly watermark: Watermark;
  readonly clock: Clock;
  readonly readYourWritesTimeoutMs: number;
}

export interface ClientInfo {
  readonly ip: string | null;
  readonly userAgent: string | null;
}

export interface SessionCommands {
  /** Opens a new family with its first token; returns the ids to sign the refresh JWT with. */
  open(userId: string, client: ClientInfo, ctx: CommandContext): Promise<{ familyId: string; jti: string }>;
  /**
   * Rotates the presented token (`jti` of family `familyId`). Throws UnauthorizedError with
   * the spec's message when it is unknown, expired, revoked, reused, or lost a race.
   */
  rotate(
    presented: {
      readonly familyId: string;
      readonly jti: string;
      /** When the request reached the service (ISO 8601). */
      readonly requestedAt: string;
      /** Whether the sessions read model named this token as the family's newest when the request arrived. */
      readonly wasCurrent: boolean;
    },
    client: ClientInfo,
    ctx: CommandContext,
  ): Promise<RefreshIssued['data']>;
  revokeFamily(familyId: string, reason: RevokeReason, ctx: CommandContext): Promise<void>;
  /** Revokes every family of the user that is not revoked yet. */
  revokeAllForUser(userId: string, reason: RevokeReason, ctx: CommandContext): Promise<void>;
}

/**
 * Rotations of tokens this process is making or made recently, by the rotated token's `jti`:
 * how many attempts are in flight (from the decision, before the append, until the answer),
 * and when the last one ended, just before its answer was sent. A loser of a race handled here
 * can then be judged by what matters, whether it reached the service before the winner was
 * answered, however late a busy process got to it. Entries are dropped after a minute.
 */
class RecentRotations {
  private readonly entries = new Map<string, { readonly at: number; inFlight: number; endedAt: number }>();

  constructor(private readonly keepMs: number = 60_000) {}

  /** An attempt decided to rotate `jti` and is about to append. */
  began(jti: string, nowMs: number): void {
    for (const [key, entry] of this.entries) {
      if (entry.at >= nowMs - this.keepMs || entry.inFlight > 0) break;
      this.entries.delete(key);
    }
    const entry = this.entries.get(jti);
    if (entry !== undefined) entry.inFlight++;
    else this.entries.set(jti, { at: nowMs, inFlight: 1, endedAt: 0 });
  }

  /** That attempt is over (answered, lost the append, or failed); called just before its answer. */
  ended(jti: string, nowMs: number): void {
    const entry = this.entries.get(jti);
    if (entry === undefined) return;
    entry.inFlight = Math.max(0, entry.inFlight - 1);
    entry.endedAt = Math.max(entry.endedAt, nowMs);
  }

  /** Whether a request for `jti` that arrived at `arrivedMs` overlapped a rotation of it by this process. */
  overlapped(jti: string, arrivedMs: number): boolean {
    const entry = this.entries.get(jti);
    return entry !== undefined && (entry.inFlight > 0 || arrivedMs < entry.endedAt);
  }
}

/**
 * The session decider, with one addition for rotation races: a refresh that presents a token
 * rotated by a concurrent refresh (its request reached the service before the winner was
 * answered, so nobody could have held the new token) is refused 401 `revoked` without
 * touching the family. Any later presentation of a rotated token is reuse and revokes it.
 *
 * How a race is told from reuse, in order:
 * - Rotation runs without the handler's conflict retry: the one whose append comes second
 *   fails on its expected revision and is refused (a retry would re-decide against the
 *   winner's `rotated` and take the loser for a thief).
 * - A loser that reads the stream after the winner's append: when the winner was this
 *   process, by the time of its answer (`RecentRotations`): arrived before it, or the winner
 *   is still between its decision and its answer. Exact, however long a busy process took to
 *   get to the loser, and whenever the append becomes visible to readers.
 * - Else (the winner was another process): arrived before the winner decided (the new
 *   token's issue time, across processes as far as their clocks agree), or the sessions read
 *   model still named the presented token as the family's newest when the loser was handled
 *   (the winner answers only after that model shows its rotation).
 */
function rotationDecider(
  presented: { readonly requestedAt: string; readonly wasCurrent: boolean },
  recent: RecentRotations,
  onRotating: () => void,
): Decider<SessionState, SessionCommand, SessionEvent> {
  return {
    ...sessionDecider,
    decide(command, state) {
      if (command.type === 'RotateRefresh' && state.exists && !state.revoked) {
        const token = state.tokens[command.data.jti];
        if (token?.status === 'rotated' && Date.parse(command.data.now) < Date.parse(token.expiresAt)) {
          const arrived = Date.parse(presented.requestedAt);
          const replacement = token.replacedBy === null ? undefined : state.tokens[token.replacedBy];
          const race =
            recent.overlapped(token.jti, arrived) ||
            (replacement !== undefined && arrived < Date.parse(replacement.issuedAt)) ||
            presented.wasCurrent;
          if (race) throw new UnauthorizedError(SESSION_MESSAGES.revoked);
        }
      }
      const events = sessionDecider.decide(command, state);
      if (events.some((event) => event.type === 'RefreshRotated')) onRotating();
      return events;
    },
  };
}

/** The highest of some positions (appends that ran concurrently finish in any order). */
export function latestPosition(positions: ReadonlyArray<GlobalPosition | null>): GlobalPosition | null {
  let latest: GlobalPosition | null = null;
  for (const p of positions) if (p !== null && (latest === null || comparePositions(p, latest) > 0)) latest = p;
  return latest;
}

export function createSessionCommands(deps: SessionCommandDeps): SessionCommands {
  const { eventStore, clock } = deps;
  const recent = new RecentRotations();

  const settle = async (positions: ReadonlyArray<GlobalPosition | null>): Promise<void> => {
    const last = latestPosition(positions);
    if (last !== null) await deps.watermark.waitFor(last, deps.readYourWritesTimeoutMs);
  };

  const revokeFamily = async (familyId: string, reason: RevokeReason, ctx: CommandContext): Promise<GlobalPosition | null> => {
    const result = await handleCommand(
      eventStore,
      sessionDecider,
      sessionStream(familyId),
      { type: 'RevokeFamily', data: { familyId, reason, now: clock.now().toISOString() } },
      ctx,
      clock,
    );
    return result.position;
  };

  return {
    async open(userId, client, ctx) {
      const familyId = randomUUID();
      const jti = randomUUID();
      const result = await handleCommand(
        eventStore,
        sessionDecider,
        sessionStream(familyId),
        { type: 'IssueRefresh', data: { familyId, jti, userId, now: clock.now().toISOString(), ...client } },
        ctx,
        clock,
      );
      await settle([result.position]);
      return { familyId, jti };
    },

    async rotate(presented, client, ctx) {
      let rotating = false;
      const decider = rotationDecider(presented, recent, () => {
        rotating = true;
        recent.began(presented.jti, clock.now().getTime());
      });
      try {
        let result;
        try {
          result = await handleCommand(
            eventStore,
            decider,
            sessionStream(presented.familyId),
            {
              type: 'RotateRefresh',
              // Now, not the arrival: the new token's issue time is what a later racer is compared with.
              data: { familyId: presented.familyId, jti: presented.jti, newJti: randomUUID(), now: clock.now().toISOString(), ...client },
            },
            ctx,
            clock,
            { maxRetries: 0 },
          );
        } catch (error) {
          // Lost the race for this token to a concurrent refresh: refused, the family untouched.
          if (error instanceof ConflictError) throw new UnauthorizedError(SESSION_MESSAGES.revoked);
          throw error;
        }
        await settle([result.position]);
        const outcome = rotationOutcome(result.events);
        if (!outcome.ok) throw outcome.error;
        return outcome.issued;
      } finally {
        // The caller answers at once: a request for this token that arrived before now overlapped it.
        if (rotating) recent.ended(presented.jti, clock.now().getTime());
      }
    },

    async revokeFamily(familyId, reason, ctx) {
      await settle([await revokeFamily(familyId, reason, ctx)]);
    },

    async revokeAllForUser(userId, reason, ctx) {
      const families = await activeFamilyIds(deps.readStore, userId);
      const positions = await Promise.all(families.map((familyId) => revokeFamily(familyId, reason, ctx)));
      await settle(positions);
    },
  };
}
