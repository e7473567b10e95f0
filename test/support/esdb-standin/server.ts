/**
 * A wire-level EventStoreDB stand-in for tests: a gRPC server speaking the Streams and
 * ServerFeatures services with the very protobuf classes and service definitions that ship
 * inside `@eventstore/db-client`, so the real client talks to it unchanged.
 *
 * Run it as its own process (the generated protobuf modules register themselves globally,
 * and two copies in one process overwrite each other):
 *
 *   node --import tsx test/support/esdb-standin/server.ts [--port=0] [--stats-interval-ms=2000]
 *     [--no-caught-up] [--exit-with-stdin]
 *
 * `--no-caught-up` behaves like servers before 23.10, which never send CaughtUp.
 *
 * Once listening it prints `ESDB_STANDIN_PORT=<port>` on stdout; SIGTERM/SIGINT stop it.
 * Connect with `esdb://127.0.0.1:<port>?tls=false`.
 *
 * Reproduced from the real server (what the adapter has to cope with):
 * - `$all` positions are byte-offset-like: increasing, never contiguous; an event's position
 *   is {commit: p, prepare: p}; an append answers {commit: last event, prepare: first event};
 * - `$all` holds `$`-prefixed system events: a few at start, `$statsCollected` events every
 *   few seconds, and the `$metadata` events of `$$<stream>` metastreams;
 * - expected revisions (`any`, `no_stream`, `stream_exists`, a revision); a retried append
 *   whose event ids are already at the expected place is acknowledged without writing again
 *   (no position in the answer, as the real server); conflicts answer WrongExpectedVersion;
 * - reading a missing stream answers StreamNotFound; `$maxAge`, `$maxCount` and `$tb`
 *   stream metadata hide events from stream reads (not from `$all`, as before a scavenge);
 * - catch-up subscriptions to a stream or to `$all` (stream-name/event-type filters by prefix
 *   or regex, checkpoints every `window × multiplier` scanned events): confirmation, replay
 *   strictly after the given position, checkpoint + CaughtUp, then live events;
 * - appends over 1 MiB answer MaximumAppendSizeExceeded;
 * - ServerFeatures answers UNIMPLEMENTED, so the client appends with Streams.Append.
 * Not reproduced: BatchAppend, Delete/Tombstone, persistent subscriptions, projections,
 * users/ACLs, link resolution, FellBehind, durability (everything is in memory).
 */
import { randomUUID } from 'node:crypto';
import * as grpc from '@grpc/grpc-js';
import { StreamsService, type IStreamsServer } from '@eventstore/db-client/generated/streams_grpc_pb';
import {
  ServerFeaturesService,
  type IServerFeaturesServer,
} from '@eventstore/db-client/generated/serverfeatures_grpc_pb';
import { AppendReq, AppendResp, ReadReq, ReadResp } from '@eventstore/db-client/generated/streams_pb';
import { Empty, StreamIdentifier, UUID } from '@eventstore/db-client/generated/shared_pb';

// ---------------------------------------------------------------------------------------
// The in-memory log

interface StoredEvent {
  readonly id: string;
  readonly stream: string;
  readonly streamBytes: Uint8Array;
  readonly revision: number;
  readonly type: string;
  readonly contentType: string;
  readonly data: Uint8Array;
  readonly metadata: Uint8Array;
  readonly createdMs: number;
  /** Log position: commit and prepare positions are both this value. */
  readonly position: bigint;
}

interface StreamMetadata {
  readonly maxAgeSeconds?: number;
  readonly maxCount?: number;
  readonly truncateBefore?: number;
}

interface StreamState {
  readonly events: StoredEvent[];
  metadata: StreamMetadata;
}

type Expected =
  | { readonly kind: 'any' }
  | { readonly kind: 'no_stream' }
  | { readonly kind: 'stream_exists' }
  | { readonly kind: 'revision'; readonly revision: number };

interface ProposedEvent {
  readonly id: string;
  readonly type: string;
  readonly contentType: string;
  readonly data: Uint8Array;
  readonly metadata: Uint8Array;
}

type AppendOutcome =
  | { readonly kind: 'written'; readonly currentRevision: number; readonly commit: bigint; readonly prepare: bigint }
  | { readonly kind: 'idempotent'; readonly currentRevision: number }
  | { readonly kind: 'wrong-expected-version'; readonly currentRevision: number };

