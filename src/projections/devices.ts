import type { DeviceRole, JsonObject } from '../domain/device';
import { DEVICE_ROLES, sharedPort, sharedRole, sharedText } from '../domain/device';
import { flatJoin } from '../infra/flat-string';
import { asHomeHubEvent, parseStreamName } from '../domain/events';
import type { RecordedEvent } from '../infra/eventstore/port';
import type { ReadStore, SortKey, Where } from '../infra/readstore/port';
import { gatheredGet } from '../infra/gathered';
import { documentProjection } from './projection';

export const DEVICES_COLLECTION = 'devices';

/** An active link as the read side keeps it; inactive links are dropped. */
export interface DeviceUserEntry {
  readonly userId: string;
  readonly role: DeviceRole;
  readonly linkId: string;
  readonly createdAt: string;
}

/**
 * One document per registered device, keyed by its uuid (the stream's id), removed when
 * the device is deleted. The active links live inside it, so one query answers "the
 * devices of user X" with filters, sort and paging, and a heartbeat rewrites one document.
 * `access` holds `<userId>:<role>` for every active link: the multikey field the per-user
 * indexes start with (a role filter is an `in` over those keys).
 */
export interface DeviceDoc {
  /** The device uuid. */
  readonly id: string;
  /** The internal id of the current registration (the API's `id`). */
  readonly internalId: string;
  readonly uuid: string;
  readonly deviceId: string;
  readonly name: string;
  readonly ipAddress: string | null;
  readonly port: string;
  /**
   * The device's metadata as JSON text: free-form keys (`fw.version`, `$schema`) that a
   * document store would take for paths or operators are kept as they are. Read it with
   * `metadataOf`; documents written before hold the object itself.
   */
  readonly metadata: string | JsonObject | null;
  readonly isOnline: boolean;
  /** The newest heartbeat seen (every heartbeat, not only presence changes). */
  readonly lastSeenAt: string | null;
  readonly createdAt: string;
  readonly updatedAt: string;
  readonly users: readonly DeviceUserEntry[];
  readonly access: readonly string[];
}

/** What a device document holds of `metadata` (see DeviceDoc.metadata). */
export function storedMetadata(metadata: JsonObject | null): string | null {
  return metadata === null ? null : JSON.stringify(metadata);
}

/** A device document's metadata, as the API answers it. */
export function metadataOf(doc: Pick<DeviceDoc, 'metadata'>): JsonObject | null {
  return typeof doc.metadata === 'string' ? (JSON.parse(doc.metadata) as JsonObject) : doc.metadata;
}

export function accessKey(userId: string, role: DeviceRole): string {
  return `${userId}:${role}`;
}

/** The access key a document keeps: the same text as `accessKey`, one flat string (see src/infra/flat-string.ts). */
function storedAccessKey(userId: string, role: DeviceRole): string {
  return flatJoin(userId, ':', role);
}

function withUsers(doc: DeviceDoc, users: readonly DeviceUserEntry[]): DeviceDoc {
  return { ...doc, users, access: users.map((u) => storedAccessKey(u.userId, u.role)) };
}

function later(a: string | null, b: string): string {
  return a !== null && a > b ? a : b;
}

