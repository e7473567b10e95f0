/**
 * What auditors read (decisions §9): a device's history and its state at an instant,
 * straight from the event store. Both documents are a function of the stored events alone
 * (no read model, no clock), so the API and `npm run replay` print the same JSON.
 */
import { evolveDevice, initialDeviceState, type DeviceEvent, type DeviceRole, type DeviceState, type JsonObject } from '../domain/device';
import { deviceStream, heartbeatStream, isHomeHubEventType } from '../domain/events';
import type { Actor } from '../domain/messages';
import { comparePositions, type EventStore, type GlobalPosition, type RecordedEvent } from '../infra/eventstore/port';

export const HISTORY_DEFAULT_LIMIT = 50;
export const HISTORY_MAX_LIMIT = 100;

export interface HistoryItem {
  /** The full stream name: `device-<uuid>`, or `heartbeat-<uuid>` for merged heartbeats. */
  readonly stream: string;
  /** 0-based revision within that stream. */
  readonly revision: number;
  readonly type: string;
  readonly data: unknown;
  readonly occurredAt: string;
  readonly actor: Actor;
  readonly requestId: string;
}

/**
 * Where the current registration of a device begins (its latest `DeviceRegistered`). An
 * owner's view starts there (decisions §9): after a deletion and a re-registration by
 * someone else, the earlier household's users, addresses and metadata stay out of sight.
 */
export interface RegistrationStart {
  readonly revision: bigint;
  readonly position: GlobalPosition;
  readonly occurredAt: string;
}

/** The latest `DeviceRegistered` of the device, read backwards from the end of its stream. */
export async function currentRegistration(store: EventStore, uuid: string): Promise<RegistrationStart | null> {
  for await (const event of store.readStream(deviceStream(uuid), { direction: 'backwards' })) {
    if (event.type === 'DeviceRegistered') return { revision: event.revision, position: event.position, occurredAt: event.metadata.occurredAt };
  }
  return null;
}

export interface HistoryQuery {
  /** The last device-stream revision already seen (exclusive); from the start when absent. */
  readonly after?: number | undefined;
  readonly limit: number;
  readonly includeHeartbeats: boolean;
  /** The last heartbeat-stream revision already seen (exclusive), with `includeHeartbeats`. */
  readonly heartbeatAfter?: number | undefined;
  /** Only what happened from here on (an owner's view: the current registration). */
  readonly since?: RegistrationStart | null | undefined;
}

export interface HistoryPage {
  readonly data: readonly HistoryItem[];
  readonly meta: {
    readonly uuid: string;
    readonly limit: number;
    readonly after: number | null;
    /** Pass back as `after` for the next page: the last device revision on this page, else `after`. */
    readonly nextAfter: number | null;
    readonly hasMore: boolean;
    /** Only with `include=heartbeats`: the same cursor pair for the heartbeat stream. */
    readonly heartbeatAfter?: number | null;
    readonly nextHeartbeatAfter?: number | null;
  };
}

function historyItem(event: RecordedEvent): HistoryItem {
  return {
    stream: event.streamName,
    revision: Number(event.revision),
    type: event.type,
    data: event.data,
    occurredAt: event.metadata.occurredAt,
    actor: event.metadata.actor,
    requestId: event.metadata.requestId,
  };
}

/** Up to `maxCount` events after revision `after`, skipping those recorded before `since`. */
async function readAfter(
  store: EventStore,
  stream: string,
  after: number | undefined,
  maxCount: number,
  since: GlobalPosition | null,
): Promise<RecordedEvent[]> {
  const events: RecordedEvent[] = [];
  const fromRevision = after === undefined ? 0n : BigInt(after + 1);
  // Without a lower bound, `maxCount` caps the read; with one, events before it are skipped on the way.
  const options = since === null ? { fromRevision, maxCount } : { fromRevision };
  for await (const event of store.readStream(stream, options)) {
    if (since !== null && comparePositions(event.position, since) < 0) continue;
    events.push(event);
    if (events.length >= maxCount) break;
  }
  return events;
}

/**
 * One page of `device-<uuid>`, oldest first. With heartbeats, `heartbeat-<uuid>` is merged
 * in the order the store recorded the events (global position: the order they happened),
 * and each stream keeps its own cursor: the page holds the `limit` oldest events after both.
 */
export async function deviceHistory(store: EventStore, uuid: string, query: HistoryQuery): Promise<HistoryPage> {
  const after = query.after ?? null;
  const since = query.since ?? null;
  // An owner's cursor never reaches back before the current registration.
  const deviceAfter = since === null ? query.after : Math.max(query.after ?? -1, Number(since.revision) - 1);
  // One more than a page from each stream tells whether anything is left.
  const device = await readAfter(store, deviceStream(uuid), deviceAfter === undefined || deviceAfter < 0 ? undefined : deviceAfter, query.limit + 1, null);
  if (!query.includeHeartbeats) {
    const page = device.slice(0, query.limit);
    const last = page.at(-1);
    return {
      data: page.map(historyItem),
      meta: { uuid, limit: query.limit, after, nextAfter: last === undefined ? after : Number(last.revision), hasMore: device.length > query.limit },
    };
  }

  const heartbeats = await readAfter(store, heartbeatStream(uuid), query.heartbeatAfter, query.limit + 1, since?.position ?? null);
  const merged = [...device, ...heartbeats].sort((a, b) => comparePositions(a.position, b.position));
  const page = merged.slice(0, query.limit);
  const lastOf = (stream: string, fallback: number | null): number | null => {
    const last = page.filter((e) => e.streamName === stream).at(-1);
    return last === undefined ? fallback : Number(last.revision);
  };
  const heartbeatAfter = query.heartbeatAfter ?? null;
  return {
    data: page.map(historyItem),
    meta: {
      uuid,
      limit: query.limit,
      after,
      nextAfter: lastOf(deviceStream(uuid), after),
      hasMore: merged.length > query.limit,
      heartbeatAfter,
      nextHeartbeatAfter: lastOf(heartbeatStream(uuid), heartbeatAfter),
    },
  };
}