const NO_STREAM = -1;
/** First log position handed out: the real log starts with epoch records. */
const FIRST_POSITION = 4096n;
/** Bytes of a prepare record besides its strings and payloads. */
const RECORD_OVERHEAD = 85;

class EventLog {
  readonly all: StoredEvent[] = [];
  private readonly streams = new Map<string, StreamState>();
  private readonly byId = new Map<string, StoredEvent>();
  private nextPosition = FIRST_POSITION;
  private readonly appendListeners = new Set<() => void>();

  stream(name: string): StreamState | undefined {
    return this.streams.get(name);
  }

  currentRevision(name: string): number {
    const state = this.streams.get(name);
    return state === undefined || state.events.length === 0 ? NO_STREAM : state.events.length - 1;
  }

  append(streamName: string, expected: Expected, proposed: readonly ProposedEvent[]): AppendOutcome {
    const current = this.currentRevision(streamName);
    const idempotentAt = (first: number): boolean => {
      if (proposed.length === 0) return false;
      const events = this.streams.get(streamName)?.events ?? [];
      return proposed.every((p, i) => events[first + i]?.id === p.id);
    };
    const bestEffortIdempotent = (): AppendOutcome | null => {
      // Like the real server's recent-event-id check for `any` / `stream_exists`.
      const first = proposed[0] === undefined ? undefined : this.byId.get(proposed[0].id);
      if (first === undefined || first.stream !== streamName || !idempotentAt(first.revision)) return null;
      return { kind: 'idempotent', currentRevision: first.revision + proposed.length - 1 };
    };

    switch (expected.kind) {
      case 'any': {
        const again = bestEffortIdempotent();
        if (again !== null) return again;
        break;
      }
      case 'stream_exists': {
        if (current === NO_STREAM) return { kind: 'wrong-expected-version', currentRevision: current };
        const again = bestEffortIdempotent();
        if (again !== null) return again;
        break;
      }
      case 'no_stream':
      case 'revision': {
        const expectedRevision = expected.kind === 'no_stream' ? NO_STREAM : expected.revision;
        if (current !== expectedRevision) {
          if (expectedRevision < current && idempotentAt(expectedRevision + 1)) {
            return { kind: 'idempotent', currentRevision: expectedRevision + proposed.length };
          }
          return { kind: 'wrong-expected-version', currentRevision: current };
        }
        break;
      }
    }

    if (proposed.length === 0) return { kind: 'idempotent', currentRevision: current };
    return this.write(streamName, proposed);
  }

  private write(streamName: string, proposed: readonly ProposedEvent[]): AppendOutcome {
    let state = this.streams.get(streamName);
    if (state === undefined) {
      state = { events: [], metadata: {} };
      this.streams.set(streamName, state);
    }
    const streamBytes = Buffer.from(streamName, 'utf8');
    const createdMs = Date.now();
    let first: bigint | undefined;
    let last = 0n;
    for (const p of proposed) {
      const event: StoredEvent = {
        id: p.id,
        stream: streamName,
        streamBytes,
        revision: state.events.length,
        type: p.type,
        contentType: p.contentType,
        data: p.data,
        metadata: p.metadata,
        createdMs,
        position: this.nextPosition,
      };
      this.nextPosition +=
        BigInt(RECORD_OVERHEAD + streamBytes.length + Buffer.byteLength(p.type) + p.data.length + p.metadata.length);
      first ??= event.position;
      last = event.position;
      state.events.push(event);
      this.all.push(event);
      this.byId.set(event.id, event);
    }

    if (streamName.startsWith('$$')) {
      const target = streamName.slice(2);
      const newest = state.events[state.events.length - 1];
      if (newest !== undefined) this.applyMetadata(target, newest);
    }

    for (const listener of [...this.appendListeners]) listener();
    return { kind: 'written', currentRevision: state.events.length - 1, commit: last, prepare: first ?? last };
  }

  private applyMetadata(target: string, event: StoredEvent): void {
    let parsed: unknown;
    try {
      parsed = JSON.parse(Buffer.from(event.data).toString('utf8'));
    } catch {
      return;
    }
    if (typeof parsed !== 'object' || parsed === null) return;
    const fields = parsed as Record<string, unknown>;
    const int = (value: unknown): number | undefined =>
      typeof value === 'number' && Number.isInteger(value) && value >= 0 ? value : undefined;
    let state = this.streams.get(target);
    if (state === undefined) {
      state = { events: [], metadata: {} };
      this.streams.set(target, state);
    }
    const maxAgeSeconds = int(fields.$maxAge);
    const maxCount = int(fields.$maxCount);
    const truncateBefore = int(fields.$tb);
    state.metadata = {
      ...(maxAgeSeconds !== undefined ? { maxAgeSeconds } : {}),
      ...(maxCount !== undefined ? { maxCount } : {}),
      ...(truncateBefore !== undefined ? { truncateBefore } : {}),
    };
  }

