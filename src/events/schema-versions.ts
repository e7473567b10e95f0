/**
 * Event schema versions and the one registry of upcasters (decisions §2).
 *
 * Every event type has a current schema version. An event is stored with its version in
 * its data, under `$v`, when that version is above 1; an event without `$v` is version 1,
 * which is every event written before versions existed. Readers never see `$v`: the event
 * store every part of the service reads through (src/privacy/event-store.ts) opens the
 * personal fields and then upcasts the data here, step by step, to the current version.
 * Projections, command folds, the audit endpoints and `npm run replay` therefore only ever
 * handle the current shape.
 *
 * Changing an event from now on (README, "Changing an event"): bump its version in
 * `CURRENT_VERSIONS`, add an upcaster from the previous version to `UPCASTERS` (a pure
 * function of the data, no IO), add a fixture of the new version beside the older ones in
 * test/fixtures/events/, and never edit an older fixture.
 */

export const VERSION_FIELD = '$v';

export type EventData = Readonly<Record<string, unknown>>;

/** Turns the data of version `from` into the data of version `from + 1`. */
export type Upcaster = (data: EventData) => EventData;

/**
 * The current schema version of every event type written to the log (the domain events
 * of src/domain/events.ts and the reservations of src/domain/reservation.ts).
 * Version 2: the personal fields (decisions §11) are sealed (src/privacy/personal-fields.ts).
 */
export const CURRENT_VERSIONS: Readonly<Record<string, number>> = {
  UserSynced: 2,
  UserDeactivated: 1,
  UserReactivated: 1,
  PasswordChanged: 1,
  PasswordResetRequested: 1,
  EmailVerified: 2,
  UserErased: 1,
  EmailClaimWithdrawn: 1,
  DeviceRegistered: 2,
  DeviceUpdated: 2,
  UserLinked: 1,
  UserRoleChanged: 1,
  UserUnlinked: 1,
  DeviceDeleted: 1,
  DeviceTokenIssued: 1,
  DeviceWentOnline: 1,
  DeviceWentOffline: 1,
  HeartbeatReceived: 1,
  RefreshIssued: 2,
  RefreshRotated: 1,
  RefreshReuseDetected: 2,
  RefreshRevoked: 1,
  ReservationClaimed: 1,
  ReservationReleased: 1,
  // Not a domain event: a device's fold, in `snapshot-device-<uuid>` (src/commands/snapshots.ts).
  DeviceStateSnapshotted: 1,
};

/**
 * Sealing the personal fields is a change of how version 2 is stored, not of what it says:
 * once the sealed box is opened, a version 2 event has exactly the fields of version 1.
 */
const sealedOnly: Upcaster = (data) => data;

/** `UPCASTERS[type][n]` turns version n into version n + 1. */
export const UPCASTERS: Readonly<Record<string, Readonly<Record<number, Upcaster>>>> = {
  UserSynced: { 1: sealedOnly },
  EmailVerified: { 1: sealedOnly },
  DeviceRegistered: { 1: sealedOnly },
  DeviceUpdated: { 1: sealedOnly },
  RefreshIssued: { 1: sealedOnly },
  RefreshReuseDetected: { 1: sealedOnly },
};

export function currentVersion(type: string): number {
  return CURRENT_VERSIONS[type] ?? 1;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** The version an event was stored with (1 when it carries none). */
export function storedVersion(data: unknown): number {
  if (!isRecord(data)) return 1;
  const version = data[VERSION_FIELD];
  return typeof version === 'number' && Number.isSafeInteger(version) && version >= 1 ? version : 1;
}

/** The data to store for an event of the current version: `$v` added when above 1. */
export function stampVersion(type: string, data: unknown): unknown {
  const version = currentVersion(type);
  if (version === 1 || !isRecord(data)) return data;
  return { ...data, [VERSION_FIELD]: version };
}

export class UnknownEventVersionError extends Error {
  constructor(readonly type: string, readonly version: number) {
    super(`${type} version ${version} is newer than this build knows (${currentVersion(type)}); run a newer release`);
    this.name = 'UnknownEventVersionError';
  }
}

/**
 * The data of a stored event in the shape of its type's current version, without `$v`.
 * `data` is what was stored with its personal fields already opened.
 */
export function upcast(type: string, data: unknown): unknown {
  if (!isRecord(data)) return data;
  const version = storedVersion(data);
  let current: EventData = data;
  if (VERSION_FIELD in current) {
    const { [VERSION_FIELD]: _dropped, ...rest } = current;
    current = rest;
  }
  return upcastFrom(type, version, current);
}

/**
 * `data`, stored as version `version` and already without `$v`, in the shape of its type's
 * current version (what `upcast` does once it has read and dropped `$v`).
 */
export function upcastFrom(type: string, storedAs: number, data: EventData): EventData {
  let version = storedAs;
  const target = currentVersion(type);
  if (version > target) throw new UnknownEventVersionError(type, version);
  let current = data;
  const steps = UPCASTERS[type] ?? {};
  while (version < target) {
    const step = steps[version];
    if (step === undefined) throw new Error(`No upcaster for ${type} from version ${version}`);
    current = step(current);
    version++;
  }
  return current;
}

/** Every type with a version above 1 has a complete chain (checked by the tests). */
export function missingUpcasters(): string[] {
  const missing: string[] = [];
  for (const [type, target] of Object.entries(CURRENT_VERSIONS)) {
    for (let v = 1; v < target; v++) if (UPCASTERS[type]?.[v] === undefined) missing.push(`${type}@${v}`);
  }
  return missing;
}
