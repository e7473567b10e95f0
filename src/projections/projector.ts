import type { EventStore, GlobalPosition, RecordedEvent, Subscription } from '../infra/eventstore/port';
import { formatPosition, parsePosition } from '../infra/eventstore/port';
import { positionOrder } from './projection';
import type { ReadStore } from '../infra/readstore/port';
import { batchesOf, DEFAULT_BATCH_LIMITS, type BatchLimits } from './batches';
import type { Projection } from './projection';

export const CHECKPOINT_NAME = 'projector';

export interface ProjectorProgress {
  readonly position: GlobalPosition | null;
  readonly caughtUp: boolean;
  readonly eventsApplied: number;
  /** When the last applied event occurred, for lag in milliseconds. */
  readonly lastEventAt: string | null;
  /**
   * Since when (ms since the epoch) the oldest write to the read store still unanswered was
   * begun (a batch's reads and writes, a checkpoint), or null when none is waiting: a
   * projector cut off from its store shows it here while nothing else tells (the call waits).
   */
  readonly pendingSince: number | null;
}

export interface ProjectorOptions {
  /** Write the checkpoint at least this often while events keep coming. */
  readonly checkpointEveryEvents?: number;
  readonly checkpointEveryMs?: number;
  /** Told once per applied batch, with its last position; the read-your-writes watermark listens here. */
  readonly onApplied?: (position: GlobalPosition) => void;
  /** How much one batch may hold (see src/projections/batches.ts). */
  readonly batchLimits?: BatchLimits;
  readonly onError?: (error: unknown) => void;
  /**
   * Distributed mode: the projector lease this projector applies under. No batch is written
   * once `held()` says no (the projector then stops by itself, as when its subscription
   * ends), and `epoch` goes with every checkpoint: the store refuses a checkpoint from an
   * older epoch than the one it holds. Without it (embedded mode) the epoch is 0.
   */
  readonly fencing?: ProjectorFencing;
}

export interface ProjectorFencing {
  readonly epoch: number;
  readonly held: () => boolean;
}

/** A newer projector (a newer lease epoch) has written the checkpoint: this one must stop. */
export class ProjectorFencedError extends Error {
  constructor(epoch: number) {
    super(`projector of lease epoch ${epoch} fenced off: a newer projector wrote the checkpoint`);
  }
}

export interface Projector {
  readonly progress: () => ProjectorProgress;
  /** Resolves when the subscription has been closed and the last checkpoint written. */
  readonly stop: () => Promise<void>;
  /** Resolves once history up to the start has been applied. */
  readonly caughtUp: Promise<void>;
  /** Resolves (or rejects) when the projector stops by itself. */
  readonly done: Promise<void>;
}

/**
 * Catch-up subscription over all events from the stored checkpoint, applied in batches:
 * whatever the subscription has ready (bounded), each projection given the batch's events
 * of its streams (an event no projection reads only moves the position). Each projection
 * reads the documents it touches once and writes its changes with one bulk write; then
 * the position moves, `onApplied` hears of it once, and the checkpoint is written when due
 * (writes are guarded, so a crash between the writes and the checkpoint only re-applies
 * a batch harmlessly).
 */