  /** First revision a stream read may return, given the stream's metadata and the clock. */
  firstVisibleRevision(state: StreamState, nowMs: number): number {
    const { events, metadata } = state;
    let first = 0;
    if (metadata.truncateBefore !== undefined) first = Math.max(first, metadata.truncateBefore);
    if (metadata.maxCount !== undefined) first = Math.max(first, events.length - metadata.maxCount);
    if (metadata.maxAgeSeconds !== undefined) {
      const oldestAllowed = nowMs - metadata.maxAgeSeconds * 1000;
      // Events are appended in time order: binary search the first young enough.
      let lo = first;
      let hi = events.length;
      while (lo < hi) {
        const mid = (lo + hi) >>> 1;
        const event = events[mid];
        if (event !== undefined && event.createdMs < oldestAllowed) lo = mid + 1;
        else hi = mid;
      }
      first = lo;
    }
    return first;
  }

  /** Index in `all` of the first event whose position is >= (or > when strict) `position`. */
  indexFrom(position: bigint, strict: boolean): number {
    let lo = 0;
    let hi = this.all.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const event = this.all[mid];
      if (event !== undefined && (strict ? event.position <= position : event.position < position)) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  onAppend(listener: () => void): () => void {
    this.appendListeners.add(listener);
    return () => this.appendListeners.delete(listener);
  }
}

// ---------------------------------------------------------------------------------------
// Protobuf helpers

function uuidToString(uuid: UUID | undefined): string {
  if (uuid === undefined) return randomUUID();
  if (uuid.hasStructured()) {
    const structured = uuid.getStructured();
    const msb = BigInt.asUintN(64, BigInt(structured?.getMostSignificantBits() ?? '0'));
    const lsb = BigInt.asUintN(64, BigInt(structured?.getLeastSignificantBits() ?? '0'));
    const hex = msb.toString(16).padStart(16, '0') + lsb.toString(16).padStart(16, '0');
    return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  }
  return uuid.getString();
}

function uuidMessage(id: string, structured: boolean): UUID {
  const uuid = new UUID();
  if (!structured) {
    uuid.setString(id);
    return uuid;
  }
  const hex = id.replace(/-/g, '');
  const value = new UUID.Structured();
  value.setMostSignificantBits(BigInt.asIntN(64, BigInt(`0x${hex.slice(0, 16)}`)).toString());
  value.setLeastSignificantBits(BigInt.asIntN(64, BigInt(`0x${hex.slice(16)}`)).toString());
  uuid.setStructured(value);
  return uuid;
}

function streamIdentifier(bytes: Uint8Array): StreamIdentifier {
  const identifier = new StreamIdentifier();
  identifier.setStreamName(bytes);
  return identifier;
}

function streamNameOf(identifier: StreamIdentifier | undefined): string {
  return identifier === undefined ? '' : Buffer.from(identifier.getStreamName_asU8()).toString('utf8');
}

/** `.NET` ticks (100 ns) since the Unix epoch, as the real server puts in `created`. */
function ticks(ms: number): string {
  return (BigInt(ms) * 10000n).toString();
}

function eventResponse(event: StoredEvent, structuredIds: boolean, withPosition: boolean): ReadResp {
  const recorded = new ReadResp.ReadEvent.RecordedEvent();
  recorded.setId(uuidMessage(event.id, structuredIds));
  recorded.setStreamIdentifier(streamIdentifier(event.streamBytes));
  recorded.setStreamRevision(String(event.revision));
  // Servers since 22.x fill in the $all position on stream reads too (earlier ones sent u64 max).
  recorded.setCommitPosition(event.position.toString());
  recorded.setPreparePosition(event.position.toString());
  const metadata = recorded.getMetadataMap();
  metadata.set('type', event.type);
  metadata.set('content-type', event.contentType);
  metadata.set('created', ticks(event.createdMs));
  recorded.setData(event.data);
  recorded.setCustomMetadata(event.metadata);

  const readEvent = new ReadResp.ReadEvent();
  readEvent.setEvent(recorded);
  if (withPosition) readEvent.setCommitPosition(event.position.toString());
  else readEvent.setNoPosition(new Empty());
  const response = new ReadResp();
  response.setEvent(readEvent);
  return response;
}

function checkpointResponse(position: bigint): ReadResp {
  const checkpoint = new ReadResp.Checkpoint();
  checkpoint.setCommitPosition(position.toString());
  checkpoint.setPreparePosition(position.toString());
  const response = new ReadResp();
  response.setCheckpoint(checkpoint);
  return response;
}

function caughtUpResponse(): ReadResp {
  const response = new ReadResp();
  response.setCaughtUp(new ReadResp.CaughtUp());
  return response;
}

function confirmationResponse(): ReadResp {
  const confirmation = new ReadResp.SubscriptionConfirmation();
  confirmation.setSubscriptionId(randomUUID());
  const response = new ReadResp();
  response.setConfirmation(confirmation);
  return response;
}

function streamNotFoundResponse(bytes: Uint8Array): ReadResp {
  const notFound = new ReadResp.StreamNotFound();
  notFound.setStreamIdentifier(streamIdentifier(bytes));
  const response = new ReadResp();
  response.setStreamNotFound(notFound);
  return response;
}

function rpcError(code: grpc.status, details: string, exception?: string): grpc.ServiceError {
  const metadata = new grpc.Metadata();
  if (exception !== undefined) metadata.set('exception', exception);
  return Object.assign(new Error(details), { code, details, metadata });
}

// ---------------------------------------------------------------------------------------
// Filters

type EventPredicate = (event: StoredEvent) => boolean;

interface CompiledFilter {
  readonly matches: EventPredicate;
  /** Scanned events between two checkpoints. */
  readonly checkpointEvery: number;
}

const DEFAULT_SEARCH_WINDOW = 32;

function compileFilter(options: ReadReq.Options): CompiledFilter | null {
  if (!options.hasFilter()) return null;
  const filter = options.getFilter();
  if (filter === undefined) return null;
  const onStream = filter.hasStreamIdentifier();
  const expression = onStream ? filter.getStreamIdentifier() : filter.getEventType();
  const prefixes = expression?.getPrefixList() ?? [];
  const regexSource = expression?.getRegex() ?? '';
  const regex = prefixes.length === 0 && regexSource !== '' ? new RegExp(regexSource) : null;
  const test = (value: string): boolean => {
    if (prefixes.length > 0) return prefixes.some((prefix) => value.startsWith(prefix));
    return regex === null ? true : regex.test(value);
  };
  const window = filter.hasMax() ? Math.max(1, filter.getMax()) : DEFAULT_SEARCH_WINDOW;
  const multiplier = Math.max(1, filter.getCheckpointintervalmultiplier());
  return {
    matches: onStream ? (event) => test(event.stream) : (event) => test(event.type),
    checkpointEvery: window * multiplier,
  };
}

// ---------------------------------------------------------------------------------------
// The gRPC services

type ReadCall = grpc.ServerWritableStream<ReadReq, ReadResp>;

/** Writes with back-pressure; resolves false once the call is cancelled. */
class ResponseWriter {
  cancelled = false;
  private readonly cancelWaiters = new Set<() => void>();

