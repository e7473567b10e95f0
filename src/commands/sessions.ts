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
 * The session decider, with one addition for rotation races. Two refreshes with one token
 * at once: rotation runs without the handler's conflict retry, so the one whose append
 * comes second fails on its expected revision and is answered 401 `revoked` without
 * touching the family (a retry would re-decide against the winner's `rotated` and take the
 * loser for a thief). A loser that reads the stream only after the winner's append sees
 * `rotated` as well; it is excused the same way when, at its arrival, the sessions read
 * model still named the presented token as the family's newest: the winner answers only
 * after that model shows its rotation, so nobody could have held the new token yet. Any
 * later presentation of a rotated token is reuse and revokes the family.
 */
function rotationDecider(presentedWasCurrent: boolean): Decider<SessionState, SessionCommand, SessionEvent> {
  return {
    ...sessionDecider,
    decide(command, state) {
      if (presentedWasCurrent && command.type === 'RotateRefresh' && state.exists && !state.revoked) {
        const token = state.tokens[command.data.jti];
        if (token?.status === 'rotated' && Date.parse(command.data.now) < Date.parse(token.expiresAt)) {
          throw new UnauthorizedError(SESSION_MESSAGES.revoked);
        }
      }
      return sessionDecider.decide(command, state);
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
      let result;
      try {
        result = await handleCommand(
          eventStore,
          rotationDecider(presented.wasCurrent),
          sessionStream(presented.familyId),
          {
            type: 'RotateRefresh',
            data: { familyId: presented.familyId, jti: presented.jti, newJti: randomUUID(), now: presented.requestedAt, ...client },
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
