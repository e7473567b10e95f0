/**
 * A synthetic history for the rebuild benchmark: users, sessions and devices with links,
 * renames, token issues, presence changes, heartbeats and deletions, produced by the real
 * deciders (so every event is one the service could have written) and appended straight
 * to an event store. Seeded: the same seed gives the same streams and events.
 */
import { deviceDecider, heartbeatReceived, type DeviceCommand, type DeviceEvent, type DeviceRole, type DeviceState } from '../src/domain/device';
import { deviceStream, heartbeatStream, sessionStream, userStream } from '../src/domain/events';
import type { Actor } from '../src/domain/messages';
import { sessionDecider } from '../src/domain/session';
import { userDecider } from '../src/domain/user';
import type { EventStore, NewEvent } from '../src/infra/eventstore/port';
import { mulberry32 } from '../test/support/prng';

export interface WorkloadOptions {
  /** Stop once at least this many events have been appended. */
  readonly targetEvents: number;
  readonly seed?: number;
  /** Appends in flight at once (they share the embedded log's fsyncs). */
  readonly concurrency?: number;
  readonly onProgress?: (appended: number) => void;
}

export interface WorkloadResult {
  readonly events: number;
  readonly users: number;
  readonly devices: number;
}


function uuidFrom(random: () => number): string {
  const hex = Array.from({ length: 32 }, () => Math.floor(random() * 16).toString(16)).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-4${hex.slice(13, 16)}-a${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}

const START = Date.parse('2026-01-01T00:00:00.000Z');

export async function generateWorkload(store: EventStore, options: WorkloadOptions): Promise<WorkloadResult> {
  const random = mulberry32(options.seed ?? 42);
  const concurrency = options.concurrency ?? 256;
  let clock = START;
  const tick = (ms: number): string => {
    clock += ms;
    return new Date(clock).toISOString();
  };

  let appended = 0;
  let inFlight: Promise<unknown>[] = [];
  let eventCounter = 0;
  const append = async (stream: string, events: readonly { type: string; data: unknown }[], actor: Actor, at: string): Promise<void> => {
    if (events.length === 0) return;
    const requestId = uuidFrom(random);
    const newEvents: NewEvent[] = events.map((e) => ({
      id: uuidFrom(random),
      type: e.type,
      data: e.data,
      metadata: { occurredAt: at, actor, requestId, causationId: requestId, correlationId: requestId },
    }));
    eventCounter += events.length;
    inFlight.push(store.append(stream, newEvents, 'any'));
    if (inFlight.length >= concurrency) {
      await Promise.all(inFlight);
      inFlight = [];
      appended = eventCounter;
      options.onProgress?.(appended);
    }
  };

  // Users, each with a login session or two.
  const users: string[] = [];
  const userCount = Math.max(10, Math.floor(options.targetEvents / 100));
  for (let i = 0; i < userCount; i++) {
    const userId = uuidFrom(random);
    users.push(userId);
    const now = tick(50);
    const events = userDecider.decide(
      {
        type: 'SyncCustomer',
        data: { userId, syncId: 100_000 + i, email: `user${i}@bench.example`, firstName: 'Bench', lastName: `User ${i}`, active: true, now },
      },
      userDecider.initialState(),
    );
    await append(userStream(userId), events, { type: 'crm', id: 'bench' }, now);
    const sessions = 1 + Math.floor(random() * 2);
    for (let s = 0; s < sessions; s++) {
      const familyId = uuidFrom(random);
      const at = tick(20);
      const issued = sessionDecider.decide(
        { type: 'IssueRefresh', data: { familyId, jti: uuidFrom(random), userId, now: at, ip: '127.0.0.1', userAgent: 'bench' } },
        sessionDecider.initialState(),
      );
      await append(sessionStream(familyId), issued, { type: 'user', id: userId }, at);
    }
  }

  // Devices: each lives through a random life until the target is reached.
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
  const roles: readonly DeviceRole[] = ['owner', 'editor', 'viewer'];
  let devices = 0;
  while (eventCounter < options.targetEvents) {
    devices++;
    const uuid = uuidFrom(random);
    const owner = pick(users);
    let state: DeviceState = deviceDecider.initialState();
    const run = async (command: DeviceCommand, actor: Actor, at: string): Promise<readonly DeviceEvent[]> => {
      let events: readonly DeviceEvent[];
      try {
        events = deviceDecider.decide(command, state);
      } catch {
        // A rule the random walk broke (e.g. the last owner leaving): the command is refused, as the API would.
        return [];
      }
      state = events.reduce(deviceDecider.evolve, state);
      await append(deviceStream(uuid), events, actor, at);
      return events;
    };
    const asOwner: Actor = { type: 'user', id: owner };
    let now = tick(100);
    await run(
      {
        type: 'RegisterDevice',
        data: {
          id: uuidFrom(random),
          uuid,
          deviceId: `HUB-${devices}`,
          name: `Hub ${devices}`,
          ipAddress: '192.168.1.2',
          metadata: { fw: '1.0.0' },
          actorUserId: owner,
          linkId: uuidFrom(random),
          ownedDeviceCount: 0,
          maxDevicesPerUser: 100,
          now,
        },
      },
      asOwner,
      now,
    );
    const steps = 20 + Math.floor(random() * 40);
    for (let step = 0; step < steps && state.status === 'active'; step++) {
      now = tick(1000 + Math.floor(random() * 30_000));
      const roll = random();
      if (roll < 0.7) {
        // A heartbeat: the tiny event, plus a transition when the device was offline.
        const command: DeviceCommand = { type: 'RecordHeartbeat', data: { uuid, tokenGen: state.gen, now, ...(random() < 0.05 ? { ipAddress: `192.168.1.${Math.floor(random() * 250)}` } : {}) } };
        await run(command, { type: 'device', id: uuid }, now);
        await append(heartbeatStream(uuid), [heartbeatReceived(command)], { type: 'device', id: uuid }, now);
      } else if (roll < 0.78) {
        await run({ type: 'LinkUser', data: { uuid, actorUserId: owner, targetUserId: pick(users), role: pick(roles), linkId: uuidFrom(random), now } }, asOwner, now);
      } else if (roll < 0.82) {
        const linked = Object.values(state.status === 'active' ? state.links : {}).filter((l) => l.isActive && l.userId !== owner);
        if (linked.length > 0) {
          await run({ type: 'UnlinkUser', data: { uuid, actorUserId: owner, targetUserId: pick(linked).userId, now } }, asOwner, now);
        }
      } else if (roll < 0.88) {
        await run({ type: 'UpdateDevice', data: { uuid, actorUserId: owner, changes: { name: `Hub ${devices}.${step}` }, now } }, asOwner, now);
      } else if (roll < 0.92) {
        await run({ type: 'IssueDeviceToken', data: { uuid, actorUserId: owner, now } }, asOwner, now);
      } else if (roll < 0.99) {
        await run(
          { type: 'MarkOffline', data: { uuid, lastHeartbeatAt: null, offlineAfterSeconds: 0, now } },
          { type: 'system', id: 'expiry' },
          now,
        );
      } else {
        await run({ type: 'DeleteDevice', data: { uuid, actorUserId: owner, now } }, asOwner, now);
      }
    }
  }
  await Promise.all(inFlight);
  options.onProgress?.(eventCounter);
  return { events: eventCounter, users: users.length, devices };
}
