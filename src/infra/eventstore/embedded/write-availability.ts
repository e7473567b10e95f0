/**
 * Whether the log takes appends, and getting back to it by itself.
 *
 * Appends are refused with EventStoreUnavailableError (503, reads go on) after a write or
 * its fsync failed (ENOSPC, EIO), and from the start when the log opened on a disk it
 * cannot write: a repair at open failed, or the write probe at open did (a start on a full
 * disk says so at once, in the log and in readiness, instead of at its first append). Each
 * later append, compaction and readiness check tries whether writes work again: the active
 * segment is cut back to its last committed size (a page cache keeps a batch whose fsync
 * failed: a restart must not take it as durable), a segment whose creation was interrupted
 * is finished, and a probe of WRITE_PROBE_BYTES past the end (then cut) must succeed.
 * Before the first of these writes, a close file record open did not use is cleared
 * (close-file.ts): it must never come to vouch for bytes written later.
 *
 * Losing the data directory's lock to another process stops writes for good.
 */
import * as path from 'node:path';
import { crc32 } from './crc32';
import { EventStoreUnavailableError } from './errors';
import { errorMessage, writeFully } from './files';
import type { StoreIo } from './io';
import { encodeSegmentHeader, SEGMENT_HEADER_SIZE } from './record-format';
import { segmentFileName, type Segment } from './segment';
import type { SegmentTable } from './segment-table';

/** Bytes written past the end (then cut) to tell whether writes work. */
export const WRITE_PROBE_BYTES = 4096;

/** What the availability needs of the store. */
export interface WritableLog {
  readonly directory: string;
  readonly io: StoreIo;
  readonly log: (message: string) => void;
  readonly active: () => { readonly segment: Segment; readonly table: SegmentTable };
  readonly isClosing: () => boolean;
  /** Resolves once no group commit is being written. */
  readonly idle: () => Promise<void>;
  /** Before the first write to the log after open (probes included): clears a close file record open did not use (close-file.ts). */
  readonly beforeWrites: () => Promise<void>;
  /** Writes work again: appends are reserved from the end of the active segment. */
  readonly resumed: (active: Segment) => void;
}

/** Writes `WRITE_PROBE_BYTES` past the end of the active segment and cuts them again; throws while writes fail. */
async function probe(active: Segment): Promise<void> {
  try {
    await writeFully(active.handle, Buffer.alloc(WRITE_PROBE_BYTES), active.size);
  } finally {
    await active.handle.truncate(active.size);
  }
}

export class WriteAvailability {
  /** Set while appends are refused (a write failed, or the log opened read-only); cleared by resume(). */
  failure: EventStoreUnavailableError | null = null;
  /** Another process holds the data directory now: writes stop for good (never resumed). */
  lockLost: Error | null = null;
  private resuming: Promise<void> | null = null;
  /** Cutting what a failed batch left in the file; resuming waits for it. */
  private tailCut: Promise<void> = Promise.resolve();

  constructor(private readonly log: WritableLog) {}

  assertWritable(): void {
    if (this.lockLost !== null) throw this.lockLost;
    if (this.failure !== null) throw this.failure;
    if (this.log.isClosing()) throw new Error('The event store is closed');
  }

  /** Resolves once appends may be tried: at once while writes work, else after a successful resume. */
  async untilWritable(): Promise<void> {
    if (this.failure !== null) await this.resume();
  }

  /** A write failed: refuses appends from now on and cuts what the failed batch may have left (best effort: resuming does it again). */
  failed(error: unknown): EventStoreUnavailableError {
    this.failure = new EventStoreUnavailableError({ cause: error });
    this.log.log(`Event log: a write failed (${errorMessage(error)}); appends are refused until one can be written again, reads go on`);
    const active = this.log.active().segment;
    this.tailCut = this.tailCut.then(() => this.cutBack(active)).catch(() => undefined);
    return this.failure;
  }

  /** Opened without being able to repair the tail or write at all (a full disk, say): appends wait for resume(). */
  openedReadOnly(cause: Error): void {
    this.failure = new EventStoreUnavailableError({ cause });
    this.log.log(`Event log: opened read-only (${errorMessage(cause)}); reads are served, appends are refused until a write succeeds`);
  }

  /** At open: a disk that cannot take a write (ENOSPC, EIO) opens the log read-only now rather than at the first append. */
  async probeAtOpen(): Promise<void> {
    if (this.failure !== null) return;
    const active = this.log.active().segment;
    try {
      await this.log.beforeWrites();
      await probe(active);
    } catch (error) {
      this.openedReadOnly(error instanceof Error ? error : new Error(String(error)));
    }
  }

  stopAfterLockLost(error: Error): void {
    this.lockLost ??= error;
  }

  /** Waits for a tail cut or resume under way (close). */
  async settled(): Promise<void> {
    await this.tailCut;
    await this.resuming?.catch(() => undefined);
  }

  /**
   * Removes what a failed write may have left: the file of a segment whose creation failed
   * (it holds nothing acknowledged; a restart must not take the active segment for a
   * sealed one because of it) and bytes past the committed size of the active segment.
   */
  async cutBack(active: Segment): Promise<void> {
    if (active.size >= SEGMENT_HEADER_SIZE) {
      await this.log.io.unlink(path.join(this.log.directory, segmentFileName(active.base + active.size)));
      await this.log.io.syncDirectory(this.log.directory);
    }
    await active.handle.truncate(active.size);
    await active.handle.datasync();
  }

  /**
   * Tries to make the log writable again after a failure: cuts the active segment back to
   * its last committed size (dropping whatever a failed batch left), finishes a segment
   * whose creation was interrupted, and removes the file of a segment whose creation
   * failed. Throws EventStoreUnavailableError while that does not work.
   */
  resume(): Promise<void> {
    this.resuming ??= this.tryResume().finally(() => {
      this.resuming = null;
    });
    return this.resuming;
  }

  private async tryResume(): Promise<void> {
    await this.log.idle();
    await this.tailCut;
    if (this.lockLost !== null) throw this.lockLost;
    if (this.failure === null) return;
    if (this.log.isClosing()) throw new Error('The event store is closed');
    const { segment: active, table } = this.log.active();
    try {
      await this.log.beforeWrites();
      if (active.size < SEGMENT_HEADER_SIZE) {
        const header = encodeSegmentHeader({ base: active.base, generation: 0 });
        await active.handle.truncate(0);
        await writeFully(active.handle, header, 0);
        active.size = SEGMENT_HEADER_SIZE;
        table.coveredSize = SEGMENT_HEADER_SIZE;
        table.coveredCrc = crc32(header);
      }
      // A write that needs new space tells whether the cause is gone (a full disk answers
      // ENOSPC here); the file is cut back to its committed size whatever it answers.
      await probe(active);
      await this.cutBack(active);
    } catch (error) {
      this.failure = new EventStoreUnavailableError({ cause: error });
      throw this.failure;
    }
    this.log.resumed(active);
    this.failure = null;
    this.log.log('Event log: writes work again; appends resume');
  }
}