/** Pure: the device document after one event of `device-<uuid>` or `heartbeat-<uuid>`. */
export function evolveDeviceDoc(doc: DeviceDoc | null, recorded: RecordedEvent): DeviceDoc | null {
  const event = asHomeHubEvent(recorded);
  if (event === null) return doc;
  if (event.type === 'DeviceRegistered') {
    const e = event.data;
    return {
      id: e.uuid,
      internalId: e.id,
      uuid: e.uuid,
      deviceId: e.deviceId,
      name: e.name,
      ipAddress: e.ipAddress,
      port: sharedPort(e.port),
      metadata: storedMetadata(e.metadata),
      isOnline: false,
      lastSeenAt: null,
      createdAt: e.registeredAt,
      updatedAt: e.registeredAt,
      users: [],
      access: [],
    };
  }
  if (doc === null) return null;

  switch (event.type) {
    case 'DeviceUpdated': {
      const { metadata, ...changes } = event.data.changes;
      return {
        ...doc,
        ...changes,
        ...(changes.port !== undefined ? { port: sharedPort(changes.port) } : {}),
        ...(metadata !== undefined ? { metadata: storedMetadata(metadata) } : {}),
        updatedAt: event.data.updatedAt,
      };
    }
    case 'UserLinked': {
      const e = event.data;
      // The registrant's link is made with the device: its time is the document's own string.
      const entry: DeviceUserEntry = { userId: e.userId, role: sharedRole(e.role), linkId: e.linkId, createdAt: sharedText(e.createdAt, doc.createdAt, doc.updatedAt) };
      const others = doc.users.filter((u) => u.userId !== e.userId);
      return withUsers(doc, [...others, entry]);
    }
    case 'UserRoleChanged': {
      const e = event.data;
      return withUsers(
        doc,
        doc.users.map((u) => (u.userId === e.userId ? { ...u, role: sharedRole(e.role) } : u)),
      );
    }
    case 'UserUnlinked':
      return withUsers(
        doc,
        doc.users.filter((u) => u.userId !== event.data.userId),
      );
    case 'DeviceDeleted':
      return null;
    case 'DeviceWentOnline':
      return { ...doc, isOnline: true, lastSeenAt: later(doc.lastSeenAt, event.data.lastSeenAt) };
    case 'DeviceWentOffline':
      // The offline event names the last heartbeat it knew: a rebuild after old heartbeats
      // aged out of the log ($maxAge, scavenged) still ends where the live model did.
      return {
        ...doc,
        isOnline: false,
        lastSeenAt: event.data.lastSeenAt === null ? doc.lastSeenAt : later(doc.lastSeenAt, event.data.lastSeenAt),
      };
    case 'HeartbeatReceived': {
      // A heartbeat of an earlier life of this uuid (appended after its deletion) is not this device's.
      const at = event.data.receivedAt;
      if (at < doc.createdAt || (doc.lastSeenAt !== null && doc.lastSeenAt >= at)) return doc;
      return { ...doc, lastSeenAt: at };
    }
    default:
      return doc;
  }
}

/** The users linked to a device: one entry per user, so each device sits once under each of its users. */
const USER_FIELD = 'users.userId';

/** A user's devices in the order of `field`: a page is a range of this index, and no query sorts. */
const byUser = (field: keyof DeviceDoc): SortKey[] => [
  { field: USER_FIELD, order: 'asc' },
  { field, order: 'asc' },
];

export const DEVICE_SORT_FIELDS = ['createdAt', 'updatedAt', 'name', 'lastSeenAt'] as const;
export type DeviceSortField = (typeof DEVICE_SORT_FIELDS)[number];

export const devicesProjection = documentProjection<DeviceDoc>({
  name: 'devices',
  collection: DEVICES_COLLECTION,
  streamPrefixes: ['device-', 'heartbeat-'],
  ids: (event) => {
    const stream = parseStreamName(event.streamName);
    return stream?.category === 'device' || stream?.category === 'heartbeat' ? [stream.id] : [];
  },
  evolve: (doc, event) => evolveDeviceDoc(doc, event),
  removes: (event) => event.type === 'DeviceDeleted',
  indexes: [
    ...DEVICE_SORT_FIELDS.map((field) => ({ fields: byUser(field) })),
    // Counts of a user's online (or offline) devices, and their pages by creation time.
    { fields: [{ field: USER_FIELD, order: 'asc' }, { field: 'isOnline', order: 'asc' }, { field: 'createdAt', order: 'asc' }] },
    // Owned devices (the per-user limit) and role filters.
    { fields: [{ field: 'access', order: 'asc' }] },
    { fields: [{ field: 'internalId', order: 'asc' }] },
  ],
});

// ---------------------------------------------------------------------------------------
// Queries

function devices(store: ReadStore) {
  return store.collection<DeviceDoc>(DEVICES_COLLECTION);
}

/** The caller's role on a device, or null without an active link. */
export function roleOf(doc: DeviceDoc, userId: string): DeviceRole | null {
  return doc.users.find((u) => u.userId === userId)?.role ?? null;
}

/** The device whose internal id this is, if any. */
export async function findDeviceByInternalId(store: ReadStore, internalId: string): Promise<DeviceDoc | null> {
  const [byId] = await devices(store).find({ where: { internalId }, limit: 1 });
  return byId ?? null;
}

/**
 * A device by its internal id or by its uuid (every `/devices/:id` path accepts both). The
 * internal id is tried first: the uuid is the registrant's choice, so a uuid equal to another
 * device's internal id must never shadow that device (decisions §4).
 */
