import type { Projection } from './projection';
import { accessRevocationsProjection } from './access-revocations';
import { devicesProjection } from './devices';
import { sessionsProjection } from './sessions';
import { usersProjection } from './users';

/**
 * Bump whenever a projection's documents change (fields, meaning, which events it reads):
 * embedded start snapshots of another version are then stale and the read models are
 * replayed from the log (src/runtime/snapshot.ts).
 */
export const READ_MODEL_VERSION = 2;

/** Every read model the service keeps, in the order events are applied to them. */
export function allProjections(): readonly Projection[] {
  return [usersProjection, sessionsProjection, devicesProjection, accessRevocationsProjection];
}
