import { sessionStream, userStream } from '../domain/events';
import type { RevokeReason } from '../domain/session';
import { comparePositions, type EventStore, type GlobalPosition } from '../infra/eventstore/port';

/**
 * Whether a refresh-token family was ended by a cut of its user — a deactivation or a password
 * reset after it was opened, or an account inactive when it was opened — as the log says it,
 * in log order (decisions §3). Read from the event store, never from the sessions read model:
 * a family opened just before a cut, and not yet projected when the cut listed the families
 * to revoke, is still caught here the first time it is presented.
 *
 * Costs two stream reads (the family's first event, the user's stream), once per refresh.
 */
export async function familyCut(eventStore: EventStore, userId: string, familyId: string): Promise<RevokeReason | null> {
  let opened: GlobalPosition | null = null;
  for await (const event of eventStore.readStream(sessionStream(familyId), { maxCount: 1 })) opened = event.position;
  if (opened === null) return null;

  let inactiveAtOpening = false;
  for await (const event of eventStore.readStream(userStream(userId))) {
    const after = comparePositions(event.position, opened) > 0;
    switch (event.type) {
      case 'UserDeactivated':
        if (after) return 'deactivated';
        inactiveAtOpening = true;
        break;
      case 'UserReactivated':
        if (!after) inactiveAtOpening = false;
        break;
      case 'PasswordChanged':
        if (after && (event.data as { reason?: unknown }).reason === 'reset') return 'password-reset';
        break;
      default:
        break;
    }
  }
  return inactiveAtOpening ? 'deactivated' : null;
}