  constructor(private readonly call: ReadCall) {
    call.on('cancelled', () => this.cancel());
    call.on('error', () => this.cancel());
    call.on('close', () => this.cancel());
  }

  cancel(): void {
    if (this.cancelled) return;
    this.cancelled = true;
    for (const waiter of [...this.cancelWaiters]) waiter();
    this.cancelWaiters.clear();
  }

  /** Resolves when the caller may write again (at once unless the buffer is full). */
  write(response: ReadResp): Promise<void> | undefined {
    if (this.cancelled) return undefined;
    if (this.call.write(response)) return undefined;
    return new Promise<void>((resolve) => {
      const done = (): void => {
        this.call.off('drain', done);
        this.cancelWaiters.delete(done);
        resolve();
      };
      this.call.once('drain', done);
      this.cancelWaiters.add(done);
    });
  }

  /** Resolves on the next append, or on cancellation. */
  waitFor(register: (wake: () => void) => () => void): Promise<void> {
    if (this.cancelled) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const done = (): void => {
        unregister();
        this.cancelWaiters.delete(done);
        resolve();
      };
      const unregister = register(done);
      this.cancelWaiters.add(done);
    });
  }

  end(): void {
    if (this.cancelled) return;
    this.cancelled = true;
    this.call.end();
  }
}

