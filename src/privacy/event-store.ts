import { VERSION_FIELD, currentVersion, stampVersion, storedVersion, upcast, upcastFrom } from '../events/schema-versions';
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
import { deepFreeze } from '../infra/eventstore/deep-freeze';
import { open, seal } from './crypto';
import { DataKeyMissingError, DataKeyUnreadableError, deviceSubject, subjectOfKeyId, userSubject, type DataKey, type Keyring } from './keyring';
import { COPIED_PERSONAL_FIELDS, ERASED, PERSONAL_FIELDS, SEALED_FIELD, getPath, setPathInPlace, subjectOf } from './personal-fields';

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

/** Answered by sealedAtOnce and openedAtOnce when a key must be looked up first (the async path then). */
const NOT_HELD: unique symbol = Symbol('key not held');

export interface PrivateEventStoreOptions {
  readonly keyring: Keyring;
}

/** What one event's data has to seal: its personal fields present and whose key seals them. */
interface ToSeal {
  readonly data: Record<string, unknown>;
  readonly subject: string;
  readonly present: readonly string[];
}

/** The personal fields to seal, or null when there are none (the version is stamped only). */
function toSeal(type: string, streamName: string, data: unknown): ToSeal | null {
  const paths = PERSONAL_FIELDS[type];
  if (paths === undefined || !isRecord(data)) return null;
  const subject = subjectOf(type, streamName, data);
  if (subject === null) return null;
  const present = paths.filter((p) => getPath(data, p) !== undefined);
  return present.length === 0 ? null : { data, subject, present };
}

/** An event sealed: its stored data, its box and the JSON the box holds. */
interface SealedNow {
  readonly stored: unknown;
  readonly box: SealedBox;
  readonly json: string;
}

/**
 * The data as stored: the fields but the personal ones, in their order (a nested path is left
 * out of a copy of its object), then the box and `$v`, built in one object rather than a copy
 * per path.
 */
function sealWith(type: string, { data, present }: ToSeal, { keyId, key }: DataKey): SealedNow {
  const plain: Record<string, unknown> = {};
  for (const path of present) plain[path] = getPath(data, path);
  const rest: Record<string, unknown> = {};
  for (const field of Object.keys(data)) rest[field] = data[field];
  for (const path of present) setPathInPlace(rest, path, undefined);
  const json = JSON.stringify(plain);
  const box: SealedBox = { k: keyId, f: present, c: seal(key, Buffer.from(json, 'utf8'), aad(type, keyId)) };
  rest[SEALED_FIELD] = box;
  return { stored: stampVersion(type, rest), box, json };
}

/** Seals the personal fields of one event's data under its subject's key and stamps its version. */
export async function sealEventData(keyring: Keyring, type: string, streamName: string, data: unknown): Promise<unknown> {
  const sealing = toSeal(type, streamName, data);
  if (sealing === null) return stampVersion(type, data);
  return sealWith(type, sealing, keyring.heldKeyFor(sealing.subject) ?? (await keyToSealWith(keyring, type, sealing.subject))).stored;
}

/**
 * The subject's key, made if it has none; for a copy of fields sealed before (COPIED_PERSONAL_FIELDS),
 * only a key it has: the copy is sealed after the events it was folded from, and an erasure may
 * have destroyed the key in between (a device subject keeps no tombstone), so a key made now
 * would keep the erased fields readable. Such a copy is then refused (DataKeyMissingError).
 */
async function keyToSealWith(keyring: Keyring, type: string, subject: string): Promise<DataKey> {
  if (!COPIED_PERSONAL_FIELDS.has(type)) return keyring.keyFor(subject);
  const key = await keyring.existingKeyFor(subject);
  if (key === null) throw new DataKeyMissingError(subject);
  return key;
}

/**
 * What `sealEventData` answers, at once, when nothing has to be looked up for it (with the box,
 * when it sealed one); NOT_HELD when its key is not held.
 */
function sealedAtOnce(keyring: Keyring, type: string, streamName: string, data: unknown): SealedNow | { readonly stored: unknown; readonly box?: undefined } | typeof NOT_HELD {
  const sealing = toSeal(type, streamName, data);
  if (sealing === null) return { stored: stampVersion(type, data) };
  const key = keyring.heldKeyFor(sealing.subject);
  return key === undefined ? NOT_HELD : sealWith(type, sealing, key);
}

/** A stored event's data with its sealed box. */
interface Sealed {
  readonly box: SealedBox;
  readonly data: Record<string, unknown>;
}

/** The data's sealed box, or null when it has none. */
function boxOf(data: unknown): Sealed | null {
  if (!isRecord(data)) return null;
  const box = data[SEALED_FIELD];
  return isSealedBox(box) ? { box, data } : null;
}

/** The values a box holds, or null when it does not open (`key` null: destroyed). */
function valuesIn(type: string, box: SealedBox, key: Buffer | null): Record<string, unknown> | null {
  const plain = key === null ? null : open(key, box.c, aad(type, box.k));
  return plain === null ? null : parsedValues(plain.toString('utf8'));
}

