import { randomUUID } from 'node:crypto';
import { ConflictError } from '../domain/errors';
import { userStream } from '../domain/events';
import { crmCustomerStream, emailReservationStream, reservationDecider, type ReservationState } from '../domain/reservation';
import { USER_MESSAGES, userDecider, UserErasedError, type CrmFields, type ExistingUser, type UserEvent, type UserState } from '../domain/user';
import { WrongExpectedRevisionError, type EventStore, type GlobalPosition } from '../infra/eventstore/port';
import type { EmailClaimWithdrawn } from '../domain/user-model';
import type { Watermark } from '../projections/watermark';
import { SubjectErasedError } from '../privacy/keyring';
import { handleCommand, loadAggregate, toNewEvents, type Clock, type CommandContext, type HandledCommand } from './handler';
import { OneAtATime } from '../infra/one-at-a-time';
import { claimReservation, liveOwner } from './reservations';

export interface UserCommandDeps {
  readonly eventStore: EventStore;
  readonly watermark: Watermark;
  readonly clock: Clock;
  readonly readYourWritesTimeoutMs: number;
  /** Deactivation revokes every refresh-token family of the user (decisions §3). */
  readonly revokeSessions: (userId: string, reason: 'deactivated', ctx: CommandContext) => Promise<void>;
  /** Resolves once every API process refuses the access tokens a revocation at `position` ended (503 after a timeout). */
  readonly revocationsApplied?: (position: GlobalPosition) => Promise<void>;
  /**
   * The name of an address's reservation stream: a keyed hash (decisions §2, §11; see
   * src/privacy/reservation-names.ts). Without it, the unkeyed name of earlier versions.
   */
  readonly emailReservationStream?: (email: string) => string;
}

/** The sync-customer body after validation at the edge. */
export interface SyncCustomerInput {
  readonly id: number;
  readonly user_id?: number | undefined;
  readonly company_name?: string | undefined;
  readonly first_name: string;
  readonly last_name: string;
  readonly email: string;
  readonly user_type?: number | undefined;
  readonly mrr?: string | undefined;
  readonly active: boolean;
  readonly contract_language?: string | undefined;
  readonly created_by?: number | undefined;
  readonly status?: number | undefined;
}

export interface SyncCustomerResult {
  readonly user: ExistingUser;
  readonly created: boolean;
}

export interface UserCommands {
  syncCustomer(input: SyncCustomerInput, ctx: CommandContext): Promise<SyncCustomerResult>;
  /** Frees an address (both its keyed and its unkeyed reservation) held by the user: erasure. */
  releaseEmail(email: string, userId: string, ctx: CommandContext): Promise<void>;
}

const crmReservation = reservationDecider('crm-customer');

/**
 * A claim whose holder's stream has not reached the event it was for, this long after it was
 * made, was abandoned: its sync failed between the claim and the append (a store error, a stop).
 * No sync waits anywhere near this long between the two.
 */
export const CLAIM_ABANDONED_AFTER_MS = 10 * 60 * 1000;
const emailReservation = reservationDecider('email');

function crmFields(input: SyncCustomerInput): Partial<CrmFields> {
  const fields: { -readonly [K in keyof CrmFields]?: CrmFields[K] } = {};
  if (input.user_id !== undefined) fields.userId = input.user_id;
  if (input.company_name !== undefined) fields.companyName = input.company_name;
  if (input.user_type !== undefined) fields.userType = input.user_type;
  if (input.mrr !== undefined) fields.mrr = input.mrr;
  if (input.contract_language !== undefined) fields.contractLanguage = input.contract_language;
  if (input.created_by !== undefined) fields.createdBy = input.created_by;
  if (input.status !== undefined) fields.status = input.status;
  return fields;
}

