/**
 * Retention on disk: heartbeats older than the $maxAge of their `heartbeat-<uuid>` stream
 * are removed from sealed segments by compaction (compaction.ts), at open and then on a
 * timer owned by the store, and on demand with reclaimExpired(). Appends go on meanwhile:
 * they only ever touch the active segment, and swapping in a compacted segment is one
 * synchronous step. Only heartbeat streams are reclaimed, never their newest event, and
 * only what reads already hide (written before now − $maxAge).
 */
import { errorMessage } from './files';
import { compactSegment, type CompactedSegment, type ReclaimRule, type RecordRewrite } from './compaction';
import type { LogIndex } from './log-index';
import type { ResolvedOptions } from './options';
import { locatorOf, Segment, segmentIndexAt, type HandlePool } from './segment';
import type { SegmentTable } from './segment-table';
import { EmbeddedStoreCore } from './store';

export const RECLAIMED_STREAM_PREFIX = 'heartbeat-';

export interface ReclaimResult {
  readonly segmentsCompacted: number;
  readonly eventsReclaimed: number;
  /** Bytes of all segment files before and after. */
  readonly bytesBefore: number;
  readonly bytesAfter: number;
}

/** What may be reclaimed now: per heartbeat stream with a $maxAge and more than one event. */
export function reclaimRules(index: LogIndex, now: number): Map<string, ReclaimRule> {
  const rules = new Map<string, ReclaimRule>();
  for (const [name, maxAge] of index.maxAgeSeconds) {
    if (!name.startsWith(RECLAIMED_STREAM_PREFIX)) continue;
    const stream = index.streams.get(name);
    if (stream === undefined || stream.durableCount < 2) continue;
    rules.set(name, { cutoff: now - maxAge * 1000, newestRevision: stream.firstRevision + stream.durableCount - 1 });
  }
  return rules;
}

/**
 * The sealed segments (oldest first) that hold an event some rule reclaims, from the index
 * alone. Per stream only the segments from its oldest event up to the first segment
 * written after its cutoff are looked at: a few per run once the log is in steady state.
 */
export function segmentsToCompact(index: LogIndex, sealed: readonly Segment[], rules: ReadonlyMap<string, ReclaimRule>): Array<{ segment: Segment; rules: Map<string, ReclaimRule> }> {
  // Each segment gets the rules of exactly the streams whose walk chose it: a stream then
  // loses events only in an unbroken run of its segments from its oldest, so always a
  // prefix of its events (a rule applied in a later segment but not an earlier one would
  // cut the stream in the middle).
  const chosen = new Map<Segment, Map<string, ReclaimRule>>();
  for (const [name, rule] of rules) {
    const stream = index.streams.get(name);
    const first = stream?.at(0);
    const lastReclaimable = stream?.at(rule.newestRevision - 1 - (stream?.firstRevision ?? 0));
    if (stream === undefined || first === undefined || lastReclaimable === undefined || sealed.length === 0) continue;
    for (let i = segmentIndexAt(sealed, first); i < sealed.length; i++) {
      const segment = sealed[i] as Segment;
      if (segment.base > lastReclaimable) break;
      // An empty (fully reclaimed) segment says nothing about the ones after it.
      if (segment.lastPosition === null || segment.firstWrittenAt === null) continue;
      if (segment.firstWrittenAt >= rule.cutoff) break;
      const position = stream.at(stream.lowerBound(segment.base));
      if (position === undefined || position > lastReclaimable) break;
      if (position > segment.lastPosition) continue;
      let segmentRules = chosen.get(segment);
      if (segmentRules === undefined) {
        segmentRules = new Map();
        chosen.set(segment, segmentRules);
      }
      segmentRules.set(name, rule);
    }
  }
  return sealed.flatMap((segment) => {
    const segmentRules = chosen.get(segment);
    return segmentRules === undefined ? [] : [{ segment, rules: segmentRules }];
  });
}

export interface RewriteResult {
  readonly segmentsRewritten: number;
  readonly eventsRewritten: number;
}

export class EmbeddedEventStore extends EmbeddedStoreCore {
  private reclaiming: Promise<unknown> = Promise.resolve();
  private stopping = false;
  private closed: Promise<void> | null = null;
  private readonly timers: NodeJS.Timeout[] = [];

  constructor(
    directory: string,
    segments: Segment[],
    index: LogIndex,
    activeTable: SegmentTable,
    options: ResolvedOptions,
    pool: HandlePool,
    private readonly releaseLock: () => Promise<void>,
  ) {
    super(directory, segments, index, activeTable, options, pool);
    if (options.reclaimIntervalMs > 0) {
      this.timers.push(setTimeout(() => this.reclaimInBackground(), 0), setInterval(() => this.reclaimInBackground(), options.reclaimIntervalMs));
      for (const timer of this.timers) timer.unref();
    }
  }

  /** Another process holds the lock on the file `events.lock` names now (see lock.ts): no more writes from this one. */
  stopWritingAfterLockLost(error: Error): void {
    this.writes.stopAfterLockLost(error);
  }

  /** Reclaims expired heartbeats from disk now (runs one at a time with the timer's runs). */
  reclaimExpired(): Promise<ReclaimResult> {
    const run = this.reclaiming.then(() => this.reclaimOnce());
    this.reclaiming = run.catch(() => undefined);
    return run;
  }

