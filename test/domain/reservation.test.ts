import { ConflictError } from '../../src/domain/errors';
import { reservationDecider, type ReservationEvent } from '../../src/domain/reservation';
import { spec } from '../support/decider-spec';

const email = spec(reservationDecider('email'));
const taken = 'Email already exists with a different sync_id';
const claimed = (ownerId: string): ReservationEvent => ({ type: 'ReservationClaimed', data: { kind: 'email', ownerId } });
const released = (ownerId: string): ReservationEvent => ({ type: 'ReservationReleased', data: { kind: 'email', ownerId } });

describe('reservation decider', () => {
  test('a free value is claimed; claimed again by its owner, nothing', () => {
    email.given([]).when({ type: 'Claim', data: { ownerId: 'u1', conflictMessage: taken } }).then([claimed('u1')]);
    email.given([claimed('u1')]).when({ type: 'Claim', data: { ownerId: 'u1', conflictMessage: taken } }).thenNothing();
    email.given([claimed('u1'), released('u1')]).when({ type: 'Claim', data: { ownerId: 'u2', conflictMessage: taken } }).then([claimed('u2')]);
  });

  test('a value held by another owner is refused with the message given', () => {
    email.given([claimed('u1')]).when({ type: 'Claim', data: { ownerId: 'u2', conflictMessage: taken } }).thenThrows(ConflictError, taken);
  });

  test('a value held by an owner named as erased is released and claimed in one decision', () => {
    email.given([claimed('u1')]).when({ type: 'Claim', data: { ownerId: 'u2', conflictMessage: taken, erasedOwnerId: 'u1' } }).then([released('u1'), claimed('u2')]);
    const { state } = email.given([claimed('u1')]).when({ type: 'Claim', data: { ownerId: 'u2', conflictMessage: taken, erasedOwnerId: 'u1' } }).result();
    expect(state.ownerId).toBe('u2');
  });

  test('naming an erased owner frees nothing held by someone else (a concurrent claim won)', () => {
    email.given([claimed('u1'), released('u1'), claimed('u3')]).when({ type: 'Claim', data: { ownerId: 'u2', conflictMessage: taken, erasedOwnerId: 'u1' } }).thenThrows(ConflictError, taken);
    email.given([]).when({ type: 'Claim', data: { ownerId: 'u2', conflictMessage: taken, erasedOwnerId: 'u1' } }).then([claimed('u2')]);
  });

  test('a release by someone who does not hold the value changes nothing', () => {
    email.given([claimed('u1'), released('u1'), claimed('u2')]).when({ type: 'Release', data: { ownerId: 'u1' } }).thenNothing();
  });
});