export function createUserCommands(deps: UserCommandDeps): UserCommands {
  const { eventStore, clock } = deps;
  const emailStream = deps.emailReservationStream ?? emailReservationStream;

  /**
   * Addresses claimed before reservation names were keyed stay claimed under the unkeyed name,
   * unless their owner was erased (src/commands/reservations.ts).
   */
  const assertLegacyEmailFree = async (email: string, userId: string): Promise<void> => {
    const legacy = emailReservationStream(email);
    if (legacy === emailStream(email)) return;
    const { state } = await loadAggregate(eventStore, emailReservation.evolve, emailReservation.initialState, legacy);
    if (state.ownerId === null || state.ownerId === userId) return;
    if ((await liveOwner(eventStore, state.ownerId)) !== null) throw new ConflictError(USER_MESSAGES.emailTakenBySyncId);
  };

  /**
   * Frees an address held by the user, under its keyed name and the unkeyed one it is held under
   * if it was claimed before names were keyed. With a `basis` (a sync leaving it), only a claim
   * made for an earlier event of theirs (src/domain/reservation.ts); without one (erasure), any.
   */
  const releaseEmail = async (email: string, userId: string, ctx: CommandContext, basis?: number): Promise<void> => {
    const names = [...new Set([emailStream(email), emailReservationStream(email)])];
    for (const name of names) {
      await handleCommand(eventStore, emailReservation, name, { type: 'Release', data: { ownerId: userId, ...(basis !== undefined ? { basis } : {}) } }, ctx, clock);
    }
  };

  /** Read-your-writes: answer only once the projections have applied what we appended. */
  const settle = async (positions: ReadonlyArray<GlobalPosition | null>): Promise<void> => {
    const last = positions.filter((p): p is GlobalPosition => p !== null).at(-1);
    if (last !== undefined) await deps.watermark.waitFor(last, deps.readYourWritesTimeoutMs);
  };

  /**
   * The user id of a CRM customer: the one already claimed, or a new one claimed now (also
   * when the one claimed was erased: an erasure stopped before it released the CRM id).
   */
  const userIdForCustomer = async (syncId: number, ctx: CommandContext): Promise<{ userId: string; position: GlobalPosition | null }> => {
    const stream = crmCustomerStream(syncId);
    const { state } = await loadAggregate(eventStore, crmReservation.evolve, crmReservation.initialState, stream);
    const owner = await liveOwner(eventStore, state.ownerId);
    if (owner !== null) return { userId: owner, position: null };
    const candidate = randomUUID();
    const claim = { ownerId: candidate, conflictMessage: 'customer claimed concurrently' };
    try {
      const claimed = await handleCommand(
        eventStore,
        crmReservation,
        stream,
        { type: 'Claim', data: state.ownerId === null ? claim : { ...claim, formerOwner: { ownerId: state.ownerId } } },
        ctx,
        clock,
      );
      return { userId: candidate, position: claimed.position };
    } catch (error) {
      if (!(error instanceof ConflictError)) throw error;
      // A concurrent sync of the same customer won: continue as that user.
      const winner = await loadAggregate(eventStore, crmReservation.evolve, crmReservation.initialState, stream);
      if (winner.state.ownerId === null) throw error;
      return { userId: winner.state.ownerId, position: null };
    }
  };

  /**
   * The user's stream decides the sync (expected revision: a concurrent append re-decides).
   * `beforeAppend` sees the state each decision was made on.
   */
  const syncUser = (
    userId: string,
    input: SyncCustomerInput,
    now: string,
    ctx: CommandContext,
    beforeAppend: (state: UserState, revision: bigint) => Promise<void>,
  ): Promise<HandledCommand<UserState, UserEvent>> =>
    handleCommand(
      eventStore,
      userDecider,
      userStream(userId),
      {
        type: 'SyncCustomer',
        data: { userId, syncId: input.id, email: input.email, firstName: input.first_name, lastName: input.last_name, active: input.active, crm: crmFields(input), now },
      },
      ctx,
      clock,
      { beforeAppend },
    );

  /**
   * Whether the holder of an address's claim has left it behind: they do not have it, and their
   * stream is past the event the claim was for (its `basis`: the sync that took it from them
   * stopped before its release, a kill -9 or a store error), or has not reached it long after
   * the claim (CLAIM_ABANDONED_AFTER_MS: the sync that claimed it never appended). A claim
   * still in flight is for an event their stream has not reached; one written before claims had
   * a basis cannot be judged, and stands.
   *
   * A claim judged abandoned by its age is judged by a clock, which may be wrong (stepped,
   * skewed between processes) or meet a sync that is only very late: before `takenBy` takes it
   * over, its holder's stream is fenced (`EmailClaimWithdrawn`, appended at the revision just
   * read), so a sync of theirs decided on that revision can no longer append: it decides again
   * and finds the address taken. If their stream moved meanwhile, nothing is taken over.
   */
  const leftBehind =
    (stream: string, takenBy: string, ctx: CommandContext) =>
    async (held: ReservationState & { readonly ownerId: string }): Promise<boolean> => {
      if (held.basis === undefined || held.basis === null) return false;
      let revision: bigint;
      try {
        const holder = await loadAggregate(eventStore, userDecider.evolve, userDecider.initialState, userStream(held.ownerId));
        const hasIt = holder.state.exists && emailStream(holder.state.email) === stream;
        if (hasIt) return false;
        // Past the event the claim was for, that event being the sync's own: another event there
        // (another sync, a reset asked for, a fence) moved the stream under a sync that, if only
        // late, decides again and claims anew, so the claim is judged by its time.
        if (holder.revision >= BigInt(held.basis) && (await claimLanded(held.ownerId, BigInt(held.basis), stream))) return true;
        revision = holder.revision;
      } catch {
        // Their data cannot be read (a damaged data key): not judged, the claim stands (409, not somebody else's 503).
        return false;
      }
      // Their stream has not reached the event the claim was for: in flight, unless it was
      // made so long ago that its sync can only have failed (no append waits that long).
      const claimedAt = held.claimedAt === undefined || held.claimedAt === null ? Number.NaN : Date.parse(held.claimedAt);
      if (!(clock.now().getTime() - claimedAt > CLAIM_ABANDONED_AFTER_MS)) return false;
      return fence(held.ownerId, revision, takenBy, ctx);
    };

  /**
   * Whether the event a claim on the address of `stream`, made for `revision` of the user's
   * stream, was waiting for landed: the sync that claimed appends `UserSynced` with that address
   * first, at that revision.
   */
  const claimLanded = async (userId: string, revision: bigint, stream: string): Promise<boolean> => {
    for await (const recorded of eventStore.readStream(userStream(userId), { fromRevision: revision, maxCount: 1 })) {
      const email = (recorded.data as { readonly email?: unknown } | null)?.email;
      return recorded.type === 'UserSynced' && typeof email === 'string' && emailStream(email) === stream;
    }
    return false;
  };

  /** Appends `EmailClaimWithdrawn` to the user's stream at `revision`: false when the stream moved since. */
  const fence = async (userId: string, revision: bigint, takenBy: string, ctx: CommandContext): Promise<boolean> => {
    const now = clock.now().toISOString();
    const withdrawn: EmailClaimWithdrawn = { type: 'EmailClaimWithdrawn', data: { userId, takenBy, withdrawnAt: now } };
    try {
      await eventStore.append(userStream(userId), toNewEvents([withdrawn], ctx, now), revision < 0n ? 'no_stream' : revision);
      return true;
    } catch (error) {
      if (error instanceof WrongExpectedRevisionError) return false;
      throw error;
    }
  };

  /** Syncs of one CRM customer, one at a time in this process (see `syncCustomer`). */
  const customers = new OneAtATime();

  const syncNow = async (input: SyncCustomerInput, ctx: CommandContext): Promise<SyncCustomerResult> => {
    const now = clock.now().toISOString();
    const { userId, position: claimPosition } = await userIdForCustomer(input.id, ctx);
    const before = await loadAggregate(eventStore, userDecider.evolve, userDecider.initialState, userStream(userId));
    // Found live above and erased since: the user is gone (their stream takes nothing more);
    // refused before anything is claimed for them. A sync made now creates a new user.
    if (!before.state.exists && before.state.erased === true) throw new UserErasedError();

    // The e-mail is unique across users: it is claimed before the user takes it, for the state
    // the append is decided on (a concurrent sync may have changed the address since `before`),
    // and the address that state had is the one the append leaves, released after it. Both
    // carry the revision of the user's event that gives or takes the address (its `basis`), so
    // a release that comes after a later claim (two processes) changes nothing.
    let claimedEmail = false;
    let previousEmail: string | null = null;
    let basis = 0;
    const claimFor = async (state: UserState, revision: bigint): Promise<void> => {
      previousEmail = state.exists ? state.email : null;
      // The sync's event is the first the append writes: its revision is the next one.
      basis = Number(revision + 1n);
      if (previousEmail === input.email) return;
      await assertLegacyEmailFree(input.email, userId);
      const stream = emailStream(input.email);
      const claimed = await claimReservation(
        eventStore,
        emailReservation,
        stream,
        { ownerId: userId, conflictMessage: USER_MESSAGES.emailTakenBySyncId, basis, at: clock.now().toISOString() },
        ctx,
        clock,
        leftBehind(stream, userId, ctx),
      );
      claimedEmail ||= claimed.events.length > 0;
    };

    const result = await syncUser(userId, input, now, ctx, claimFor).catch(async (error: unknown) => {
      // Erased while this sync ran (their stream ends with UserErased, or their data key is
      // destroyed for good): refused, and the address this sync claimed for them freed.
      if (!(error instanceof SubjectErasedError) && !(error instanceof UserErasedError)) throw error;
      if (claimedEmail) await releaseEmail(input.email, userId, ctx);
      throw new UserErasedError();
    });

    const left: string | null = result.events.length > 0 ? previousEmail : null;
    if (left !== null && left !== input.email) await releaseEmail(left, userId, ctx, basis);

    await settle([claimPosition, result.position]);
    if (!result.state.exists) throw new Error('sync-customer left no user behind');
    // Once the user reads as inactive, no new family can be opened (login checks), nor
    // an old one rotated (refresh checks too, for a family opened in between).
    if (result.events.some((e) => e.type === 'UserDeactivated')) {
      await deps.revokeSessions(userId, 'deactivated', ctx);
      if (result.position !== null) await deps.revocationsApplied?.(result.position);
    }
    const created = result.events.some((e) => e.type === 'UserSynced' && e.data.created);
    return { user: result.state, created };
  };

  return {
    releaseEmail,
    syncCustomer(input, ctx) {
      // Syncs of one customer in this process run one at a time, as a CRM's retries and edits
      // of one record would expect. Across API processes (distributed) they can still meet:
      // their claims and releases then follow the order of their appends to the user's stream
      // (`basis`, src/domain/reservation.ts).
      return customers.run(String(input.id), () => syncNow(input, ctx));
    },
  };
}