export async function findDevice(store: ReadStore, idOrUuid: string): Promise<DeviceDoc | null> {
  return (await findDeviceByInternalId(store, idOrUuid)) ?? (await devices(store).get(idOrUuid));
}

/** A device by its uuid only (a device token names its uuid, never an internal id). */
export function findDeviceByUuid(store: ReadStore, uuid: string): Promise<DeviceDoc | null> {
  return devices(store).get(uuid);
}

/**
 * `findDeviceByUuid` for reads that come in crowds (the presence of every device handshake):
 * the reads of one turn of the event loop are one query (src/infra/gathered.ts).
 */
export function deviceByUuidGathered(store: ReadStore): (uuid: string) => Promise<DeviceDoc | null> {
  return gatheredGet(() => devices(store));
}

/** Devices the user owns (active owner links): what MAX_DEVICES_PER_USER limits. */
export function countOwnedDevices(store: ReadStore, userId: string): Promise<number> {
  return devices(store).count({ access: accessKey(userId, 'owner') });
}

export interface DeviceListQuery {
  readonly userId: string;
  readonly page: number;
  readonly limit: number;
  readonly online?: boolean | undefined;
  readonly sort: DeviceSortField;
  readonly order: 'asc' | 'desc';
  readonly roles?: readonly DeviceRole[] | undefined;
  /** Inclusive bounds on createdAt, ISO 8601 UTC with milliseconds. */
  readonly createdAfter?: string | undefined;
  readonly createdBefore?: string | undefined;
}

export interface DeviceListPage {
  readonly items: ReadonlyArray<{ readonly device: DeviceDoc; readonly role: DeviceRole }>;
  readonly total: number;
}

/** One page of the devices a user has an active link to; ties are broken by uuid. */
export async function listDevicesForUser(store: ReadStore, q: DeviceListQuery): Promise<DeviceListPage> {
  const roles = q.roles !== undefined && q.roles.length > 0 ? [...new Set(q.roles)] : DEVICE_ROLES;
  const createdAt =
    q.createdAfter !== undefined || q.createdBefore !== undefined
      ? {
          ...(q.createdAfter !== undefined ? { gte: q.createdAfter } : {}),
          ...(q.createdBefore !== undefined ? { lte: q.createdBefore } : {}),
        }
      : undefined;
  // Every role: the user's entry in `users` alone (one index range); some roles: their access keys on top.
  const where: Where = {
    [USER_FIELD]: q.userId,
    ...(roles.length < DEVICE_ROLES.length ? { access: { in: roles.map((role) => accessKey(q.userId, role)) } } : {}),
    ...(q.online !== undefined ? { isOnline: q.online } : {}),
    ...(createdAt !== undefined ? { createdAt } : {}),
  };
  const [docs, total] = await Promise.all([
    devices(store).find({ where, sort: [{ field: q.sort, order: q.order }], skip: (q.page - 1) * q.limit, limit: q.limit }),
    devices(store).count(where),
  ]);
  return { items: withRoles(docs, q.userId), total };
}

/** Each device with the user's role on it (the queries above select only devices the user is linked to). */
function withRoles(docs: readonly DeviceDoc[], userId: string): Array<{ device: DeviceDoc; role: DeviceRole }> {
  return docs.flatMap((device) => {
    const role = roleOf(device, userId);
    return role === null ? [] : [{ device, role }];
  });
}

/** Every device the read model has online, with its newest heartbeat: what presence expiry schedules at start. */
export async function listOnlineDevices(store: ReadStore): Promise<Array<{ uuid: string; lastSeenAt: string | null }>> {
  const docs = await devices(store).find({ where: { isOnline: true } });
  return docs.map((doc) => ({ uuid: doc.uuid, lastSeenAt: doc.lastSeenAt }));
}

/** The user's devices as GET /users/me lists them (active links only, oldest first). */
export async function deviceSummariesForUser(
  store: ReadStore,
  userId: string,
): Promise<Array<{ id: string; name: string; role: DeviceRole; isOnline: boolean }>> {
  const docs = await devices(store).find({
    where: { [USER_FIELD]: userId },
    sort: [{ field: 'createdAt', order: 'asc' }],
  });
  return withRoles(docs, userId).map(({ device, role }) => ({ id: device.internalId, name: device.name, role, isOnline: device.isOnline }));
}
