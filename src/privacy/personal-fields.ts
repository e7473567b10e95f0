import { parseStreamName } from '../domain/events';
import { deviceSubject, userSubject } from './keyring';

/**
 * Which fields of which events are personal data (decisions §11), and whose key seals them.
 * A user's e-mail, names, CRM fields and profile, and each session's IP and user agent,
 * under the person's key; a device's name, `ipAddress` and `metadata` under the device's key
 * (household data that belongs to its owners, erased when the device is deleted with its
 * only owner). Paths name a field, or a field inside `changes`.
 */
export const PERSONAL_FIELDS: Readonly<Record<string, readonly string[]>> = {
  UserSynced: ['email', 'firstName', 'lastName', 'profile', 'crm'],
  EmailVerified: ['email'],
  RefreshIssued: ['ip', 'userAgent'],
  RefreshReuseDetected: ['ip', 'userAgent'],
  DeviceRegistered: ['name', 'ipAddress', 'metadata'],
  DeviceUpdated: ['changes.name', 'changes.ipAddress', 'changes.metadata'],
  // A device's fold, written every so many events of its stream (src/commands/snapshots.ts).
  DeviceStateSnapshotted: ['state.name', 'state.ipAddress', 'state.metadata'],
};

/**
 * Types whose personal fields are copies of fields sealed in earlier events (a fold's snapshot,
 * src/commands/snapshots.ts): sealed only under a key the subject still has, never one made
 * for them, and opened only by stream reads (folds), a subscription handing them on as stored
 * (src/privacy/event-store.ts).
 */
export const COPIED_PERSONAL_FIELDS: ReadonlySet<string> = new Set(['DeviceStateSnapshotted']);

/** What a field of an erased person reads as. */
export const ERASED = '[erased]';

/** Where an event's sealed fields are kept in its stored data. */
export const SEALED_FIELD = '$pii';

/** The subject whose key seals an event's personal fields, or null when it has none. */
export function subjectOf(type: string, streamName: string, data: Readonly<Record<string, unknown>>): string | null {
  switch (type) {
    case 'UserSynced':
    case 'EmailVerified':
    case 'RefreshIssued':
    case 'RefreshReuseDetected':
      return typeof data.userId === 'string' ? userSubject(data.userId) : null;
    case 'DeviceStateSnapshotted':
      return typeof data.uuid === 'string' ? deviceSubject(data.uuid) : null;
    case 'DeviceRegistered':
    case 'DeviceUpdated': {
      const stream = parseStreamName(streamName);
      if (stream?.category === 'device') return deviceSubject(stream.id);
      return typeof data.uuid === 'string' ? deviceSubject(data.uuid) : null;
    }
    default:
      return null;
  }
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Reads a path (`a` or `a.b`); undefined when absent. */
export function getPath(data: Readonly<Record<string, unknown>>, path: string): unknown {
  const [head, rest] = splitPath(path);
  const value = data[head];
  if (rest === null) return value;
  return isRecord(value) ? value[rest] : undefined;
}

/** A copy with the path set (`value` undefined: removed). */
export function setPath(data: Readonly<Record<string, unknown>>, path: string, value: unknown): Record<string, unknown> {
  const copy: Record<string, unknown> = { ...data };
  setPathInPlace(copy, path, value);
  return copy;
}

/** What `setPath` answers, made in `data` itself (a nested object is still copied, never changed). */
export function setPathInPlace(data: Record<string, unknown>, path: string, value: unknown): void {
  const [head, rest] = splitPath(path);
  if (rest === null) {
    if (value === undefined) delete data[head];
    else data[head] = value;
    return;
  }
  const inner = isRecord(data[head]) ? { ...(data[head] as Record<string, unknown>) } : {};
  if (value === undefined) delete inner[rest];
  else inner[rest] = value;
  data[head] = inner;
}

function splitPath(path: string): [string, string | null] {
  const dot = path.indexOf('.');
  return dot < 0 ? [path, null] : [path.slice(0, dot), path.slice(dot + 1)];
}
