/**
 * The history of a long-running household installation, for `npm run bench:longevity`:
 * `hubs` hubs, each with its owner, sending a heartbeat every 45 s for `days` days, with an
 * outage about once a day (offline after 5 minutes, back online at the next heartbeat), a
 * rename about once a week, a changed IP address now and then, and a login of each owner
 * about once a day. Events are decided by the real deciders, so each is one the service
 * could have written, with its historical time in `occurredAt`.
 *
 * Written hour by hour, hub by hub: a hub's heartbeats of one hour go in one append (the
 * store's public API takes a batch per stream), split where a transition falls, so that
 * each hub's events stay in the order the service would write them. The store's clock
 * (`setClock`, its written-at time, which `$maxAge` compares with) follows the history.
 */
import { deviceDecider, heartbeatReceived, type DeviceCommand, type DeviceEvent, type DeviceState } from '../src/domain/device';
import { deviceStream, heartbeatStream, sessionStream, userStream } from '../src/domain/events';
import type { Actor } from '../src/domain/messages';
import { sessionDecider } from '../src/domain/session';
import { userDecider } from '../src/domain/user';
import type { EventStore, NewEvent } from '../src/infra/eventstore/port';
import { mulberry32 } from '../test/support/prng';

export const HEARTBEAT_SECONDS = 45;
const HOUR_MS = 3_600_000;
const OFFLINE_AFTER_MS = 300_000;
const RETENTION_SECONDS = 604_800;

export interface HistoryOptions {
  readonly hubs: number;
  readonly days: number;
  /** Epoch ms of the first event; the history ends `days` later. */
  readonly start: number;
  /** Moves the store's clock (its written-at time) to the time of what is appended next. */
  readonly setClock: (ms: number) => void;
  readonly onProgress?: (events: number, hoursDone: number) => void;
}

export interface HistoryCounts {
  events: number;
  heartbeats: number;
  transitions: number;
  renames: number;
  logins: number;
}

interface Hub {
  readonly uuid: string;
  readonly owner: string;
  readonly phaseMs: number;
  state: DeviceState;
  /** An outage: no heartbeats from `from` to `until`. */
  outage: { readonly from: number; readonly until: number; markedOffline: boolean } | null;
}