/**
 * The stored data with the box's values (null: "[erased]") in place of the box, upcast: the
 * fields as stored but the box and `$v`, in their order, then each sealed path as `setPath`
 * sets it, built in one object rather than a copy per path.
 */
function openedWith(type: string, { box, data }: Sealed, values: Record<string, unknown> | null): unknown {
  const opened: Record<string, unknown> = {};
  for (const field of Object.keys(data)) if (field !== SEALED_FIELD && field !== VERSION_FIELD) opened[field] = data[field];
  for (const path of box.f) setPathInPlace(opened, path, values === null ? ERASED : values[path]);
  return upcastFrom(type, storedVersion(data), opened);
}

/** The box opened with `key` (null: destroyed) into the other fields, upcast. */
function openWith(type: string, sealed: Sealed, key: Buffer | null): unknown {
  return openedWith(type, sealed, valuesIn(type, sealed.box, key));
}

/**
 * The stored data with its sealed fields opened (or "[erased]"), upcast to the current version.
 * A damaged key (DataKeyUnreadableError) is the caller's error, unless `damagedAsErased`.
 */
export async function openEventData(keyring: Keyring, type: string, data: unknown, damagedAsErased = false): Promise<unknown> {
  const sealed = boxOf(data);
  if (sealed === null) return upcast(type, data);
  let key: Buffer | null | undefined = keyring.heldKeyById(sealed.box.k);
  if (key === undefined) {
    try {
      key = await keyring.keyById(sealed.box.k);
    } catch (error) {
      if (!damagedAsErased || !(error instanceof DataKeyUnreadableError)) throw error;
      key = null;
    }
  }
  return openWith(type, sealed, key);
}

/** An event's data as opened once, kept for the next reader of the same event (OpenedEvents). */
interface OpenedEntry {
  readonly type: string;
  readonly box: SealedBox;
  readonly data: unknown;
}

/** How many opened events a private store keeps (the last ones opened)... */
const OPENED_EVENTS_KEPT = 1024;
/** ...and how many bytes of ciphertext they may stand for: a box larger than this is not kept. */
const OPENED_EVENTS_BYTES = 4 * 1024 * 1024;

/**
 * The events a private store opened last, by event id: one commit is read by several
 * subscriptions (the projector, the revocation feed) and a user's stream by each of their
 * logins, and each would otherwise decrypt and parse the same box again. An entry answers only
 * for the very box it was opened from (same type, key id and ciphertext) and only while that
 * key is held: a destroyed, evicted or stale key is never held, so nothing opened before an
 * erasure is handed out after it; a key destroyed or evicted in this process (an erasure here, or
 * its UserErased passing by) drops its entries at once. The opened data is deep-frozen when kept:
 * every reader is handed the same object and none can change it for the others.
 */
class OpenedEvents {
  private readonly entries = new Map<string, OpenedEntry>();
  /** The ciphertext lengths of the kept boxes. */
  private bytes = 0;

  get(id: string, type: string, box: SealedBox): unknown {
    const entry = this.entries.get(id);
    return entry !== undefined && entry.type === type && entry.box.k === box.k && entry.box.c === box.c ? entry.data : undefined;
  }

  /** Keeps `entry` (its data deep-frozen, and answered). */
  set(id: string, entry: OpenedEntry): unknown {
    const data = deepFreeze(entry.data);
    this.delete(id);
    if (entry.box.c.length > OPENED_EVENTS_BYTES) return data;
    this.entries.set(id, { ...entry, data });
    this.bytes += entry.box.c.length;
    while (this.entries.size > OPENED_EVENTS_KEPT || this.bytes > OPENED_EVENTS_BYTES) this.delete(this.entries.keys().next().value as string);
    return data;
  }

  /** Drops every entry opened with a key of this subject. */
  forget(subject: string): void {
    for (const [id, entry] of this.entries) if (subjectOfKeyId(entry.box.k) === subject) this.delete(id);
  }

  private delete(id: string): void {
    const entry = this.entries.get(id);
    if (entry === undefined) return;
    this.entries.delete(id);
    this.bytes -= entry.box.c.length;
  }
}

/** What a box's JSON opens to (as `valuesIn` parses it). */
function parsedValues(json: string): Record<string, unknown> | null {
  const parsed: unknown = JSON.parse(json);
  return isRecord(parsed) ? parsed : null;
}

