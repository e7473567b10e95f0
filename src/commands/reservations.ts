import { ConflictError } from '../domain/errors';
import { userStream } from '../domain/events';
import type { ReservationCommand, ReservationEvent, ReservationState } from '../domain/reservation';
import type { Decider } from '../domain/messages';
import type { EventStore } from '../infra/eventstore/port';
import { handleCommand, loadAggregate, type Clock, type CommandContext, type HandledCommand } from './handler';

/**
 * Whether a user exists (`live`), was erased (their stream ends with `UserErased`) or never was
 * (`none`: no stream; an id claimed by a sync that was refused). Nothing is appended to a user's
 * stream after `UserErased` (the user decider refuses it; a later sync of their CRM id creates a
 * new user), so `erased` stays true. Only the type of the last event that is not a fence
 * (`EmailClaimWithdrawn`) is read: it is not opened, so the answer never depends on the user's
 * data key (a damaged one answers 503 for their own reads only).
 */
export async function userStatus(store: EventStore, userId: string): Promise<'live' | 'erased' | 'none'> {
  // The last event; only when it is a fence, the ones before it (fences are rare).
  let fenced = false;
  for (const maxCount of [1, undefined]) {
    for await (const recorded of store.readStream(userStream(userId), { direction: 'backwards', sealed: true, ...(maxCount !== undefined ? { maxCount } : {}) })) {
      // A fence (src/commands/users.ts) says nothing of the user: a stream of fences only is nobody's.
      if (recorded.type === 'EmailClaimWithdrawn') {
        fenced = true;
        continue;
      }
      return recorded.type === 'UserErased' ? 'erased' : 'live';
    }
    if (!fenced) break;
  }
  return 'none';
}

/** Whether a user was erased (userStatus). */
export async function wasErased(store: EventStore, userId: string): Promise<boolean> {
  return (await userStatus(store, userId)) === 'erased';
}

/**
 * The owner of a reservation, unless that owner was erased: the e-mail and the CRM id of an
 * erased person are free (decisions §11) from the moment `UserErased` is in the log. The
 * `ReservationReleased` the erasure appends after it may never come (a kill -9 in between),
 * so what holds the value is a live owner, not the last claim.
 */
export async function liveOwner(store: EventStore, ownerId: string | null): Promise<string | null> {
  return ownerId !== null && (await wasErased(store, ownerId)) ? null : ownerId;
}

/**
 * Claims a reservation for `ownerId`. One still held by an erased user, or by one whose claim
 * `isStale` judges left behind (their release lost), is released and claimed in one append
 * (expected revision: a concurrent claim makes one of them re-decide). Any other owner:
 * ConflictError with `conflictMessage`.
 */
export async function claimReservation(
  store: EventStore,
  decider: Decider<ReservationState, ReservationCommand, ReservationEvent>,
  stream: string,
  claim: { readonly ownerId: string; readonly conflictMessage: string; readonly basis?: number; readonly at?: string },
  ctx: CommandContext,
  clock: Clock,
  isStale?: (held: ReservationState & { readonly ownerId: string }) => Promise<boolean>,
): Promise<HandledCommand<ReservationState, ReservationEvent>> {
  try {
    return await handleCommand(store, decider, stream, { type: 'Claim', data: claim }, ctx, clock);
  } catch (error) {
    if (!(error instanceof ConflictError)) throw error;
    const { state } = await loadAggregate(store, decider.evolve, decider.initialState, stream);
    const holder = state.ownerId;
    if (holder === null || holder === claim.ownerId) throw error;
    if ((await liveOwner(store, holder)) === null) {
      return handleCommand(store, decider, stream, { type: 'Claim', data: { ...claim, formerOwner: { ownerId: holder } } }, ctx, clock);
    }
    if (isStale !== undefined && (await isStale({ ...state, ownerId: holder }))) {
      return handleCommand(store, decider, stream, { type: 'Claim', data: { ...claim, formerOwner: { ownerId: holder, basis: state.basis ?? null, claimedAt: state.claimedAt ?? null } } }, ctx, clock);
    }
    throw error;
  }
}
