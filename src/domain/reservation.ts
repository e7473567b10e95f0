import { createHash } from 'node:crypto';
import { ConflictError } from './errors';
import type { Decider } from './messages';

/**
 * Uniqueness across aggregates (decisions §2): a value (an e-mail address, a CRM customer
 * id) is claimed by appending to a stream of its own, so two concurrent commands cannot
 * both take it — the second append fails on its expected revision and re-decides.
 */

export type ReservationEvent =
  | { readonly type: 'ReservationClaimed'; readonly data: { readonly kind: ReservationKind; readonly ownerId: string } }
  | { readonly type: 'ReservationReleased'; readonly data: { readonly kind: ReservationKind; readonly ownerId: string } };

export type ReservationCommand =
  | {
      readonly type: 'Claim';
      readonly data: {
        readonly ownerId: string;
        readonly conflictMessage: string;
        /**
         * A former owner known to be erased (their stream ends with `UserErased`): still holding
         * the value, it is released and the value claimed in the same append (decisions §11).
         */
        readonly erasedOwnerId?: string;
      };
    }
  | { readonly type: 'Release'; readonly data: { readonly ownerId: string } };

export type ReservationKind = 'email' | 'crm-customer';

export interface ReservationState {
  readonly ownerId: string | null;
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
    initialState: () => ({ ownerId: null }),
    evolve: (state, event) => {
      switch (event.type) {
        case 'ReservationClaimed':
          return { ownerId: event.data.ownerId };
        case 'ReservationReleased':
          return state.ownerId === event.data.ownerId ? { ownerId: null } : state;
        default: {
          const _exhaustive: never = event;
          return _exhaustive;
        }
      }
    },
    decide: (command, state) => {
      switch (command.type) {
        case 'Claim':
          if (state.ownerId === command.data.ownerId) return [];
          if (state.ownerId !== null && state.ownerId === command.data.erasedOwnerId) {
            return [
              { type: 'ReservationReleased', data: { kind, ownerId: state.ownerId } },
              { type: 'ReservationClaimed', data: { kind, ownerId: command.data.ownerId } },
            ];
          }
          if (state.ownerId !== null) throw new ConflictError(command.data.conflictMessage);
          return [{ type: 'ReservationClaimed', data: { kind, ownerId: command.data.ownerId } }];
        case 'Release':
          if (state.ownerId !== command.data.ownerId) return [];
          return [{ type: 'ReservationReleased', data: { kind, ownerId: command.data.ownerId } }];
        default: {
          const _exhaustive: never = command;
          return _exhaustive;
        }
      }
    },
  };
}