/** What `openEventData` answers, at once, when its key is held or it has no box; NOT_HELD otherwise. */
function openedAtOnce(keyring: Keyring, event: RecordedEvent, opened: OpenedEvents): unknown {
  const sealed = boxOf(event.data);
  if (sealed === null) return upcast(event.type, event.data);
  const key = keyring.heldKeyById(sealed.box.k);
  if (key === undefined) return NOT_HELD;
  const known = opened.get(event.id, event.type, sealed.box);
  if (known !== undefined) return known;
  return opened.set(event.id, { type: event.type, box: sealed.box, data: openWith(event.type, sealed, key) });
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

/** `f` applied to a value, or to a promise's value once it settles. */
function then<T, U>(value: T | Promise<T>, f: (value: T) => U): U | Promise<U> {
  return value instanceof Promise ? value.then(f) : f(value);
}

/**
 * `source` with `map` applied to each item; items that `needs` says need nothing, and items
 * `map` answers at once (not a promise), go through without an extra await. A reader that
 * gathers what arrives within a few microtasks (the projector's batches) then gathers the
 * same items through this store as from the log itself.
 */
function mapIterable<T>(source: AsyncIterable<T>, needs: (item: T) => boolean, map: (item: T) => T | Promise<T>): AsyncIterable<T> {
  return {
    [Symbol.asyncIterator](): AsyncIterator<T> {
      const it = source[Symbol.asyncIterator]();
      return {
        next: () =>
          it.next().then((result) => (result.done === true || !needs(result.value) ? result : then(map(result.value), (value): IteratorResult<T> => ({ done: false, value })))),
        return: (value?: unknown) => (it.return !== undefined ? it.return(value) : Promise.resolve({ done: true as const, value: undefined as unknown as T })),
      };
    },
  };
}

function withData<E extends { readonly data: unknown }>(event: E, data: unknown): E {
  return data === event.data ? event : { ...event, data };
}

/**
 * Reads of streams (command folds, the export, the audit endpoints) fail on a damaged data
 * key with DataKeyUnreadableError, a 503 for the requests about that person or device only.
 * Subscriptions (the projector, the revocation feeds) read its fields as "[erased]" instead:
 * one damaged key must not stop the read models of everyone (what it sealed is lost anyway).
 *
 * A key this process holds (src/privacy/keyring.ts, `heldKeyFor`/`heldKeyById`) seals and opens
 * at once; only a key to be looked up in the store costs awaits. Either way the answer is the one
 * the keyring gives: a destroyed or evicted key is never held.
 */
export function createPrivateEventStore(inner: EventStore, { keyring }: PrivateEventStoreOptions): EventStore {
  const openedEvents = new OpenedEvents();
  keyring.onForget((subject) => openedEvents.forget(subject));
  const openRecorded = (event: RecordedEvent, damagedAsErased = false): RecordedEvent | Promise<RecordedEvent> => {
    // Another process's erasure: the keys it destroyed are evicted here (and their opened events dropped).
    if (event.type === 'UserErased' && isRecord(event.data)) forgetErased(keyring, event.data);
    const opened = openedAtOnce(keyring, event, openedEvents);
    if (opened !== NOT_HELD) return withData(event, opened);
    return openEventData(keyring, event.type, event.data, damagedAsErased).then((data) => withData(event, data));
  };

  return {
    async append(streamName: string, events: readonly NewEvent[], expected: ExpectedRevision): Promise<AppendResult> {
      if (!events.some(needsSealing)) return inner.append(streamName, events, expected);
      const atOnce = events.map((e) => sealedAtOnce(keyring, e.type, streamName, e.data));
      if (!atOnce.every((sealed) => sealed !== NOT_HELD)) {
        const sealed = await Promise.all(events.map(async (e) => withData(e, await sealEventData(keyring, e.type, streamName, e.data))));
        return inner.append(streamName, sealed, expected);
      }
      const sealed = events.map((e, i) => {
        const now = atOnce[i] as Exclude<(typeof atOnce)[number], typeof NOT_HELD>;
        // Its readers (the projector, the revocation feed) find it opened already: what opening
        // it would answer once read back (the log keeps data as JSON sees it), from the JSON
        // sealed in the box, while its key is held.
        const stored: unknown = now.box === undefined ? null : JSON.parse(JSON.stringify(now.stored));
        if (now.box !== undefined && isRecord(stored)) {
          openedEvents.set(e.id, { type: e.type, box: now.box, data: openedWith(e.type, { box: now.box, data: stored }, parsedValues(now.json)) });
        }
        return withData(e, now.stored);
      });
      return inner.append(streamName, sealed, expected);
    },
    readStream(streamName: string, options?: ReadStreamOptions): AsyncIterable<RecordedEvent> {
      if (options?.sealed === true) return inner.readStream(streamName, options);
      return mapIterable(inner.readStream(streamName, options), needsOpening, (event) => openRecorded(event));
    },
    ...(inner.streamEnd !== undefined ? { streamEnd: inner.streamEnd } : {}),
    subscribe(options?: SubscribeOptions): Subscription {
      const subscription = inner.subscribe(options);
      const items = mapIterable<SubscriptionItem>(
        subscription,
        // A copy (a snapshot) is read by folds, from its stream, never from a subscription: handed on
        // as stored, so a subscriber that passes it by (the projector) looks up no key for it.
        (item) => item.kind === 'event' && needsOpening(item.event) && !COPIED_PERSONAL_FIELDS.has(item.event.type),
        (item) => (item.kind === 'event' ? then(openRecorded(item.event, true), (event): SubscriptionItem => ({ kind: 'event', event })) : item),
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
  const subjects = new Set<string>();
  if (typeof data.userId === 'string') subjects.add(userSubject(data.userId));
  if (Array.isArray(data.devices)) for (const uuid of data.devices) if (typeof uuid === 'string') subjects.add(deviceSubject(uuid));
  for (const subject of subjects) keyring.evict(subject);
}

