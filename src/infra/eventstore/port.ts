import type { EventMetadata } from '../../domain/messages';

/**
 * Position of an event in the global ordered log ($all). Positions increase but are
 * not contiguous: never assume +1 between two events.
 */
export interface GlobalPosition {
  readonly commit: bigint;
  readonly prepare: bigint;
}

export type ExpectedRevision = 'no_stream' | 'stream_exists' | 'any' | bigint;

export interface NewEvent {
  /** UUID; an append retried with the same ids (and a non-'any' expectation) is written once. */
  readonly id: string;
  readonly type: string;
  readonly data: unknown;
  readonly metadata: EventMetadata;
}

export interface RecordedEvent {
  readonly id: string;
  readonly streamName: string;
  /** 0-based revision within its stream. */
  readonly revision: bigint;
  readonly position: GlobalPosition;
  readonly type: string;
  readonly data: unknown;
  readonly metadata: EventMetadata;
}

export interface AppendResult {
  readonly nextExpectedRevision: bigint;
  /** Position of the last appended event. */
  readonly position: GlobalPosition;
}

export interface ReadStreamOptions {
  readonly fromRevision?: bigint;
  readonly direction?: 'forwards' | 'backwards';
  readonly maxCount?: number;
  /**
   * The data as stored, its personal fields still sealed (src/privacy/event-store.ts): for a
   * reader of event types and metadata only, which must not depend on anyone's data key.
   */
  readonly sealed?: boolean;
}

export interface SubscribeOptions {
  /** Start strictly after this position; from the very start when absent. */
  readonly fromPosition?: GlobalPosition;
  /** Only events whose stream name starts with one of these prefixes. */
  readonly streamPrefixes?: readonly string[];
}

/** A catch-up subscription item: an event, or the signal that history has been replayed. */
export type SubscriptionItem =
  | { readonly kind: 'event'; readonly event: RecordedEvent }
  | { readonly kind: 'caught-up' };

export interface Subscription extends AsyncIterable<SubscriptionItem> {
  close(): Promise<void>;
}

export class WrongExpectedRevisionError extends Error {
  constructor(
    readonly streamName: string,
    readonly expected: ExpectedRevision,
    readonly actual: bigint | 'no_stream',
  ) {
    super(`Wrong expected revision on ${streamName}: expected ${String(expected)}, actual ${String(actual)}`);
    this.name = 'WrongExpectedRevisionError';
  }
}

/**
 * The event store port. Adapters: the embedded durable log and EventStoreDB.
 * System events ($-prefixed streams) are never handed out by `subscribe` or `readAll`.
 */
export interface EventStore {
  /** Acknowledged only when durable. Throws WrongExpectedRevisionError on conflict. */
  append(streamName: string, events: readonly NewEvent[], expected: ExpectedRevision): Promise<AppendResult>;
  /** Events of one stream; an empty iteration when the stream does not exist. */
  readStream(streamName: string, options?: ReadStreamOptions): AsyncIterable<RecordedEvent>;
  /**
   * Optional, for a store that knows it without I/O (the embedded log's index): the revision
   * after the stream's last durable event, 0 when it has none. A fold then goes to a long
   * stream's snapshot without reading its first events (`foldStream`, src/commands/handler.ts).
   */
  readonly streamEnd?: (streamName: string) => number;
  /** Catch-up subscription over all user events: replays, yields 'caught-up', then goes live. */
  subscribe(options?: SubscribeOptions): Subscription;
  /** Keep only events younger than maxAgeSeconds in this stream (EventStoreDB $maxAge). */
  setStreamMaxAge(streamName: string, maxAgeSeconds: number): Promise<void>;
  /** The position of the newest event in the store, or null when empty. */
  headPosition(): Promise<GlobalPosition | null>;
  close(): Promise<void>;
}

export function comparePositions(a: GlobalPosition, b: GlobalPosition): number {
  if (a.commit !== b.commit) return a.commit < b.commit ? -1 : 1;
  if (a.prepare !== b.prepare) return a.prepare < b.prepare ? -1 : 1;
  return 0;
}

export function formatPosition(p: GlobalPosition): string {
  return `${p.commit}/${p.prepare}`;
}

export function parsePosition(s: string): GlobalPosition {
  const [commit, prepare] = s.split('/');
  if (commit === undefined || prepare === undefined) throw new Error(`Bad position: ${s}`);
  return { commit: BigInt(commit), prepare: BigInt(prepare) };
}
