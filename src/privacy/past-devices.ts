import { deviceDecider, type ActiveDevice, type DeviceState } from '../domain/device';
import { deviceStream, STREAM_PREFIXES } from '../domain/events';
import type { EventStore, RecordedEvent } from '../infra/eventstore/port';

/**
 * What the log holds of a person on device streams, including devices deleted or left since
 * (the devices read model forgets a device once it is deleted). Found by one pass over the
 * device streams of the log (heartbeats and sessions are other streams): its cost grows with
 * the number of device events, which is why only the export and the erasure, both rare and
 * rate-limited, use it.
 */
export interface DeviceTrail {
  /** Events on device streams the person caused as actor, in log order. */
  readonly acted: readonly RecordedEvent[];
  /** Uuids of the devices the person was ever linked to or acted on. */
  readonly devices: readonly string[];
}

export async function deviceTrailOf(eventStore: EventStore, userId: string): Promise<DeviceTrail> {
  const acted: RecordedEvent[] = [];
  const devices = new Set<string>();
  const subscription = eventStore.subscribe({ streamPrefixes: [STREAM_PREFIXES.device] });
  try {
    for await (const item of subscription) {
      if (item.kind === 'caught-up') break;
      const { event } = item;
      const uuid = event.streamName.slice(STREAM_PREFIXES.device.length);
      const byThem = event.metadata.actor.type === 'user' && event.metadata.actor.id === userId;
      const linksThem = event.type === 'UserLinked' && (event.data as { userId?: unknown }).userId === userId;
      if (byThem) acted.push(event);
      if (byThem || linksThem) devices.add(uuid);
    }
  } finally {
    await subscription.close();
  }
  return { acted, devices: [...devices] };
}

/**
 * Whether a device's data key holds only data of the person's household: the device is deleted
 * now, and at its last deletion the person was its only active owner. A device registered
 * again since by another household shares its data key (one key per device uuid) with that
 * household's registration, so its key is kept (their data stays readable).
 */
export async function deletedAsSoleOwner(eventStore: EventStore, uuid: string, userId: string): Promise<boolean> {
  let state: DeviceState = deviceDecider.initialState();
  // The state before the last event: an erasure ends the person's own link (`UserUnlinked`)
  // in the same append as the deletion, so their ownership is read from before that.
  let before: DeviceState = state;
  let previous: Parameters<typeof deviceDecider.evolve>[1] | null = null;
  let soleAtLastDeletion = false;
  for await (const recorded of eventStore.readStream(deviceStream(uuid))) {
    const event = { type: recorded.type, data: recorded.data } as Parameters<typeof deviceDecider.evolve>[1];
    if (event.type === 'DeviceDeleted' && state.status === 'active') {
      let at: ActiveDevice = state;
      if (previous?.type === 'UserUnlinked' && previous.data.userId === userId && before.status === 'active') at = before;
      const owners = Object.values(at.links).filter((l) => l.isActive && l.role === 'owner');
      soleAtLastDeletion = owners.length === 1 && owners[0]?.userId === userId;
    }
    before = state;
    previous = event;
    state = deviceDecider.evolve(state, event);
  }
  return state.status === 'deleted' && soleAtLastDeletion;
}