/** The real server's default `MaxAppendSize` (1 MiB). */
const MAX_APPEND_SIZE = 1024 * 1024;

/** Yield to the event loop now and then while replaying long histories. */
const YIELD_EVERY = 500;
const tick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

class StandinServer {
  private readonly writers = new Set<ResponseWriter>();

  constructor(
    private readonly log: EventLog,
    private readonly sendsCaughtUp: boolean,
  ) {}

  readonly streams: IStreamsServer = {
    read: (call) => {
      this.read(call).catch((error: unknown) => {
        call.emit('error', rpcError(grpc.status.INTERNAL, error instanceof Error ? error.message : String(error)));
      });
    },
    append: (call, callback) => {
      let options: AppendReq.Options | undefined;
      const proposed: ProposedEvent[] = [];
      let size = 0;
      let failure: grpc.ServiceError | null = null;
      call.on('data', (request: AppendReq) => {
        if (failure !== null) return;
        if (request.hasOptions()) {
          options = request.getOptions();
          return;
        }
        const message = request.getProposedMessage();
        if (message === undefined) return;
        const metadata = message.getMetadataMap();
        const type = metadata.get('type');
        const contentType = metadata.get('content-type');
        if (type === undefined || contentType === undefined) {
          failure = rpcError(
            grpc.status.INVALID_ARGUMENT,
            `Required metadata property missing: ${type === undefined ? 'type' : 'content-type'}`,
            'missing-required-metadata-property',
          );
          return;
        }
        const data = message.getData_asU8();
        const customMetadata = message.getCustomMetadata_asU8();
        size += data.length + customMetadata.length + Buffer.byteLength(type);
        if (size > MAX_APPEND_SIZE) {
          failure = rpcError(
            grpc.status.INVALID_ARGUMENT,
            `Maximum Append Size of ${MAX_APPEND_SIZE} Exceeded.`,
            'maximum-append-size-exceeded',
          );
          failure.metadata.set('maximum-append-size', String(MAX_APPEND_SIZE));
          return;
        }
        proposed.push({ id: uuidToString(message.getId()), type, contentType, data, metadata: customMetadata });
      });
      call.on('error', () => undefined);
      call.on('end', () => {
        if (failure !== null) return callback(failure);
        if (options === undefined) return callback(rpcError(grpc.status.INVALID_ARGUMENT, 'Append without options'));
        try {
          callback(null, this.append(options, proposed));
        } catch (error) {
          callback(rpcError(grpc.status.INTERNAL, error instanceof Error ? error.message : String(error)));
        }
      });
    },
    delete: (_call, callback) => callback(rpcError(grpc.status.UNIMPLEMENTED, 'Delete is not implemented by the stand-in')),
    tombstone: (_call, callback) =>
      callback(rpcError(grpc.status.UNIMPLEMENTED, 'Tombstone is not implemented by the stand-in')),
    batchAppend: (call) => {
      call.emit('error', rpcError(grpc.status.UNIMPLEMENTED, 'BatchAppend is not implemented by the stand-in'));
    },
  };

  readonly serverFeatures: IServerFeaturesServer = {
    // As servers before 21.10: the client then falls back from BatchAppend to Append.
    getSupportedMethods: (_call, callback) =>
      callback(rpcError(grpc.status.UNIMPLEMENTED, 'GetSupportedMethods is not implemented')),
  };

  endAllCalls(): void {
    for (const writer of this.writers) writer.end();
    this.writers.clear();
  }