function uuidFrom(random: () => number): string {
  const hex = Array.from({ length: 32 }, () => Math.floor(random() * 16).toString(16)).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-4${hex.slice(13, 16)}-a${hex.slice(17, 20)}-${hex.slice(20, 32)}`;
}

/** Appends with a bounded number in flight (they share the log's group commits). */
function appender(store: EventStore, random: () => number, counts: HistoryCounts, setClock: (ms: number) => void) {
  let inFlight: Array<Promise<unknown>> = [];
  const append = async (stream: string, events: ReadonlyArray<{ type: string; data: unknown; at: number }>, actor: Actor): Promise<void> => {
    const first = events[0];
    if (first === undefined) return;
    const requestId = uuidFrom(random);
    const newEvents: NewEvent[] = events.map((e) => ({
      id: uuidFrom(random),
      type: e.type,
      data: e.data,
      metadata: { occurredAt: new Date(e.at).toISOString(), actor, requestId, causationId: requestId, correlationId: requestId },
    }));
    setClock(first.at);
    counts.events += events.length;
    inFlight.push(store.append(stream, newEvents, 'any'));
    if (inFlight.length >= 512) await flush();
  };
  const flush = async (): Promise<void> => {
    await Promise.all(inFlight);
    inFlight = [];
  };
  return { append, flush };
}

/** What writing the history needs at every step. */
interface Writer {
  readonly random: () => number;
  readonly counts: HistoryCounts;
  readonly append: (stream: string, events: ReadonlyArray<{ type: string; data: unknown; at: number }>, actor: Actor) => Promise<void>;
  readonly flush: () => Promise<void>;
  readonly setClock: (ms: number) => void;
}

const iso = (ms: number): string => new Date(ms).toISOString();

/** Decides a device command on the hub's state, appends what it decided, and moves the state on. */
async function decide(w: Writer, hub: Hub, command: DeviceCommand, actor: Actor, at: number): Promise<readonly DeviceEvent[]> {
  const events = deviceDecider.decide(command, hub.state);
  hub.state = events.reduce(deviceDecider.evolve, hub.state);
  await w.append(deviceStream(hub.uuid), events.map((e) => ({ ...e, at })), actor);
  return events;
}

export async function writeHistory(store: EventStore, options: HistoryOptions): Promise<HistoryCounts> {
  const random = mulberry32(16);
  const counts: HistoryCounts = { events: 0, heartbeats: 0, transitions: 0, renames: 0, logins: 0 };
  const w: Writer = { random, counts, setClock: options.setClock, ...appender(store, random, counts, options.setClock) };
  const hubs: Hub[] = [];
  for (let i = 0; i < options.hubs; i++) hubs.push(await setUpHub(w, store, i, options.start + i * 1000));
  const hours = options.days * 24;
  for (let hour = 0; hour < hours; hour++) {
    const from = options.start + hour * HOUR_MS;
    for (const hub of hubs) await hubHour(w, hub, from);
    options.onProgress?.(counts.events, hour + 1);
  }
  await w.flush();
  return counts;
}

/** The owner, the registered hub with its heartbeat retention, and its device token. */
async function setUpHub(w: Writer, store: EventStore, i: number, at: number): Promise<Hub> {
  const owner = uuidFrom(w.random);
  const synced = userDecider.decide(
    { type: 'SyncCustomer', data: { userId: owner, syncId: 200_000 + i, email: `owner${i}@longevity.example`, firstName: 'Owner', lastName: `${i}`, active: true, now: iso(at) } },
    userDecider.initialState(),
  );
  await w.append(userStream(owner), synced.map((e) => ({ ...e, at })), { type: 'crm', id: 'bench' });
  const hub: Hub = { uuid: uuidFrom(w.random), owner, phaseMs: Math.floor(w.random() * HEARTBEAT_SECONDS * 1000), state: deviceDecider.initialState(), outage: null };
  const asOwner: Actor = { type: 'user', id: owner };
  await decide(
    w,
    hub,
    {
      type: 'RegisterDevice',
      data: { id: uuidFrom(w.random), uuid: hub.uuid, deviceId: `HUB-${i}`, name: `Hub ${i}`, ipAddress: '192.168.1.2', metadata: { fw: '1.0.0' }, actorUserId: owner, linkId: uuidFrom(w.random), ownedDeviceCount: 0, maxDevicesPerUser: 100, now: iso(at) },
    },
    asOwner,
    at,
  );
  await w.flush();
  w.setClock(at);
  await store.setStreamMaxAge(heartbeatStream(hub.uuid), RETENTION_SECONDS);
  await decide(w, hub, { type: 'IssueDeviceToken', data: { uuid: hub.uuid, actorUserId: owner, now: iso(at) } }, asOwner, at);
  return hub;
}

/** One hour of one hub: heartbeats, maybe an outage, a rename, a login. */
async function hubHour(w: Writer, hub: Hub, from: number): Promise<void> {
  const { random, counts } = w;
  const asDevice: Actor = { type: 'device', id: hub.uuid };
  if (hub.outage === null && random() < 1 / 24) {
    const start = from + Math.floor(random() * HOUR_MS);
    hub.outage = { from: start, until: start + OFFLINE_AFTER_MS + Math.floor(random() * 2 * HOUR_MS), markedOffline: false };
  }
  let beats: Array<{ type: string; data: unknown; at: number }> = [];
  const flushBeats = async (): Promise<void> => {
    await w.append(heartbeatStream(hub.uuid), beats, asDevice);
    beats = [];
  };
  const period = HEARTBEAT_SECONDS * 1000;
  const first = from + ((hub.phaseMs - (from % period) + period) % period);
  for (let at = first; at < from + HOUR_MS; at += period) {
    const outage = hub.outage;
    if (outage !== null && at >= outage.from && at < outage.until) {
      if (!outage.markedOffline && at >= outage.from + OFFLINE_AFTER_MS) {
        // The expiry job: five minutes without a heartbeat.
        await flushBeats();
        const lastHeartbeatAt = hub.state.status === 'active' ? hub.state.lastSeenAt : null;
        const command: DeviceCommand = { type: 'MarkOffline', data: { uuid: hub.uuid, lastHeartbeatAt, offlineAfterSeconds: OFFLINE_AFTER_MS / 1000, now: iso(at) } };
        counts.transitions += (await decide(w, hub, command, { type: 'system', id: 'expiry' }, at)).length;
        outage.markedOffline = true;
      }
      continue;
    }
    if (outage !== null && at >= outage.until) hub.outage = null;
    const ipAddress = random() < 1 / 5000 ? { ipAddress: `192.168.1.${2 + Math.floor(random() * 250)}` } : {};
    const command: DeviceCommand = { type: 'RecordHeartbeat', data: { uuid: hub.uuid, tokenGen: hub.state.status === 'active' ? hub.state.gen : 0, now: iso(at), ...ipAddress } };
    beats.push({ ...heartbeatReceived(command), at });
    counts.heartbeats++;
    if (hub.state.status === 'active' && (!hub.state.isOnline || 'ipAddress' in ipAddress)) {
      // The heartbeat first, then what it changed (the order the service appends them in).
      await flushBeats();
      counts.transitions += (await decide(w, hub, command, asDevice, at)).filter((e) => e.type === 'DeviceWentOnline').length;
    }
  }
  await flushBeats();
  await ownerActivity(w, hub, from);
}

/** About once a week a rename, about once a day a login of the owner. */
async function ownerActivity(w: Writer, hub: Hub, from: number): Promise<void> {
  const asOwner: Actor = { type: 'user', id: hub.owner };
  if (w.random() < 1 / 168) {
    const at = from + HOUR_MS - 1000;
    const command: DeviceCommand = { type: 'UpdateDevice', data: { uuid: hub.uuid, actorUserId: hub.owner, changes: { name: `Hub ${hub.uuid.slice(0, 4)} ${w.counts.renames}` }, now: iso(at) } };
    await decide(w, hub, command, asOwner, at);
    w.counts.renames++;
  }
  if (w.random() < 1 / 24) {
    const at = from + HOUR_MS - 500;
    const familyId = uuidFrom(w.random);
    const issued = sessionDecider.decide(
      { type: 'IssueRefresh', data: { familyId, jti: uuidFrom(w.random), userId: hub.owner, now: iso(at), ip: '192.168.1.10', userAgent: 'HomeHub/2.0' } },
      sessionDecider.initialState(),
    );
    await w.append(sessionStream(familyId), issued.map((e) => ({ ...e, at })), asOwner);
    w.counts.logins++;
  }
}
