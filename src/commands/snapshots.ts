import { randomUUID } from 'node:crypto';
import type { DeviceState } from '../domain/device';
import { STREAM_PREFIXES } from '../domain/events';
import type { Actor } from '../domain/messages';
import type { EventStore } from '../infra/eventstore/port';
import { deviceSubject, type Keyring } from '../privacy/keyring';
import type { CommandContext, FoldedStream } from './handler';

/**
 * Aggregate snapshots: a stream's fold written to a stream of its own every so many events,
 * so that a fold no process holds (after a restart, in another process) reads the newest
 * snapshot and the events after it, not the whole stream.
 *
 * A device stream grows with every presence change (`DeviceWentOnline`, `DeviceWentOffline`)
 * and every address or metadata change a heartbeat reports: a hub that has dropped off and
 * come back every day for a year has ~730 events. Without snapshots, every hub's first
 * handshake and heartbeat after a restart read its whole history, one record at a time in
 * embedded mode (bench/README.md, "Aged devices").
 *
 * A snapshot is a cache, never the source of truth:
 * - it is written after a command's append took the stream past a multiple of `every`
 *   events, with the state the command folded (exactly the fold up to that revision: the
 *   append succeeded against the revision it was folded from);
 * - one that is missing, of another format, unreadable or of another stream is ignored and
 *   the stream is read from its start, as before; a failed write loses nothing;
 * - snapshot streams (`snapshot-device-<uuid>`) match none of the prefixes the projections,
 *   feeds and audits read (`device-`, `user-`, ...): nothing but a fold reads them;
 * - the device's personal fields in it (name, `ipAddress`, `metadata`) are sealed under the
 *   device's key like those of its events (src/privacy/personal-fields.ts): an erasure that
 *   destroys the key leaves them "[erased]", as in the events they were folded from; never
 *   under a key made after the events it was folded from (`createDeviceSnapshots`).
 */
export interface SnapshotStore<State> {
  /** A snapshot is written each time a stream passes a multiple of this many events. */
  readonly every: number;
  /** The newest usable snapshot of `streamName`, or null. */
  load(streamName: string): Promise<FoldedStream<State> | null>;
  /** Writes `folded` as the snapshot of `streamName`; never throws (a snapshot is only a cache). */
  save(streamName: string, folded: FoldedStream<State>, ctx: CommandContext, occurredAt: string): Promise<void>;
  /**
   * Before an append that will take `streamName` past a snapshot point: makes what sealing the
   * snapshot needs and may not make afterwards (its device's data key, see `createDeviceSnapshots`).
   * False when it could not: the snapshot is not written (rather than wait on that again).
   * Never throws.
   */
  prepare?(streamName: string): Promise<boolean>;
}

/** An append that took a stream from `before` to `after` (revisions, -1n: empty) passed a multiple of `every` events. */
export function passedSnapshotPoint(before: bigint, after: bigint, every: number): boolean {
  const n = BigInt(every);
  return (after + 1n) / n > (before + 1n) / n;
}

export const SNAPSHOT_ACTOR: Actor = { type: 'system', id: 'snapshot' };

export const DEVICE_SNAPSHOT_EVENT = 'DeviceStateSnapshotted';
export const DEVICE_SNAPSHOT_PREFIX = 'snapshot-device-';
/** The shape of `DeviceState` the snapshots hold: a build that folds differently bumps it, and older snapshots are ignored. */
export const DEVICE_SNAPSHOT_FORMAT = 1;
/**
 * Events between two snapshots of a device. A cold fold reads a stream shorter than this in one
 * call, as without snapshots; a longer one costs its snapshot and fewer than this many events
 * where the store knows stream lengths (the embedded log), fewer than twice this many where it
 * reads to learn them (src/commands/handler.ts `foldStream`). 8 gave 1.88 ms of service CPU per
 * hub back in the aged-fleet storm when reading to learn lengths, 16 gave 2.16 (bench/README.md,
 * "Aged devices").
 */
