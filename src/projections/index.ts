import type { Projection } from './projection';
import { devicesProjection } from './devices';
import { sessionsProjection } from './sessions';
import { usersProjection } from './users';

/** Every read model the service keeps, in the order events are applied to them. */
export function allProjections(): readonly Projection[] {
  return [usersProjection, sessionsProjection, devicesProjection];
}
