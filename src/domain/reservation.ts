import { createHash } from 'node:crypto';
import { ConflictError } from './errors';
import type { Decider } from './messages';

/**
 * Uniqueness across aggregates (decisions §2): a value (an e-mail address, a CRM customer
 * id) is claimed by appending to a stream of its own, so two concurrent commands cannot
 * both take it — the second append fails on its expected revision and re-decides.
 */

/**
 * `basis` (e-mail reservations written by sync-customer): the revision, in the owner's own
 * stream, of the event that gives them the value (a claim) or takes it from them (a release).
 * Two syncs of one customer in two processes can claim and release an address in another order
 * than their appends to the user's stream; a release whose basis is not above the claim's
 * changes nothing, so the reservation follows the user's stream. Absent (older events, the
 * CRM id, an erasure): a claim or a release whatever the order.
 */
export type ReservationEvent =
  | {
      readonly type: 'ReservationClaimed';
      /** `at`: when a claim with a basis was made (ISO 8601), to tell one in flight from one abandoned. */
      readonly data: { readonly kind: ReservationKind; readonly ownerId: string; readonly basis?: number; readonly at?: string };
    }
  | { readonly type: 'ReservationReleased'; readonly data: { readonly kind: ReservationKind; readonly ownerId: string; readonly basis?: number } };

export type ReservationCommand =
  | {
      readonly type: 'Claim';
      readonly data: {
        readonly ownerId: string;
        readonly conflictMessage: string;
        /**
         * A former owner known not to hold the value any more, still holding it: released and the
         * value claimed in the same append. Erased (their stream ends with `UserErased`: decisions
         * §11), any claim of theirs; or past the event their claim was for without the value (its
         * release lost to a stop: src/commands/users.ts), only while that claim (`basis`) stands.
         */
        readonly formerOwner?: { readonly ownerId: string; readonly basis?: number | null; readonly claimedAt?: string | null };
        /** See ReservationEvent: an owner's claim with a higher basis than theirs is appended again, raising it. */
        readonly basis?: number;
        /** When the claim is made (kept with a basis). */
        readonly at?: string;
      };
    }
  | { readonly type: 'Release'; readonly data: { readonly ownerId: string; readonly basis?: number } };

export type ReservationKind = 'email' | 'crm-customer';

export interface ReservationState {
  readonly ownerId: string | null;
  /** The basis of the owner's last claim; null when it had none. */
  readonly basis?: number | null;
  /** When that claim was made; null when it did not say. */
  readonly claimedAt?: string | null;
}

/** Stream names never hold the e-mail itself: the address is hashed. */
export function emailReservationStream(email: string): string {
  return `reservation-email-${createHash('sha256').update(email.trim().toLowerCase()).digest('hex')}`;
}

export function crmCustomerStream(syncId: number): string {
  return `reservation-crm-customer-${syncId}`;
}

export function reservationDecider(kind: ReservationKind): Decider<ReservationState, ReservationCommand, ReservationEvent> {
  return {
    initialState: () => ({ ownerId: null, basis: null, claimedAt: null }),
    evolve: (state, event) => {
      switch (event.type) {
        case 'ReservationClaimed':
          return { ownerId: event.data.ownerId, basis: event.data.basis ?? null, claimedAt: event.data.at ?? null };
        case 'ReservationReleased':
          return state.ownerId === event.data.ownerId ? { ownerId: null, basis: null, claimedAt: null } : state;
        default: {
          const _exhaustive: never = event;
          return _exhaustive;
        }
      }
    },
    decide: (command, state) => {
      switch (command.type) {
        case 'Claim': {
          const c = command.data;
          const claimed: ReservationEvent = {
            type: 'ReservationClaimed',
            data: { kind, ownerId: c.ownerId, ...(c.basis !== undefined ? { basis: c.basis, ...(c.at !== undefined ? { at: c.at } : {}) } : {}) },
          };
          if (state.ownerId === c.ownerId) {
            if (c.basis === undefined) return [];
            const held = state.basis ?? null;
            // A higher basis raises the claim; the same one made again (a sync tried again) renews
            // its time, so a claim whose sync is in flight is never one abandoned long ago.
            const renewed = held === c.basis && c.at !== undefined && c.at !== (state.claimedAt ?? null);
            return held === null || c.basis > held || renewed ? [claimed] : [];
          }
          const former = c.formerOwner;
          const stillTheOneJudged =
            former !== undefined &&
            (former.basis === undefined || (state.basis ?? null) === former.basis) &&
            (former.claimedAt === undefined || (state.claimedAt ?? null) === former.claimedAt);
          if (state.ownerId !== null && former !== undefined && state.ownerId === former.ownerId && stillTheOneJudged) {
            return [{ type: 'ReservationReleased', data: { kind, ownerId: state.ownerId } }, claimed];
          }
          if (state.ownerId !== null) throw new ConflictError(c.conflictMessage);
          return [claimed];
        }
        case 'Release': {
          const c = command.data;
          if (state.ownerId !== c.ownerId) return [];
          // A claim made for a later event of the owner's stream stands.
          if (c.basis !== undefined && state.basis !== undefined && state.basis !== null && c.basis <= state.basis) return [];
          return [{ type: 'ReservationReleased', data: { kind, ownerId: c.ownerId, ...(c.basis !== undefined ? { basis: c.basis } : {}) } }];
        }
        default: {
          const _exhaustive: never = command;
          return _exhaustive;
        }
      }
    },
  };
}
