import { loadAggregate, sharedRevision, type FoldedStream, type StateCache } from '../commands/handler';
import { createDeviceSnapshots } from '../commands/snapshots';
import { deviceDecider, type DeviceEvent, type DeviceState } from '../domain/device';
import { deviceStream } from '../domain/events';
import type { EventStore, RecordedEvent } from '../infra/eventstore/port';
import { keptDeviceFold } from '../privacy/kept-folds';

/**
 * Device states as the tunnel needs them (status, token generation, links), folded from
 * `device-<uuid>` — the write side, not the read model, because the read model has no
 * token generation and may trail a write made through another process.
 *
 * Two ways to ask:
 * - `fresh`: reads what was appended since the cached fold (usually nothing). For the
 *   handshake and subscribe, which must see a link or token the caller has just been given.
 * - `peek`: the cached fold, kept current by the tunnel's live subscription (`apply`), for
 *   the per-message permission check, which must not cost a read.
 *
 * A deleted device's fold is kept without its personal data (src/privacy/kept-folds.ts): the
 * deletion read by `fresh` or handed over by the live subscription, on whichever process.
 */
export interface DeviceAccess {
  fresh(uuid: string): Promise<FoldedStream<DeviceState>>;
  peek(uuid: string): FoldedStream<DeviceState> | undefined;
  /** True when `fresh` ran for this device less than `withinMs` ago. */
  verifiedRecently(uuid: string, withinMs: number): boolean;
  /** An event of `device-<uuid>` from the live subscription. */
  apply(event: RecordedEvent): void;
}

/**
 * A device with reads in flight: the newest revision the live subscription has handed over
 * for it meanwhile. A read that comes back older than that began before the event was
 * appended, and the subscription will not hand the event over again: it is read once more
 * instead of being cached (a fold cached behind its feed would keep a revoked access for good).
 */
interface InFlight {
  reads: number;
  seen: bigint;
}

export interface DeviceAccessOptions {
  readonly maxEntries: number;
  readonly now: () => number;
  /**
   * The heartbeat path's folds of the same streams (src/commands/devices.ts). A read starts
   * from the newer of the two, and a fold the live subscription brings to a revision the
   * shared cache already holds takes that one: a hub's device costs one fold, not two, and
   * its handshake after its first heartbeat reads nothing but what is new. What `fresh`
   * reads goes into it too: a hub whose handshake comes first (after a restart, the tunnel
   * is back before the missed heartbeat) costs one cold read of its stream, not two.
   */
  readonly shared?: Pick<StateCache<DeviceState>, 'get' | 'set'> | undefined;
}

/**
 * How many devices `verifiedRecently` can answer for at once (the latest `fresh` of each), and
 * for how long. It is asked about the last fraction of a second (a refusal from the cache is
 * rechecked at most every 250 ms); a device it no longer knows is read again, which is what a
 * refusal without a recent check costs anyway. An idle hub's fold carries no time of its own.
 */
export const RECENT_VERIFICATIONS = 1024;
export const RECENT_VERIFICATION_MS = 10_000;

const newer = (a: FoldedStream<DeviceState> | undefined, b: FoldedStream<DeviceState> | undefined): FoldedStream<DeviceState> | undefined =>
  a === undefined ? b : b === undefined || a.revision >= b.revision ? a : b;

export function createDeviceAccess(eventStore: EventStore, options: DeviceAccessOptions): DeviceAccess {
  /** The folds by uuid, least recently read first: each one the very object the shared cache holds at that revision. */
  const entries = new Map<string, FoldedStream<DeviceState>>();
  /**
   * When `fresh` last ran for the devices it ran for lately, oldest first: ms after `origin`
   * (a small integer, not a number object per entry, for the first 24 days; then a number object).
   */
  const verified = new Map<string, number>();
  const origin = options.now();
  const inFlight = new Map<string, InFlight>();
  const shared = options.shared;
  const snapshots = createDeviceSnapshots(eventStore);

  const touch = (uuid: string, folded: FoldedStream<DeviceState>): void => {
    entries.delete(uuid);
    entries.set(uuid, folded);
    if (entries.size > options.maxEntries) entries.delete(entries.keys().next().value as string);
  };

  const verifiedNow = (uuid: string): void => {
    const now = Math.floor(options.now() - origin);
    verified.delete(uuid);
    verified.set(uuid, now);
    for (const [oldest, at] of verified) {
      if (verified.size <= RECENT_VERIFICATIONS && now - at < RECENT_VERIFICATION_MS) break;
      verified.delete(oldest);
    }
  };

  return {
    async fresh(uuid) {
      let flight = inFlight.get(uuid);
      if (flight === undefined) inFlight.set(uuid, (flight = { reads: 0, seen: -1n }));
      flight.reads++;
      try {
        let read = newer(entries.get(uuid), shared?.get(deviceStream(uuid)));
        for (;;) {
          const base = read;
          read = await loadAggregate<DeviceState, DeviceEvent>(eventStore, deviceDecider.evolve, deviceDecider.initialState, deviceStream(uuid), base, snapshots);
          // Nothing new: the fold read from, not a copy of it. A deleted device's, as kept.
          read = keptDeviceFold(base !== undefined && read.revision === base.revision ? base : read);
          const current = entries.get(uuid);
          // The live subscription may have moved the entry on while this read was running.
          if (current !== undefined && current.revision >= flight.seen && current.revision > read.revision) {
            verifiedNow(uuid);
            shared?.set(deviceStream(uuid), current);
            return current;
          }
          // An event the subscription handed over during the read, newer than what the read saw: read again.
          if (read.revision < flight.seen) continue;
          if (read.revision >= 0n) {
            touch(uuid, read);
            verifiedNow(uuid);
            // Only a fold no newer event was seen for (the loop above): the heartbeat path trusts it as current.
            shared?.set(deviceStream(uuid), read);
          }
          return read;
        }
      } finally {
        if (--flight.reads === 0) inFlight.delete(uuid);
      }
    },

    peek(uuid) {
      return entries.get(uuid);
    },

    verifiedRecently(uuid, withinMs) {
      const at = verified.get(uuid);
      return at !== undefined && entries.has(uuid) && options.now() - origin - at < withinMs;
    },

    apply(event) {
      const uuid = event.streamName.slice('device-'.length);
      const flight = inFlight.get(uuid);
      if (flight !== undefined && event.revision > flight.seen) flight.seen = event.revision;
      const folded = entries.get(uuid);
      if (folded === undefined || event.revision <= folded.revision) return;
      if (event.revision !== folded.revision + 1n) {
        // A gap: this fold can no longer be brought up to date here; the next `fresh` reads it again.
        entries.delete(uuid);
        return;
      }
      // The heartbeat path folded the same event already (it appended it): the same fold, kept once.
      // (`set` on a key the map holds changes the value only: the order of reads stays.)
      const same = shared?.get(event.streamName);
      if (same?.revision === event.revision) {
        entries.set(uuid, keptDeviceFold(same));
        return;
      }
      const state = deviceDecider.evolve(folded.state, { type: event.type, data: event.data } as DeviceEvent);
      entries.set(uuid, keptDeviceFold({ state, revision: sharedRevision(event.revision) }));
    },
  };
}