  private append(options: AppendReq.Options, proposed: readonly ProposedEvent[]): AppendResp {
    const streamName = streamNameOf(options.getStreamIdentifier());
    const Case = AppendReq.Options.ExpectedStreamRevisionCase;
    let expected: Expected;
    switch (options.getExpectedStreamRevisionCase()) {
      case Case.REVISION:
        expected = { kind: 'revision', revision: Number(options.getRevision()) };
        break;
      case Case.NO_STREAM:
        expected = { kind: 'no_stream' };
        break;
      case Case.STREAM_EXISTS:
        expected = { kind: 'stream_exists' };
        break;
      default:
        expected = { kind: 'any' };
    }

    const outcome = this.log.append(streamName, expected, proposed);
    const response = new AppendResp();
    if (outcome.kind === 'wrong-expected-version') {
      const wrong = new AppendResp.WrongExpectedVersion();
      if (outcome.currentRevision === NO_STREAM) {
        wrong.setCurrentNoStream(new Empty());
        wrong.setNoStream2060(new Empty());
      } else {
        wrong.setCurrentRevision(String(outcome.currentRevision));
        wrong.setCurrentRevision2060(outcome.currentRevision);
      }
      switch (expected.kind) {
        case 'any':
          wrong.setExpectedAny(new Empty());
          wrong.setAny2060(new Empty());
          break;
        case 'stream_exists':
          wrong.setExpectedStreamExists(new Empty());
          wrong.setStreamExists2060(new Empty());
          break;
        case 'no_stream':
          wrong.setExpectedNoStream(new Empty());
          break;
        case 'revision':
          wrong.setExpectedRevision(String(expected.revision));
          wrong.setExpectedRevision2060(expected.revision);
          break;
      }
      response.setWrongExpectedVersion(wrong);
      return response;
    }

    const success = new AppendResp.Success();
    if (outcome.currentRevision === NO_STREAM) success.setNoStream(new Empty());
    else success.setCurrentRevision(String(outcome.currentRevision));
    if (outcome.kind === 'written') {
      const position = new AppendResp.Position();
      position.setCommitPosition(outcome.commit.toString());
      position.setPreparePosition(outcome.prepare.toString());
      success.setPosition(position);
    } else {
      success.setNoPosition(new Empty());
    }
    response.setSuccess(success);
    return response;
  }

  private async read(call: ReadCall): Promise<void> {
    const options = call.request.getOptions();
    if (options === undefined) {
      call.emit('error', rpcError(grpc.status.INVALID_ARGUMENT, 'Read without options'));
      return;
    }
    const writer = new ResponseWriter(call);
    this.writers.add(writer);
    try {
      const structuredIds = options.getUuidOption()?.hasStructured() ?? false;
      if (options.hasSubscription()) {
        await writer.write(confirmationResponse());
        if (options.hasAll()) await this.subscribeToAll(writer, options, structuredIds);
        else await this.subscribeToStream(writer, options, structuredIds);
        return;
      }
      const count = options.hasCount() ? Number(options.getCount()) : Number.MAX_SAFE_INTEGER;
      const backwards = options.getReadDirection() === ReadReq.Options.ReadDirection.BACKWARDS;
      if (options.hasAll()) await this.readAll(writer, options, backwards, count, structuredIds);
      else await this.readStream(writer, options, backwards, count, structuredIds);
      writer.end();
    } finally {
      this.writers.delete(writer);
    }
  }

  private async readStream(
    writer: ResponseWriter,
    options: ReadReq.Options,
    backwards: boolean,
    count: number,
    structuredIds: boolean,
  ): Promise<void> {
    const streamOptions = options.getStream();
    const bytes = streamOptions?.getStreamIdentifier()?.getStreamName_asU8() ?? new Uint8Array();
    const state = this.log.stream(Buffer.from(bytes).toString('utf8'));
    if (state === undefined || state.events.length === 0) {
      await writer.write(streamNotFoundResponse(bytes));
      return;
    }
    const events = state.events;
    const firstVisible = this.log.firstVisibleRevision(state, Date.now());
    const Case = ReadReq.Options.StreamOptions.RevisionOptionCase;
    const revisionCase = streamOptions?.getRevisionOptionCase() ?? Case.START;
    let written = 0;
    if (backwards) {
      let from = events.length - 1;
      if (revisionCase === Case.REVISION) from = Math.min(from, Number(streamOptions?.getRevision() ?? from));
      if (revisionCase === Case.START) from = 0;
      for (let i = from; i >= firstVisible && written < count && !writer.cancelled; i--, written++) {
        const event = events[i];
        if (event !== undefined) await writer.write(eventResponse(event, structuredIds, false));
        if (written % YIELD_EVERY === YIELD_EVERY - 1) await tick();
      }
    } else {
      let from = 0;
      if (revisionCase === Case.REVISION) from = Number(streamOptions?.getRevision() ?? 0);
      if (revisionCase === Case.END) from = events.length;
      for (let i = Math.max(from, firstVisible); i < events.length && written < count && !writer.cancelled; i++, written++) {
        const event = events[i];
        if (event !== undefined) await writer.write(eventResponse(event, structuredIds, false));
        if (written % YIELD_EVERY === YIELD_EVERY - 1) await tick();
      }
    }
  }