export async function startProjector(
  eventStore: EventStore,
  readStore: ReadStore,
  projections: readonly Projection[],
  options: ProjectorOptions = {},
): Promise<Projector> {
  const everyEvents = options.checkpointEveryEvents ?? 500;
  const everyMs = options.checkpointEveryMs ?? 100;
  const fencing = options.fencing;
  const mayWrite = (): boolean => fencing === undefined || fencing.held();
  for (const projection of projections) await projection.init(readStore);

  const stored = await readStore.getCheckpoint(CHECKPOINT_NAME);
  let position: GlobalPosition | null = stored === null ? null : parsePosition(stored);
  let checkpointed = position;
  let caughtUpFlag = false;
  let eventsApplied = 0;
  let lastEventAt: string | null = null;
  let lastCheckpointAt = Date.now();
  let sinceCheckpoint = 0;
  let timer: NodeJS.Timeout | undefined;
  /** The start of each read-store call in flight (a batch, a checkpoint): the oldest is `pendingSince`. */
  const inFlight = new Set<{ readonly since: number }>();
  const tracked = async <T>(work: () => Promise<T>): Promise<T> => {
    const entry = { since: Date.now() };
    inFlight.add(entry);
    try {
      return await work();
    } finally {
      inFlight.delete(entry);
    }
  };
  const pendingSince = (): number | null => {
    let oldest: number | null = null;
    for (const { since } of inFlight) if (oldest === null || since < oldest) oldest = since;
    return oldest;
  };

  // Every stream, not only those some projection reads: the position then passes events
  // nothing projects too (e-mail reservations), so a write of one of them is "applied" for
  // read-your-writes, readiness and lag as soon as the projector has seen it.
  const subscription: Subscription = eventStore.subscribe(position !== null ? { fromPosition: position } : {});

  let resolveCaughtUp: () => void = () => undefined;
  const caughtUp = new Promise<void>((resolve) => (resolveCaughtUp = resolve));

  const writeCheckpoint = async (): Promise<void> => {
    if (position === null || position === checkpointed || !mayWrite()) return;
    const p = position;
    const epoch = fencing?.epoch ?? 0;
    // A position further on stored already ('behind') is harmless: documents are guarded, and the checkpoint never goes back.
    const written = await tracked(() => readStore.advanceCheckpoint(CHECKPOINT_NAME, formatPosition(p), { epoch, order: positionOrder(p) }));
    if (written === 'fenced') {
      throw new ProjectorFencedError(epoch);
    }
    checkpointed = p;
    sinceCheckpoint = 0;
    lastCheckpointAt = Date.now();
  };

  // A quiet stream still gets its last checkpoint written soon after the last event. A write
  // that fails fails the projector as a failed batch does (the owner restarts it from the
  // checkpoint stored): a projector reported failed is one that stopped.
  let idleFailure: { readonly error: unknown } | null = null;
  const idleFailureOf = (): { readonly error: unknown } | null => idleFailure;
  const scheduleIdleCheckpoint = (): void => {
    if (timer !== undefined) return;
    timer = setTimeout(() => {
      timer = undefined;
      writeCheckpoint().catch((error: unknown) => {
        idleFailure ??= { error };
        void subscription.close().catch(() => undefined);
      });
    }, everyMs);
    timer.unref();
  };

  const applyBatch = async (events: readonly RecordedEvent[]): Promise<void> => {
    const last = events[events.length - 1];
    if (last === undefined) return;
    // Collections are independent and the checkpoint comes after all of them: in parallel.
    await tracked(() =>
      Promise.all(
        projections.map((projection) => {
          const mine = events.filter((event) => projection.streamPrefixes.some((prefix) => event.streamName.startsWith(prefix)));
          return mine.length === 0 ? undefined : projection.applyBatch(mine, readStore);
        }),
      ),
    );
    position = last.position;
    eventsApplied += events.length;
    sinceCheckpoint += events.length;
    lastEventAt = last.metadata.occurredAt;
    if (sinceCheckpoint >= everyEvents || Date.now() - lastCheckpointAt >= everyMs) await writeCheckpoint();
    else scheduleIdleCheckpoint();
    options.onApplied?.(last.position);
  };

  const done = (async () => {
    for await (const batch of batchesOf(subscription, options.batchLimits ?? DEFAULT_BATCH_LIMITS)) {
      // The lease is no longer certainly ours: nothing more is written, read ahead or not.
      if (!mayWrite()) break;
      await applyBatch(batch.events);
      if (batch.caughtUp) {
        await writeCheckpoint();
        caughtUpFlag = true;
        resolveCaughtUp();
      }
    }
    const failure = idleFailureOf();
    if (failure !== null) throw failure.error;
  })();
  // Surface a failure to the owner through `done`, but also unblock anyone awaiting caughtUp.
  done.catch((error: unknown) => {
    options.onError?.(error);
    resolveCaughtUp();
  });

  return {
    caughtUp,
    done,
    progress: () => ({ position, caughtUp: caughtUpFlag, eventsApplied, lastEventAt, pendingSince: pendingSince() }),
    stop: async () => {
      await subscription.close();
      await done.catch(() => undefined);
      if (timer !== undefined) clearTimeout(timer);
      await writeCheckpoint().catch((error: unknown) => {
        if (!(error instanceof ProjectorFencedError)) throw error;
      });
    },
  };
}
