/**
 * Catch-up subscriptions over the log. One loop serves both replay and live: it reads
 * whatever is durable, segment after segment, and when it has reached the durable end it
 * waits for the next commit. There is no hand-over from a history reader to a live feed,
 * so nothing can be lost or doubled at the switch. Progress is a global position, not a
 * file offset, so a segment replaced by its compacted copy mid-replay is simply found
 * again from that position.
 */
import type { RecordedEvent, SubscribeOptions, Subscription, SubscriptionItem } from '../port';
import { CorruptEventLogError } from './errors';
import type { RawRecord } from './record-format';
import { RecordCursor, type ReadAt } from './record-cursor';
import { segmentIndexAt, type Segment } from './segment';

const REPLAY_CHUNK_SIZE = 1024 * 1024;

export interface TailSource {
  segments(): readonly Segment[];
  readerOf(segment: Segment): ReadAt;
  /**
   * The record at a file offset of a segment when it was just committed and is decoded
   * already (or now, once for every subscription), without a read or an await; undefined
   * otherwise, and the record is read through `readerOf`.
   */
  recentRecord(segment: Segment, fileOffset: number): RawRecord | undefined;
  /** Throws the store's write failure, if any. */
  checkHealthy(): void;
  isClosing(): boolean;
  waitForChange(): Promise<void>;
  toRecordedEvent(record: RawRecord): RecordedEvent;
}

function isSystemStream(streamName: string): boolean {
  return streamName.startsWith('$');
}

/** The first segment holding a record above `after`, or undefined when there is none yet. */
function segmentAfter(segments: readonly Segment[], after: number): Segment | undefined {
  for (let i = segmentIndexAt(segments, after); i < segments.length; i++) {
    const segment = segments[i];
    if (segment !== undefined && segment.lastPosition !== null && segment.lastPosition > after) return segment;
  }
  return undefined;
}

type Step = { readonly kind: 'event'; readonly record: RawRecord } | { readonly kind: 'moved' } | { readonly kind: 'end' };

export async function* tail(source: TailSource, options: SubscribeOptions, isClosed: () => boolean): AsyncGenerator<SubscriptionItem> {
  const prefixes = options.streamPrefixes;
  const wanted = (streamName: string): boolean =>
    !isSystemStream(streamName) && (prefixes === undefined || prefixes.some((prefix) => streamName.startsWith(prefix)));
  let after = options.fromPosition === undefined ? -1 : Number(options.fromPosition.commit);
  let caughtUp = false;
  for (;;) {
    if (isClosed() || source.isClosing()) return;
    source.checkHealthy();
    const segment = segmentAfter(source.segments(), after);
    if (segment === undefined) {
      if (!caughtUp) {
        caughtUp = true;
        yield { kind: 'caught-up' };
      } else {
        // Checked and registered in one synchronous step: a commit cannot slip in between.
        await source.waitForChange();
      }
      continue;
    }
    // What was just committed is taken decoded from memory, in this loop: no read, and no
    // generator in between (each would cost every item turns of the microtask queue).
    // The record after the last one handed out starts where that one ends, when it is known
    // here; else the scan starts at the segment's last sample at or before it (up to 255
    // records back, each decoded only to be passed over).
    const last = after >= segment.base ? source.recentRecord(segment, after - segment.base) : undefined;
    let next = last !== undefined && last.position === after ? last.fileOffset + last.size : segment.scanStart(after);
    let recent = source.recentRecord(segment, next);
    while (recent !== undefined && recent.fileOffset + recent.size <= segment.size && !segment.retired) {
      if (isClosed() || source.isClosing()) return;
      next = recent.fileOffset + recent.size;
      if (recent.position > after) {
        after = recent.position;
        if (wanted(recent.streamName)) yield { kind: 'event', event: source.toRecordedEvent(recent) };
      }
      recent = source.recentRecord(segment, next);
    }
    // Read through to the end already: nothing to scan for (the next commit wakes this loop).
    if (next >= segment.size && !segment.retired) continue;
    for await (const step of segmentRecords(source, segment, after, next, isClosed)) {
      if (step.kind !== 'event') break;
      after = step.record.position;
      if (wanted(step.record.streamName)) yield { kind: 'event', event: source.toRecordedEvent(step.record) };
    }
  }
}

/** Records above `after` in one segment, from the record at file offset `from` (at or before the first of them) up to its durable end when the scan started. */
async function* segmentRecords(source: TailSource, segment: Segment, after: number, from: number, isClosed: () => boolean): AsyncGenerator<Step> {
  const limit = segment.size;
  const cursor = new RecordCursor(source.readerOf(segment), segment.base, limit, REPLAY_CHUNK_SIZE);
  let next = from;
  while (next < limit) {
    if (isClosed() || source.isClosing()) return;
    if (segment.retired) {
      yield { kind: 'moved' };
      return;
    }
    let result;
    try {
      result = await cursor.decodeAt(next);
    } catch (error) {
      if (segment.retired) {
        yield { kind: 'moved' };
        return;
      }
      throw error;
    }
    if (result.kind !== 'ok') throw new CorruptEventLogError(segment.file, next, `record unreadable (${result.kind === 'invalid' ? result.reason : 'truncated'})`);
    next = result.record.fileOffset + result.record.size;
    if (result.record.position > after) yield { kind: 'event', record: result.record };
  }
  yield { kind: 'end' };
}

export class LogSubscription implements Subscription {
  private closedByCaller = false;
  private iterator: AsyncGenerator<SubscriptionItem> | null = null;

  constructor(
    private readonly items: (isClosed: () => boolean) => AsyncGenerator<SubscriptionItem>,
    private readonly wake: () => void,
  ) {}

  /** Always the same iterator: a second `for await` continues where the first stopped. */
  [Symbol.asyncIterator](): AsyncIterator<SubscriptionItem> {
    this.iterator ??= this.items(() => this.closedByCaller);
    return this.iterator;
  }

  async close(): Promise<void> {
    this.closedByCaller = true;
    this.wake();
  }
}