  private async readAll(
    writer: ResponseWriter,
    options: ReadReq.Options,
    backwards: boolean,
    count: number,
    structuredIds: boolean,
  ): Promise<void> {
    const all = this.log.all;
    const allOptions = options.getAll();
    const Case = ReadReq.Options.AllOptions.AllOptionCase;
    const position = allOptions?.getPosition();
    const filter = compileFilter(options);
    let written = 0;
    let scanned = 0;
    if (backwards) {
      // Backwards from a position: the events before it.
      let from = all.length - 1;
      if (allOptions?.getAllOptionCase() === Case.POSITION && position !== undefined) {
        from = this.log.indexFrom(BigInt(position.getCommitPosition()), false) - 1;
      } else if (allOptions?.getAllOptionCase() === Case.START) {
        from = -1;
      }
      for (let i = from; i >= 0 && written < count && !writer.cancelled; i--) {
        const event = all[i];
        if (event === undefined || (filter !== null && !filter.matches(event))) continue;
        await writer.write(eventResponse(event, structuredIds, true));
        written++;
        if (++scanned % YIELD_EVERY === 0) await tick();
      }
    } else {
      // Forwards from a position: the event at it, then the ones after.
      let from = 0;
      if (allOptions?.getAllOptionCase() === Case.POSITION && position !== undefined) {
        from = this.log.indexFrom(BigInt(position.getCommitPosition()), false);
      } else if (allOptions?.getAllOptionCase() === Case.END) {
        from = all.length;
      }
      for (let i = from; i < all.length && written < count && !writer.cancelled; i++) {
        const event = all[i];
        if (event === undefined || (filter !== null && !filter.matches(event))) continue;
        await writer.write(eventResponse(event, structuredIds, true));
        written++;
        if (++scanned % YIELD_EVERY === 0) await tick();
      }
    }
  }

  private async subscribeToAll(writer: ResponseWriter, options: ReadReq.Options, structuredIds: boolean): Promise<void> {
    const all = this.log.all;
    const allOptions = options.getAll();
    const Case = ReadReq.Options.AllOptions.AllOptionCase;
    let cursor = 0;
    const position = allOptions?.getPosition();
    if (allOptions?.getAllOptionCase() === Case.POSITION && position !== undefined) {
      cursor = this.log.indexFrom(BigInt(position.getCommitPosition()), true);
    } else if (allOptions?.getAllOptionCase() === Case.END) {
      cursor = all.length;
    }
    const filter = compileFilter(options);
    let caughtUp = false;
    let scannedSinceCheckpoint = 0;
    let lastScanned: StoredEvent | undefined;
    let sinceYield = 0;

    while (!writer.cancelled) {
      const event = all[cursor];
      if (event === undefined) {
        if (!caughtUp) {
          caughtUp = true;
          if (this.sendsCaughtUp) {
            if (filter !== null && scannedSinceCheckpoint > 0 && lastScanned !== undefined) {
              await writer.write(checkpointResponse(lastScanned.position));
              scannedSinceCheckpoint = 0;
            }
            await writer.write(caughtUpResponse());
          }
          continue;
        }
        await writer.waitFor((wake) => this.log.onAppend(wake));
        continue;
      }
      cursor++;
      lastScanned = event;
      if (filter === null || filter.matches(event)) await writer.write(eventResponse(event, structuredIds, true));
      if (filter !== null && ++scannedSinceCheckpoint >= filter.checkpointEvery) {
        scannedSinceCheckpoint = 0;
        await writer.write(checkpointResponse(event.position));
      }
      if (++sinceYield >= YIELD_EVERY) {
        sinceYield = 0;
        await tick();
      }
    }
  }

