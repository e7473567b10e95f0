import type { CompactionHook } from './compaction';
import type { TornTail } from './recovery';
import { nodeIo, type StoreIo } from './io';

export interface GroupCommit {
  readonly appends: number;
  readonly events: number;
  readonly bytes: number;
}

export interface EmbeddedEventStoreOptions {
  /** Clock (epoch ms) for the written-at time that $maxAge and reclamation compare against; tests age events with it. */
  readonly now?: () => number;
  /** Called once per durable group commit: shows how well appends are being batched. */
  readonly onGroupCommit?: (commit: GroupCommit) => void;
  /** Called when open drops a torn tail; defaults to a warning on stderr. */
  readonly onTornTail?: (tail: TornTail) => void;
  /** Where notes about recovery and reclamation go; defaults to stderr. */
  readonly log?: (message: string) => void;
  /** A segment is sealed once it would grow past this many bytes (default 8 MiB). */
  readonly segmentBytes?: number;
  /**
   * The active segment's index checkpoint is written each time it grew by this many bytes
   * (default 1 MiB), so an open after a crash scans only what follows the last one.
   */
  readonly checkpointBytes?: number;
  /** How often expired heartbeats are reclaimed (default hourly, and once right after open); 0: only by reclaimExpired(). */
  readonly reclaimIntervalMs?: number;
  /** Called after each step of a compaction (tests simulate crashes there). */
  readonly compactionHook?: CompactionHook;
  /** The file I/O under the engine (default node:fs); the fault simulation swaps in its own. */
  readonly io?: StoreIo;
  /**
   * How the data directory is held against other processes: resolves to its release
   * (default: the lock file of lock.ts, on the real file system). The simulation, whose
   * files live in memory, passes its own.
   */
  readonly lock?: (directory: string, onLost: (error: Error) => void) => Promise<() => Promise<void>>;
}

export interface ResolvedOptions {
  readonly now: () => number;
  readonly onGroupCommit: ((commit: GroupCommit) => void) | undefined;
  readonly log: (message: string) => void;
  readonly segmentBytes: number;
  readonly checkpointBytes: number;
  readonly reclaimIntervalMs: number;
  readonly compactionHook: CompactionHook;
  readonly io: StoreIo;
}

export const DEFAULT_SEGMENT_BYTES = 8 * 1024 * 1024;
export const DEFAULT_CHECKPOINT_BYTES = 1024 * 1024;
export const DEFAULT_RECLAIM_INTERVAL_MS = 60 * 60 * 1000;

export function resolveOptions(options: EmbeddedEventStoreOptions): ResolvedOptions {
  return {
    now: options.now ?? Date.now,
    onGroupCommit: options.onGroupCommit,
    log: options.log ?? ((message) => console.warn(message)),
    segmentBytes: options.segmentBytes ?? DEFAULT_SEGMENT_BYTES,
    checkpointBytes: options.checkpointBytes ?? DEFAULT_CHECKPOINT_BYTES,
    reclaimIntervalMs: options.reclaimIntervalMs ?? DEFAULT_RECLAIM_INTERVAL_MS,
    compactionHook: options.compactionHook ?? (() => undefined),
    io: options.io ?? nodeIo,
  };
}
