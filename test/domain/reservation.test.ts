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

  test('basis: a claim and a release follow the order of the owner\'s own events, not the order they come in', () => {
    const claimedAt = (ownerId: string, basis: number): ReservationEvent => ({ type: 'ReservationClaimed', data: { kind: 'email', ownerId, basis } });
    const releasedAt = (ownerId: string, basis: number): ReservationEvent => ({ type: 'ReservationReleased', data: { kind: 'email', ownerId, basis } });
    // Claimed for the user's event 2; a release for their event 1 (a sync that left it earlier, answered late) changes nothing.
    email.given([claimedAt('u1', 2)]).when({ type: 'Release', data: { ownerId: 'u1', basis: 1 } }).thenNothing();
    email.given([claimedAt('u1', 2)]).when({ type: 'Release', data: { ownerId: 'u1', basis: 2 } }).thenNothing();
    // A release for a later event does.
    email.given([claimedAt('u1', 2)]).when({ type: 'Release', data: { ownerId: 'u1', basis: 3 } }).then([releasedAt('u1', 3)]);
    // The owner's claim for a later event raises the basis (an event of its own); for an earlier one, nothing.
    email.given([claimedAt('u1', 0)]).when({ type: 'Claim', data: { ownerId: 'u1', conflictMessage: taken, basis: 2 } }).then([claimedAt('u1', 2)]);
    email.given([claimedAt('u1', 2)]).when({ type: 'Claim', data: { ownerId: 'u1', conflictMessage: taken, basis: 1 } }).thenNothing();
    // Claims and releases written before (no basis), and releases without one (an erasure): whatever the order.
    email.given([claimed('u1')]).when({ type: 'Release', data: { ownerId: 'u1', basis: 0 } }).then([releasedAt('u1', 0)]);
    email.given([claimedAt('u1', 5)]).when({ type: 'Release', data: { ownerId: 'u1' } }).then([released('u1')]);
    email.given([claimed('u1')]).when({ type: 'Claim', data: { ownerId: 'u1', conflictMessage: taken, basis: 4 } }).then([claimedAt('u1', 4)]);
    // Another owner's claim is refused whatever its basis.
    email.given([claimedAt('u1', 1)]).when({ type: 'Claim', data: { ownerId: 'u2', conflictMessage: taken, basis: 9 } }).thenThrows(ConflictError, taken);
  });

  test('a former owner left behind is taken over only while the claim judged stale still stands', () => {
    const claimedAt = (ownerId: string, basis: number): ReservationEvent => ({ type: 'ReservationClaimed', data: { kind: 'email', ownerId, basis } });
    const former = { ownerId: 'u1', basis: 3 };
    email.given([claimedAt('u1', 3)]).when({ type: 'Claim', data: { ownerId: 'u2', conflictMessage: taken, formerOwner: former } }).then([released('u1'), claimed('u2')]);
    // u1 claimed it again meanwhile (a sync of theirs setting it back): it is theirs.
    email.given([claimedAt('u1', 3), claimedAt('u1', 5)]).when({ type: 'Claim', data: { ownerId: 'u2', conflictMessage: taken, formerOwner: former } }).thenThrows(ConflictError, taken);
    // A claim written before claims had a basis is not the one judged.
    email.given([claimed('u1')]).when({ type: 'Claim', data: { ownerId: 'u2', conflictMessage: taken, formerOwner: former } }).thenThrows(ConflictError, taken);
  });

  test('a claim made again at the same basis (a sync tried again) renews its time; a takeover judged on the old time is refused', () => {
    const at = (ownerId: string, basis: number, when: string): ReservationEvent => ({ type: 'ReservationClaimed', data: { kind: 'email', ownerId, basis, at: when } });
    const [t0, t1] = ['2026-01-01T00:00:00.000Z', '2026-01-01T00:11:00.000Z'];
    email.given([at('u1', 1, t0)]).when({ type: 'Claim', data: { ownerId: 'u1', conflictMessage: taken, basis: 1, at: t1 } }).then([at('u1', 1, t1)]);
    email.given([at('u1', 1, t1)]).when({ type: 'Claim', data: { ownerId: 'u1', conflictMessage: taken, basis: 1, at: t1 } }).thenNothing();
    const judged = { ownerId: 'u1', basis: 1, claimedAt: t0 };
    email.given([at('u1', 1, t0)]).when({ type: 'Claim', data: { ownerId: 'u2', conflictMessage: taken, formerOwner: judged } }).then([released('u1'), claimed('u2')]);
    email.given([at('u1', 1, t0), at('u1', 1, t1)]).when({ type: 'Claim', data: { ownerId: 'u2', conflictMessage: taken, formerOwner: judged } }).thenThrows(ConflictError, taken);
  });

  test('a value held by another owner is refused with the message given', () => {
    email.given([claimed('u1')]).when({ type: 'Claim', data: { ownerId: 'u2', conflictMessage: taken } }).thenThrows(ConflictError, taken);
  });

  test('a value held by an owner named as erased is released and claimed in one decision', () => {
    email.given([claimed('u1')]).when({ type: 'Claim', data: { ownerId: 'u2', conflictMessage: taken, formerOwner: { ownerId: 'u1' } } }).then([released('u1'), claimed('u2')]);
    const { state } = email.given([claimed('u1')]).when({ type: 'Claim', data: { ownerId: 'u2', conflictMessage: taken, formerOwner: { ownerId: 'u1' } } }).result();
    expect(state.ownerId).toBe('u2');
  });

  test('naming an erased owner frees nothing held by someone else (a concurrent claim won)', () => {
    email.given([claimed('u1'), released('u1'), claimed('u3')]).when({ type: 'Claim', data: { ownerId: 'u2', conflictMessage: taken, formerOwner: { ownerId: 'u1' } } }).thenThrows(ConflictError, taken);
    email.given([]).when({ type: 'Claim', data: { ownerId: 'u2', conflictMessage: taken, formerOwner: { ownerId: 'u1' } } }).then([claimed('u2')]);
  });

  test('a release by someone who does not hold the value changes nothing', () => {
    email.given([claimed('u1'), released('u1'), claimed('u2')]).when({ type: 'Release', data: { ownerId: 'u1' } }).thenNothing();
  });
});