  /**
   * Rewrites on disk the events of `streams` that `rewrite` changes (a redaction of personal
   * fields that releases before sealing wrote in the clear): each segment holding an event of
   * these streams is compacted with the rewrite (compaction.ts: a copy renamed over it, positions,
   * ids, types and metadata kept), the active segment sealed first if it holds one. Runs one at
   * a time with reclamation; once it resolves no segment file holds the old bytes.
   */
  rewriteStreams(streams: readonly string[], rewrite: RecordRewrite): Promise<RewriteResult> {
    const run = this.reclaiming.then(() => this.rewriteOnce(streams, rewrite));
    this.reclaiming = run.catch(() => undefined);
    return run;
  }

  /** The segments (oldest first) holding an event of `streams` that `rewrite` changes: usually none (read by stream, not scanned). */
  private async segmentsToRewrite(streams: readonly string[], rewrite: RecordRewrite): Promise<Segment[]> {
    const positions: number[] = [];
    for (const name of streams) {
      for await (const event of this.readStream(name)) {
        if (rewrite(name, { id: event.id, type: event.type, data: event.data, metadata: event.metadata }) !== null) positions.push(Number(event.position.commit));
      }
    }
    const chosen = new Set(positions.map((position) => segmentIndexAt(this.segments, position)));
    return [...chosen].sort((a, b) => a - b).flatMap((i) => (this.segments[i] === undefined ? [] : [this.segments[i] as Segment]));
  }

  private async rewriteOnce(streams: readonly string[], rewrite: RecordRewrite): Promise<RewriteResult> {
    await this.writes.untilWritable();
    if ((await this.segmentsToRewrite(streams, rewrite)).includes(this.active())) await this.sealActiveSegment();
    let segmentsRewritten = 0;
    let eventsRewritten = 0;
    for (const segment of await this.segmentsToRewrite(streams, rewrite)) {
      // Nothing appended after the seal above needs it (this release seals what it writes).
      if (segment === this.active()) continue;
      await this.writes.untilWritable();
      this.writes.assertWritable();
      const compacted = await compactSegment(segment, new Map(), this.options.compactionHook, this.options.io, rewrite);
      if (compacted === null) continue;
      await this.swapIn(segment, compacted);
      segmentsRewritten++;
      eventsRewritten += compacted.eventsRewritten;
    }
    return { segmentsRewritten, eventsRewritten };
  }

  override close(): Promise<void> {
    this.closed ??= this.closeOnce();
    return this.closed;
  }

  private async closeOnce(): Promise<void> {
    this.stopping = true;
    for (const timer of this.timers) clearInterval(timer);
    await this.reclaiming;
    await super.close();
    await this.releaseLock();
  }

  private reclaimInBackground(): void {
    if (this.stopping) return;
    this.reclaimExpired().then(
      (result) => {
        if (result.segmentsCompacted > 0) {
          this.options.log(
            `Event log: reclaimed ${result.eventsReclaimed} expired heartbeats from ${result.segmentsCompacted} segments ` +
              `(${result.bytesBefore} -> ${result.bytesAfter} bytes)`,
          );
        }
      },
      (error: unknown) => this.options.log(`Event log: reclaiming expired heartbeats failed: ${errorMessage(error)}`),
    );
  }

  private totalBytes(): number {
    return this.segments.reduce((sum, segment) => sum + segment.size, 0);
  }

  private async reclaimOnce(): Promise<ReclaimResult> {
    const bytesBefore = this.totalBytes();
    const rules = reclaimRules(this.index, this.now());
    // Oldest first, so each stream always loses a prefix of its events.
    const candidates = segmentsToCompact(this.index, this.segments.slice(0, -1), rules);
    let segmentsCompacted = 0;
    let eventsReclaimed = 0;
    for (const { segment, rules: segmentRules } of candidates) {
      if (this.stopping) break;
      // A compaction writes: after a failed write it first needs writes to work again.
      await this.writes.untilWritable();
      this.writes.assertWritable();
      const compacted = await compactSegment(segment, segmentRules, this.options.compactionHook, this.options.io);
      if (compacted === null) continue;
      await this.swapIn(segment, compacted);
      segmentsCompacted++;
      eventsReclaimed += compacted.eventsReclaimed;
    }
    return { segmentsCompacted, eventsReclaimed, bytesBefore, bytesAfter: this.totalBytes() };
  }

  /**
   * Steps 4 and 5 of a compaction (see compaction.ts): readers move to the new file and the
   * index forgets what was reclaimed, in one synchronous step right after the rename, before
   * anything that may fail. (Were the directory sync to fail first, the old segment would stay
   * in use with its offsets while its name holds the copy; a later failed attempt unpins it,
   * the handle cap closes its file and the next read reopens the copy by name.) A crash
   * before the directory sync may bring the old file back whole: the next open reads it.
   */
  private async swapIn(old: Segment, compacted: CompactedSegment): Promise<void> {
    const { table, header } = compacted;
    const segment = new Segment(this.directory, header.base, header.generation, null, table.coveredSize, locatorOf(table), this.pool);
    segment.noteTable(table);
    this.segments = this.segments.map((s) => (s === old ? segment : s));
    for (const [streamName, revision] of compacted.reclaimedThrough) this.index.reclaimThrough(streamName, revision);
    this.recent.forgetRange(old.base, old.base + old.size);
    this.reader.forgetSegment(old);
    await old.retire();
    await this.options.compactionHook('renamed', segment.file);
    await this.options.io.syncDirectory(this.directory);
    await this.options.compactionHook('directory-synced', segment.file);
    // Through the store's one checkpoint queue: after the sealed segment's own, if still queued.
    await this.checkpoints.compacted(segment, table);
    await this.options.compactionHook('index-written', segment.file);
  }
}