  private async subscribeToStream(writer: ResponseWriter, options: ReadReq.Options, structuredIds: boolean): Promise<void> {
    const streamOptions = options.getStream();
    const name = streamNameOf(streamOptions?.getStreamIdentifier());
    const Case = ReadReq.Options.StreamOptions.RevisionOptionCase;
    let cursor = 0;
    switch (streamOptions?.getRevisionOptionCase()) {
      case Case.REVISION:
        cursor = Number(streamOptions.getRevision()) + 1;
        break;
      case Case.END:
        cursor = this.log.stream(name)?.events.length ?? 0;
        break;
      default:
        cursor = 0;
    }
    let caughtUp = false;
    let sinceYield = 0;
    while (!writer.cancelled) {
      const state = this.log.stream(name);
      if (state !== undefined) cursor = Math.max(cursor, this.log.firstVisibleRevision(state, Date.now()));
      const event = state?.events[cursor];
      if (event === undefined) {
        if (!caughtUp) {
          caughtUp = true;
          if (this.sendsCaughtUp) await writer.write(caughtUpResponse());
          continue;
        }
        await writer.waitFor((wake) => this.log.onAppend(wake));
        continue;
      }
      cursor++;
      await writer.write(eventResponse(event, structuredIds, false));
      if (++sinceYield >= YIELD_EVERY) {
        sinceYield = 0;
        await tick();
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// System events, as a fresh real server has them and keeps adding

function systemEvent(type: string, data: unknown): ProposedEvent {
  return {
    id: randomUUID(),
    type,
    contentType: 'application/json',
    data: Buffer.from(JSON.stringify(data), 'utf8'),
    metadata: new Uint8Array(),
  };
}

function seedSystemEvents(log: EventLog): void {
  log.append('$users', { kind: 'any' }, [systemEvent('$User', { LoginName: 'admin' })]);
  log.append('$user-admin', { kind: 'any' }, [
    systemEvent('$UserCreated', { loginName: 'admin', fullName: 'Event Store Administrator', groups: ['$admins'] }),
  ]);
  log.append('$users', { kind: 'any' }, [systemEvent('$User', { LoginName: 'ops' })]);
  log.append('$settings', { kind: 'any' }, [
    systemEvent('$update-default-acl', { $userStreamAcl: { $r: '$all' }, $systemStreamAcl: { $r: '$admins' } }),
  ]);
}

const STATS_STREAM = '$stats-127.0.0.1:2113';

function writeStats(log: EventLog, startedAt: number): void {
  if (log.currentRevision(STATS_STREAM) === NO_STREAM) {
    log.append(`$$${STATS_STREAM}`, { kind: 'any' }, [systemEvent('$metadata', { $maxAge: 86400 })]);
  }
  log.append(STATS_STREAM, { kind: 'any' }, [
    systemEvent('$statsCollected', {
      'proc-startTime': new Date(startedAt).toISOString(),
      'proc-mem': process.memoryUsage().rss,
      'es-queue-count': 0,
    }),
  ]);
}

// ---------------------------------------------------------------------------------------
// Process

function argument(name: string): string | undefined {
  const prefix = `--${name}=`;
  const found = process.argv.find((arg) => arg === `--${name}` || arg.startsWith(prefix));
  if (found === undefined) return undefined;
  return found.startsWith(prefix) ? found.slice(prefix.length) : '';
}

function main(): void {
  const port = Number(argument('port') ?? '0');
  const statsIntervalMs = Number(argument('stats-interval-ms') ?? '2000');
  const startedAt = Date.now();

  const log = new EventLog();
  seedSystemEvents(log);
  const standin = new StandinServer(log, argument('no-caught-up') === undefined);
  const server = new grpc.Server({ 'grpc.max_receive_message_length': 17 * 1024 * 1024 });
  server.addService(StreamsService, standin.streams);
  server.addService(ServerFeaturesService, standin.serverFeatures);

  const statsTimer =
    statsIntervalMs > 0 ? setInterval(() => writeStats(log, startedAt), statsIntervalMs) : undefined;

  let stopping = false;
  const stop = (): void => {
    if (stopping) return;
    stopping = true;
    if (statsTimer !== undefined) clearInterval(statsTimer);
    standin.endAllCalls();
    server.forceShutdown();
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  if (argument('exit-with-stdin') !== undefined) {
    // Started by a test process: never outlive it.
    process.stdin.on('end', stop);
    process.stdin.on('close', stop);
    process.stdin.resume();
  }

  server.bindAsync(`127.0.0.1:${port}`, grpc.ServerCredentials.createInsecure(), (error, boundPort) => {
    if (error !== null) {
      process.stderr.write(`esdb stand-in: cannot listen: ${error.message}\n`);
      process.exit(1);
    }
    process.stdout.write(`ESDB_STANDIN_PORT=${boundPort}\n`);
  });
}

main();
