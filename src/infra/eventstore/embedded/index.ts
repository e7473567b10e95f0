/**
 * The embedded event store: a durable append-only log in a data directory, in segments.
 *
 * Files (DATA_DIR):
 *   events.log, events-<base>.log   segments, in order of base (the global position of
 *                                   their first byte); events.log is the first, and the
 *                                   whole log of versions before segments
 *   <segment>.idx                   index checkpoint of a segment (a cache; the active
 *                                   segment's is written every `checkpointBytes` of
 *                                   growth and at close)
 *   <segment>.compact               a compaction in progress (removed at open)
 *   close.rec                       the close file (close-file.ts): a fixed-size file,
 *                                   overwritten in place by a stop that cannot append
 *                                   its close record (a full disk)
 *   events.lock                     held by the process that has the store open
 *
 * Guarantees: an append is acknowledged only once it is on disk (fsync; concurrent appends
 * share one: group commit). At open a torn tail of the active segment (an append that was
 * never acknowledged) is dropped, multi-event appends whole; other damage is refused with
 * CorruptEventLogError where open reads (the active segment, segments without a usable
 * checkpoint), and by the read that meets it elsewhere (a record whose checksum fails is
 * never handed out). A position is `base + offset` of where its record was first
 * written and never changes, also when compaction moves the record: positions grow, with
 * gaps. Formats: record-format.ts (records, headers), value-codec.ts (payloads).
 *
 * A clean close ends the active segment with a close record (record-format.ts): damage in
 * what it vouches for is refused at open, never cut as a torn tail. When it cannot be
 * appended (a full disk), the same vouching goes into the close file, in place. Open probes with a
 * small write whether the disk takes writes; if not, the store opens read-only
 * (write-availability.ts).
 *
 * Open reads each sealed segment's index checkpoint instead of the segment, and of the
 * active segment (at most `segmentBytes`, 8 MiB) only what its latest checkpoint (at most
 * `checkpointBytes` behind, also after a crash) does not cover, so its cost does not grow with the history: 5
 * million events open in about 0.4 s (`npm run bench:embedded-open`). A log of earlier
 * versions (one events.log of any length) is scanned once, then sealed at the first
 * append. Sealed segments open their file only when read, at most 64 at a time.
 *
 * Retention (reclamation.ts, compaction.ts): events of `heartbeat-<uuid>` streams written
 * before now − the stream's $maxAge (set at device registration from
 * HEARTBEAT_RETENTION_SECONDS) are removed from sealed segments — never a stream's newest
 * event, never another stream's. It runs right after open, then every `reclaimIntervalMs`
 * (hourly) on an unref'd timer that close() stops, and on demand:
 *
 *   store.reclaimExpired(): Promise<{ segmentsCompacted, eventsReclaimed, bytesBefore, bytesAfter }>
 *
 * Writing a long history quickly (benchmarks): `store.appendHistory([{ streamName, events,
 * writtenAt }, ...])` reserves all the appends at once (expectation 'any') with the given
 * written-at times (epoch ms; clamped never to go back) and resolves when they are all on
 * disk, sharing fsyncs. Batches of some thousands of appends per call work well. To make
 * reclamation see that history as old, open the store with a `now` clock of your choice.
 */
import * as path from 'node:path';
import { readCloseFile } from './close-file';
import { acquireLock } from './lock';
import { resolveOptions, type EmbeddedEventStoreOptions } from './options';
import { EmbeddedEventStore } from './reclamation';
import { openLog, type TornTail } from './recovery';
import { HandlePool, LEGACY_LOG_FILE_NAME } from './segment';

export { CorruptEventLogError, EventStoreLockedError, EventStoreUnavailableError, LOCK_FILE_NAME } from './errors';
export { crc32Portable } from './crc32';
export type { CompactionHook, CompactionStep, RecordRewrite } from './compaction';
export type { EmbeddedEventStoreOptions, GroupCommit } from './options';
export type { ReclaimResult, RewriteResult } from './reclamation';
export type { TornTail } from './recovery';
export type { HistoricalAppend } from './store';
export type { EmbeddedEventStore };

/** The first segment; in logs of earlier versions, the whole log. */
export const EVENT_LOG_FILE_NAME = LEGACY_LOG_FILE_NAME;

function warnTornTail(directory: string): (tail: TornTail) => void {
  return (tail) =>
    console.warn(
      `Event log in ${directory}: dropped a torn tail of ${tail.droppedBytes} bytes at byte ${tail.offset} of the active segment ` +
        `(an append that was never acknowledged)`,
    );
}

export async function openEmbeddedEventStore(dataDir: string, options: EmbeddedEventStoreOptions = {}): Promise<EmbeddedEventStore> {
  const directory = path.resolve(dataDir);
  const resolved = resolveOptions(options);
  await resolved.io.mkdir(directory);
  let opened: EmbeddedEventStore | null = null;
  const releaseLock = await (options.lock ?? acquireLock)(directory, (error) => {
    resolved.log(error.message);
    opened?.stopWritingAfterLockLost(error);
  });
  try {
    const pool = new HandlePool(resolved.io);
    const closeFile = await readCloseFile(resolved.io, directory);
    const log = await openLog(directory, { onTornTail: options.onTornTail ?? warnTornTail(directory), log: resolved.log, pool, segmentBytes: resolved.segmentBytes, io: resolved.io, closeFile });
    opened = new EmbeddedEventStore(directory, log.segments, log.index, log.activeTable, resolved, pool, releaseLock);
    await opened.checkWritableAtOpen(log.readOnly, log.closeFile);
    return opened;
  } catch (error) {
    await releaseLock();
    throw error;
  }
}
