import { randomUUID } from 'node:crypto';
import { ConflictError, UnauthorizedError } from '../domain/errors';
import { sessionStream } from '../domain/events';
import {
  SESSION_MESSAGES,
  rotationOutcome,
  sessionDecider,
  type RefreshIssued,
  type RevokeReason,
} from '../domain/session';
import { comparePositions, type EventStore, type GlobalPosition } from '../infra/eventstore/port';
import type { ReadStore } from '../infra/readstore/port';
import { activeFamilyIds } from '../projections/sessions';
import type { Watermark } from '../projections/watermark';
import { handleCommand, type Clock, type CommandContext } from './handler';

/**
 * Refresh-token families (decisions §3): one `session-<familyId>` stream per login. A
 * rotated token presented again within 5 s of its rotation (the time in its `RefreshRotated`
 * event, so the same on every process) lost a race to a concurrent refresh: refused, the
 * family kept; later, it is reuse and the family is revoked. Every
 * command here waits for its projection before it resolves (read-your-writes), so "all the
 * families of a user" is complete as soon as a login has answered.
 */
export interface SessionCommandDeps {
  readonly eventStore: EventStore;
  readonly readStore: ReadStore;
  readonly watermark: Watermark;
  readonly clock: Clock;
  readonly readYourWritesTimeoutMs: number;
  /** A rotated token presented again within this long of its rotation is a lost race; REFRESH_RACE_WINDOW_MS unless given. */
  readonly refreshRaceWindowMs?: number;
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
   * the spec's message when it is unknown, expired, revoked, reused, or lost a race: a
   * rotated token presented again within the race window of its rotation (decisions §3).
   */
  rotate(presented: { readonly familyId: string; readonly jti: string }, client: ClientInfo, ctx: CommandContext): Promise<RefreshIssued['data']>;
  revokeFamily(familyId: string, reason: RevokeReason, ctx: CommandContext): Promise<void>;
  /** Revokes every family of the user that is not revoked yet. */
  revokeAllForUser(userId: string, reason: RevokeReason, ctx: CommandContext): Promise<void>;
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
        // An append that meets another one in the family is decided again on what that one
        // wrote: a token rotated moments ago is a lost race (refused, the family untouched), one
        // rotated long ago is reuse (the family revoked) whatever else happens in it meanwhile.
        result = await handleCommand(
          eventStore,
          sessionDecider,
          sessionStream(presented.familyId),
          {
            type: 'RotateRefresh',
            data: {
              familyId: presented.familyId,
              jti: presented.jti,
              newJti: randomUUID(),
              now: clock.now().toISOString(),
              ...(deps.refreshRaceWindowMs !== undefined ? { raceWindowMs: deps.refreshRaceWindowMs } : {}),
              ...client,
            },
          },
          ctx,
          clock,
        );
      } catch (error) {
        // Still meeting other appends after every retry: refused, the family untouched.
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