// ---------------------------------------------------------------------------------------
// State at an instant

export interface StateUser {
  readonly id: string;
  readonly role: DeviceRole;
  readonly linkId: string;
  readonly createdAt: string;
  readonly updatedAt: string;
}

export interface DeviceStateAt {
  readonly uuid: string;
  readonly at: string;
  /** Revision of the last event folded in; null when the device did not exist yet. */
  readonly revision: number | null;
  /** `none` before the first registration, `deleted` between a deletion and a re-registration. */
  readonly status: DeviceState['status'];
  readonly device: {
    readonly id: string;
    readonly uuid: string;
    readonly deviceId: string;
    readonly name: string;
    readonly ipAddress: string | null;
    readonly port: string;
    readonly metadata: JsonObject | null;
    readonly isOnline: boolean;
    /** The last heartbeat by that instant (of this registration), as `GET /devices/:id` shows it then. */
    readonly lastSeenAt: string | null;
    /** Token generation then. */
    readonly gen: number;
    readonly createdAt: string;
    readonly updatedAt: string;
  } | null;
  /** The users with an active link at that instant and their roles (none once deleted). */
  readonly users: readonly StateUser[];
}

/**
 * The device's last heartbeat by `until` (epoch ms) of the registration that began at
 * `registeredAt`: the newest `HeartbeatReceived` of `heartbeat-<uuid>` that occurred by
 * then, or `known` (what the device stream recorded: the heartbeat that last changed
 * presence) when none is newer. Read backwards from the end, down to `known` at most.
 */
async function lastSeenBy(store: EventStore, uuid: string, until: number, registeredAt: GlobalPosition, known: string | null): Promise<string | null> {
  const floor = known === null ? -Infinity : Date.parse(known);
  for await (const event of store.readStream(heartbeatStream(uuid), { direction: 'backwards' })) {
    if (comparePositions(event.position, registeredAt) <= 0) break;
    const occurredAt = Date.parse(event.metadata.occurredAt);
    if (occurredAt < floor) break;
    if (occurredAt > until || event.type !== 'HeartbeatReceived') continue;
    const receivedAt = (event.data as { receivedAt?: unknown }).receivedAt;
    if (typeof receivedAt === 'string' && (known === null || receivedAt > known)) return receivedAt;
    break;
  }
  return known;
}

/**
 * The device as it was at `at` (ISO 8601 UTC): the events of `device-<uuid>` that had
 * occurred by then, folded with the same `evolveDevice` as the command side. The fold
 * stops at the first event that occurred later, so the answer is always a state the
 * device really passed through, even if clocks of two writers disagreed slightly.
 */
export async function deviceStateAt(store: EventStore, uuid: string, at: string, since: RegistrationStart | null = null): Promise<DeviceStateAt> {
  const until = Date.parse(at);
  let state = initialDeviceState();
  let revision: number | null = null;
  let registeredAt: GlobalPosition | null = null;
  // An owner's view begins with the current registration: before it, the device did not exist for them.
  for await (const event of store.readStream(deviceStream(uuid), since === null ? {} : { fromRevision: since.revision })) {
    if (Date.parse(event.metadata.occurredAt) > until) break;
    if (!isHomeHubEventType(event.type)) continue;
    state = evolveDevice(state, { type: event.type, data: event.data } as DeviceEvent);
    revision = Number(event.revision);
    if (event.type === 'DeviceRegistered') registeredAt = event.position;
  }
  if (state.status === 'none') return { uuid, at, revision, status: 'none', device: null, users: [] };
  const users = Object.values(state.links)
    .filter((link) => state.status === 'active' && link.isActive)
    .map((link) => ({ id: link.userId, role: link.role, linkId: link.linkId, createdAt: link.createdAt, updatedAt: link.updatedAt }));
  return {
    uuid,
    at,
    revision,
    status: state.status,
    device: {
      id: state.id,
      uuid: state.uuid,
      deviceId: state.deviceId,
      name: state.name,
      ipAddress: state.ipAddress,
      port: state.port,
      metadata: state.metadata,
      isOnline: state.isOnline,
      lastSeenAt: registeredAt === null ? state.lastSeenAt : await lastSeenBy(store, uuid, until, registeredAt, state.lastSeenAt),
      gen: state.gen,
      createdAt: state.createdAt,
      updatedAt: state.updatedAt,
    },
    users,
  };
}

/** Whether `device-<uuid>` has any event (a device that was registered at some time). */
export async function deviceStreamExists(store: EventStore, uuid: string): Promise<boolean> {
  for await (const _event of store.readStream(deviceStream(uuid), { maxCount: 1 })) return true;
  return false;
}