export const DEVICE_SNAPSHOT_EVERY = 8;

export function deviceSnapshotStream(deviceUuid: string): string {
  return `${DEVICE_SNAPSHOT_PREFIX}${deviceUuid}`;
}

/** What a device snapshot stores. */
export interface DeviceSnapshotData {
  readonly uuid: string;
  /** The revision of `device-<uuid>` the state is the fold of. */
  readonly revision: number;
  readonly format: number;
  readonly state: DeviceState;
}

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

/** The uuid of a device stream, or null for any other stream. */
function deviceUuidOf(streamName: string): string | null {
  return streamName.startsWith(STREAM_PREFIXES.device) ? streamName.slice(STREAM_PREFIXES.device.length) : null;
}

function decodeDeviceSnapshot(uuid: string, data: unknown): FoldedStream<DeviceState> | null {
  if (!isRecord(data) || data.uuid !== uuid || data.format !== DEVICE_SNAPSHOT_FORMAT) return null;
  const revision = data.revision;
  if (typeof revision !== 'number' || !Number.isSafeInteger(revision) || revision < 0) return null;
  const state = data.state;
  if (!isRecord(state) || (state.status !== 'active' && state.status !== 'deleted') || state.uuid !== uuid) return null;
  return { state: state as unknown as DeviceState, revision: BigInt(revision) };
}

/**
 * `keys`: the keyring of `eventStore`. A snapshot is sealed after the append it follows, with no
 * expected revision, so an erasure may delete the device and destroy its data key in between:
 * it is then sealed only under a key the device still has (src/privacy/event-store.ts), never
 * one made for it. A device with no key yet (every event of it written before personal fields
 * were sealed) gets one made before the append instead, while the append's expected revision
 * still guards it: an erasure that deletes the device after it destroys that key too.
 */
export function createDeviceSnapshots(eventStore: EventStore, every = DEVICE_SNAPSHOT_EVERY, keys?: Pick<Keyring, 'keyFor'>): SnapshotStore<DeviceState> {
  return {
    every,

    async prepare(streamName) {
      const uuid = deviceUuidOf(streamName);
      if (keys === undefined || uuid === null) return true;
      try {
        await keys.keyFor(deviceSubject(uuid));
        return true;
      } catch {
        // Only for a cache: the key store is away (or the key damaged), and sealing would ask it again.
        return false;
      }
    },

    async load(streamName) {
      const uuid = deviceUuidOf(streamName);
      if (uuid === null) return null;
      let found: FoldedStream<DeviceState> | null = null;
      try {
        // Read to the end (one event) rather than leave the loop: a read left early is cancelled.
        for await (const recorded of eventStore.readStream(deviceSnapshotStream(uuid), { direction: 'backwards', maxCount: 1 })) {
          if (recorded.type === DEVICE_SNAPSHOT_EVENT) found = decodeDeviceSnapshot(uuid, recorded.data);
        }
      } catch {
        // Unreadable (a record damaged on disk, a failed read): the stream is read from its start,
        // which answers for itself; a cache must not make a device with an intact stream unusable.
        return null;
      }
      return found;
    },

    async save(streamName, folded, ctx, occurredAt) {
      const uuid = deviceUuidOf(streamName);
      // A stream with no device in it yet has nothing worth keeping.
      if (uuid === null || folded.state.status === 'none' || folded.revision < 0n) return;
      const data: DeviceSnapshotData = { uuid, revision: Number(folded.revision), format: DEVICE_SNAPSHOT_FORMAT, state: folded.state };
      const metadata = { occurredAt, actor: SNAPSHOT_ACTOR, requestId: ctx.requestId, causationId: ctx.commandId, correlationId: ctx.correlationId };
      try {
        await eventStore.append(deviceSnapshotStream(uuid), [{ id: randomUUID(), type: DEVICE_SNAPSHOT_EVENT, data, metadata }], 'any');
      } catch {
        // Only a cache: the next fold reads from the previous snapshot, or from the start.
      }
    },
  };
}
