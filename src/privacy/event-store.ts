import { VERSION_FIELD, currentVersion, stampVersion, upcast } from '../events/schema-versions';
import type {
  AppendResult,
  EventStore,
  ExpectedRevision,
  GlobalPosition,
  NewEvent,
  ReadStreamOptions,
  RecordedEvent,
  SubscribeOptions,
  Subscription,
  SubscriptionItem,
} from '../infra/eventstore/port';
import { open, seal } from './crypto';
import { DataKeyUnreadableError, deviceSubject, userSubject, type Keyring } from './keyring';
import { ERASED, PERSONAL_FIELDS, SEALED_FIELD, getPath, setPath, subjectOf } from './personal-fields';

/**
 * The event store as the whole service reads and writes it: the one place where personal
 * fields are sealed on append and opened on read, and where stored events are upcast to
 * their current version (src/events/schema-versions.ts). Projections, command folds, the
 * audit endpoints and `npm run replay` all go through it. A box whose key was destroyed
 * opens as "[erased]" in every field it held, never as an error.
 *
 * Stored form of a sealed event's data: the other fields as they are, `$v` (its version),
 * and `$pii: {k: <keyId>, f: [<paths>], c: <AES-256-GCM box of {path: value}>}`.
 */

interface SealedBox {
  readonly k: string;
  readonly f: readonly string[];
  readonly c: string;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function isSealedBox(value: unknown): value is SealedBox {
  if (!isRecord(value)) return false;
  return typeof value.k === 'string' && typeof value.c === 'string' && Array.isArray(value.f) && value.f.every((f) => typeof f === 'string');
}

function aad(type: string, keyId: string): string {
  return `${type}|${keyId}`;
}

export interface PrivateEventStoreOptions {
  readonly keyring: Keyring;
}

/** Seals the personal fields of one event's data under its subject's key and stamps its version. */
export async function sealEventData(keyring: Keyring, type: string, streamName: string, data: unknown): Promise<unknown> {
  const paths = PERSONAL_FIELDS[type];
  if (paths === undefined || !isRecord(data)) return stampVersion(type, data);
  const subject = subjectOf(type, streamName, data);
  if (subject === null) return stampVersion(type, data);
  const present = paths.filter((p) => getPath(data, p) !== undefined);
  if (present.length === 0) return stampVersion(type, data);
  const { keyId, key } = await keyring.keyFor(subject);
  const plain: Record<string, unknown> = {};
  let rest: Record<string, unknown> = data;
  for (const path of present) {
    plain[path] = getPath(data, path);
    rest = setPath(rest, path, undefined);
  }
  const box: SealedBox = { k: keyId, f: present, c: seal(key, Buffer.from(JSON.stringify(plain), 'utf8'), aad(type, keyId)) };
  return stampVersion(type, { ...rest, [SEALED_FIELD]: box });
}

/**
 * The stored data with its sealed fields opened (or "[erased]"), upcast to the current version.
 * A damaged key (DataKeyUnreadableError) is the caller's error, unless `damagedAsErased`.
 */
export async function openEventData(keyring: Keyring, type: string, data: unknown, damagedAsErased = false): Promise<unknown> {
  if (!isRecord(data)) return upcast(type, data);
  const box = data[SEALED_FIELD];
  if (!isSealedBox(box)) return upcast(type, data);
  const { [SEALED_FIELD]: _box, ...rest } = data;
  let opened: Record<string, unknown> = rest;
  let key: Buffer | null;
  try {
    key = await keyring.keyById(box.k);
  } catch (error) {
    if (!damagedAsErased || !(error instanceof DataKeyUnreadableError)) throw error;
    key = null;
  }
  const plain = key === null ? null : open(key, box.c, aad(type, box.k));
  let values: Record<string, unknown> | null = null;
  if (plain !== null) {
    const parsed: unknown = JSON.parse(plain.toString('utf8'));
    if (isRecord(parsed)) values = parsed;
  }
  for (const path of box.f) opened = setPath(opened, path, values === null ? ERASED : values[path]);
  return upcast(type, opened);
}

/** Whether reading this stored event involves more than handing it on (the hot path, heartbeats, does not). */
function needsOpening(event: RecordedEvent): boolean {
  if (event.type === 'UserErased') return true;
  const data = event.data;
  return isRecord(data) && (SEALED_FIELD in data || VERSION_FIELD in data || currentVersion(event.type) > 1);
}

/** Whether appending this event involves more than handing it on. */
function needsSealing(event: NewEvent): boolean {
  return PERSONAL_FIELDS[event.type] !== undefined || currentVersion(event.type) > 1;
}

/** `source` with `map` applied to each item; items that `skip` says need nothing go through without an extra await. */
function mapIterable<T>(source: AsyncIterable<T>, needs: (item: T) => boolean, map: (item: T) => Promise<T>): AsyncIterable<T> {
  return {
    [Symbol.asyncIterator](): AsyncIterator<T> {
      const it = source[Symbol.asyncIterator]();
      return {
        next: () => it.next().then((result) => (result.done === true || !needs(result.value) ? result : map(result.value).then((value) => ({ done: false, value })))),
        return: (value?: unknown) => (it.return !== undefined ? it.return(value) : Promise.resolve({ done: true as const, value: undefined as unknown as T })),
      };
    },
  };
}

/**
 * Reads of streams (command folds, the export, the audit endpoints) fail on a damaged data
 * key with DataKeyUnreadableError, a 503 for the requests about that person or device only.
 * Subscriptions (the projector, the revocation feeds) read its fields as "[erased]" instead:
 * one damaged key must not stop the read models of everyone (what it sealed is lost anyway).
 */
export function createPrivateEventStore(inner: EventStore, { keyring }: PrivateEventStoreOptions): EventStore {
  const openRecorded = async (event: RecordedEvent, damagedAsErased = false): Promise<RecordedEvent> => {
    if (event.type === 'UserErased' && isRecord(event.data)) forgetErased(keyring, event.data);
    const data = await openEventData(keyring, event.type, event.data, damagedAsErased);
    return data === event.data ? event : { ...event, data };
  };

  return {
    async append(streamName: string, events: readonly NewEvent[], expected: ExpectedRevision): Promise<AppendResult> {
      if (!events.some(needsSealing)) return inner.append(streamName, events, expected);
      const sealed = await Promise.all(
        events.map(async (e): Promise<NewEvent> => {
          const data = await sealEventData(keyring, e.type, streamName, e.data);
          return data === e.data ? e : { ...e, data };
        }),
      );
      return inner.append(streamName, sealed, expected);
    },
    readStream(streamName: string, options?: ReadStreamOptions): AsyncIterable<RecordedEvent> {
      if (options?.sealed === true) return inner.readStream(streamName, options);
      return mapIterable(inner.readStream(streamName, options), needsOpening, (event) => openRecorded(event));
    },
    subscribe(options?: SubscribeOptions): Subscription {
      const subscription = inner.subscribe(options);
      const items = mapIterable<SubscriptionItem>(
        subscription,
        (item) => item.kind === 'event' && needsOpening(item.event),
        async (item) => (item.kind === 'event' ? { kind: 'event', event: await openRecorded(item.event, true) } : item),
      );
      return { close: () => subscription.close(), [Symbol.asyncIterator]: () => items[Symbol.asyncIterator]() };
    },
    setStreamMaxAge: (streamName: string, maxAgeSeconds: number) => inner.setStreamMaxAge(streamName, maxAgeSeconds),
    headPosition: (): Promise<GlobalPosition | null> => inner.headPosition(),
    close: () => inner.close(),
  };
}

/** Another process erased someone: whatever this one holds of their keys goes. */
function forgetErased(keyring: Keyring, data: Record<string, unknown>): void {
  if (typeof data.userId === 'string') keyring.evict(userSubject(data.userId));
  if (Array.isArray(data.devices)) for (const uuid of data.devices) if (typeof uuid === 'string') keyring.evict(deviceSubject(uuid));
}

