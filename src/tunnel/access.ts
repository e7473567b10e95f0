import { loadAggregate, type FoldedStream } from '../commands/handler';
import { deviceDecider, type DeviceEvent, type DeviceState } from '../domain/device';
import { deviceStream } from '../domain/events';
import type { EventStore, RecordedEvent } from '../infra/eventstore/port';

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
 */
export interface DeviceAccess {
  fresh(uuid: string): Promise<FoldedStream<DeviceState>>;
  peek(uuid: string): FoldedStream<DeviceState> | undefined;
  /** True when `fresh` ran for this device less than `withinMs` ago. */
  verifiedRecently(uuid: string, withinMs: number): boolean;
  /** An event of `device-<uuid>` from the live subscription. */
  apply(event: RecordedEvent): void;
}

interface Entry {
  folded: FoldedStream<DeviceState>;
  verifiedAt: number;
}

export function createDeviceAccess(eventStore: EventStore, options: { maxEntries: number; now: () => number }): DeviceAccess {
  const entries = new Map<string, Entry>();

  const touch = (uuid: string, entry: Entry): void => {
    entries.delete(uuid);
    entries.set(uuid, entry);
    if (entries.size > options.maxEntries) entries.delete(entries.keys().next().value as string);
  };

  return {
    async fresh(uuid) {
      const known = entries.get(uuid)?.folded;
      const read = await loadAggregate<DeviceState, DeviceEvent>(
        eventStore,
        deviceDecider.evolve,
        deviceDecider.initialState,
        deviceStream(uuid),
        known,
      );
      const current = entries.get(uuid);
      // The live subscription may have moved the entry on while this read was running.
      if (current !== undefined && current.folded.revision > read.revision) {
        current.verifiedAt = options.now();
        return current.folded;
      }
      if (read.revision >= 0n) touch(uuid, { folded: read, verifiedAt: options.now() });
      return read;
    },

    peek(uuid) {
      return entries.get(uuid)?.folded;
    },

    verifiedRecently(uuid, withinMs) {
      const entry = entries.get(uuid);
      return entry !== undefined && options.now() - entry.verifiedAt < withinMs;
    },

    apply(event) {
      const uuid = event.streamName.slice('device-'.length);
      const entry = entries.get(uuid);
      if (entry === undefined || event.revision <= entry.folded.revision) return;
      if (event.revision !== entry.folded.revision + 1n) {
        // A gap: this fold can no longer be brought up to date here; the next `fresh` reads it again.
        entries.delete(uuid);
        return;
      }
      const state = deviceDecider.evolve(entry.folded.state, { type: event.type, data: event.data } as DeviceEvent);
      entry.folded = { state, revision: event.revision };
    },
  };
}
