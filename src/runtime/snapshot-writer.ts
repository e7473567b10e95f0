import type { EmbeddedConfig } from '../config';
import type { Logger } from '../logger';
import { snapshotVersion, writeStartSnapshot, type SnapshotBody, type StartSnapshot } from './snapshot';

/**
 * Writes start snapshots (src/runtime/snapshot.ts) while the service runs: once `everyEvents`
 * events were appended since the last one, or every `intervalMs` when anything was appended
 * at all, and a last time at shutdown (after the projector has stopped, so the snapshot
 * covers everything applied). One write at a time; a snapshot that would cover exactly what
 * the previous one did is not written again.
 */

export interface SnapshotWriter {
  /** Told of every append (the event store's append observer): counts towards `everyEvents`. */
  appended(count: number): void;
  /** Writes now if anything changed since the last snapshot (after a write in progress). */
  write(): Promise<void>;
  /**
   * As `write`, but written even when the checkpoint has not moved, and a write that fails rejects (an erasure must not answer while the snapshot
   * on disk still holds what it erased; asking again writes it again).
   */
  writeOrFail(): Promise<void>;
  /** Stops the periodic writes (a write in progress finishes). */
  stop(): Promise<void>;
}

export interface SnapshotWriterOptions {
  readonly file: string;
  readonly version: string;
  readonly logger: Logger;
  readonly everyEvents: number;
  readonly intervalMs: number;
  /** The state to save, taken in one synchronous step; null when there is nothing to save. */
  readonly collect: () => SnapshotBody | null;
  /** The body the start was restored from, if any (nothing to write until the state moves on). */
  readonly restored: SnapshotBody | null;
}

/** The first wait before looking again at what the projector applied after a counted write (ms). */
const FIRST_LOOK_MS = 100;

/** Two bodies cover the same events when their positions are the same. */
function coverage(body: SnapshotBody): string {
  return body.readModels.checkpoints.projector ?? '';
}

export function startSnapshotWriter(options: SnapshotWriterOptions): SnapshotWriter {
  const { logger } = options;
  let lastCoverage = options.restored === null ? null : coverage(options.restored);
  let sinceLast = 0;
  let chain: Promise<void> = Promise.resolve();
  let pending = false;
  let stopped = false;
  // After the count asks for a write, the projector may not have applied everything counted
  // (not moved at all, or part of the burst): while nothing more is appended, the writer looks
  // again (100 ms doubling up to the interval) and writes what was applied meanwhile. Else a
  // burst that ends before the projector catches up would wait for the interval, or for the
  // next append. Appends meanwhile hand over to the count and the interval again.
  let followMs = FIRST_LOOK_MS;
  let follow: NodeJS.Timeout | null = null;

  /** Whether the last write put a snapshot on disk. */
  let wrote = false;

  const writeOnce = async (fail = false): Promise<void> => {
    wrote = false;
    const body = options.collect();
    // A required write (an erasure's) goes to disk even when the projector's checkpoint has not
    // moved yet: the documents it dropped already have, and applying again is idempotent.
    if (body === null || (!fail && coverage(body) === lastCoverage)) {
      if (sinceLast >= options.everyEvents) followLater(false);
      return;
    }
    const events = sinceLast;
    sinceLast = 0;
    const started = Date.now();
    try {
      const bytes = await writeStartSnapshot(options.file, options.version, body);
      lastCoverage = coverage(body);
      wrote = true;
      logger.info({ position: body.readModels.checkpoints.projector ?? null, bytes, events, ms: Date.now() - started }, 'start snapshot written');
      if (events >= options.everyEvents) followLater(true);
    } catch (error) {
      sinceLast += events;
      logger.warn({ err: error instanceof Error ? error.message : String(error) }, 'start snapshot: write failed (the next start may replay more)');
      if (fail) throw error;
    }
  };

  const write = (): Promise<void> => {
    chain = chain.then(() => writeOnce());
    return chain;
  };

  const writeOrFail = (): Promise<void> => {
    const done = chain.then(() => writeOnce(true));
    chain = done.catch(() => undefined);
    return done;
  };

  function followLater(restart: boolean): void {
    if (stopped) return;
    if (restart) followMs = FIRST_LOOK_MS;
    if (follow !== null || followMs > Math.max(FIRST_LOOK_MS, options.intervalMs)) return;
    const delay = followMs;
    followMs *= 2;
    follow = setTimeout(() => {
      follow = null;
      if (stopped) return;
      if (sinceLast >= options.everyEvents) writeSoon();
      else if (sinceLast === 0) void write().then(() => followLater(false));
    }, delay);
    follow.unref();
  }

  /** A periodic write, unless one is already waiting to run. */
  function writeSoon(): void {
    if (pending || stopped) return;
    pending = true;
    void write().finally(() => {
      pending = false;
      // The count reached again while that write ran (it had taken what was counted before).
      if (wrote && sinceLast >= options.everyEvents) writeSoon();
    });
  }

  const timer = setInterval(() => {
    if (sinceLast > 0) writeSoon();
  }, options.intervalMs);
  timer.unref();

  return {
    appended(count) {
      sinceLast += count;
      if (sinceLast >= options.everyEvents) {
        followMs = FIRST_LOOK_MS;
        writeSoon();
      }
    },
    write,
    writeOrFail,
    async stop() {
      stopped = true;
      clearInterval(timer);
      if (follow !== null) clearTimeout(follow);
      await chain;
    },
  };
}

/** The writer of a running embedded service: periodic snapshots of its read models (the access revocations among them). */
export function startEmbeddedSnapshots(
  config: EmbeddedConfig,
  snapshot: StartSnapshot,
  logger: Logger,
): SnapshotWriter {
  return startSnapshotWriter({
    file: snapshot.file,
    version: snapshotVersion(config.version),
    logger,
    everyEvents: config.snapshotEveryEvents,
    intervalMs: config.snapshotIntervalSeconds * 1000,
    restored: snapshot.restored,
    collect: () => {
      const readModels = snapshot.exportReadModels();
      return readModels === null ? null : { readModels };
    },
  });
}
