import { randomUUID } from 'node:crypto';
import type { Actor, Command, Decider, DomainEvent, EventMetadata } from '../domain/messages';
import { ConflictError } from '../domain/errors';
import {
  type AppendResult,
  type EventStore,
  type ExpectedRevision,
  type GlobalPosition,
  type NewEvent,
  WrongExpectedRevisionError,
} from '../infra/eventstore/port';

/** Who asked, and on behalf of which request: becomes the metadata of every event appended. */
export interface CommandContext {
  readonly actor: Actor;
  readonly requestId: string;
  readonly correlationId: string;
  /** Id of the command; also the causationId of the events it produces. */
  readonly commandId: string;
}

export interface Clock {
  now(): Date;
}

export const systemClock: Clock = { now: () => new Date() };

export function newCommandContext(actor: Actor, requestId: string): CommandContext {
  return { actor, requestId, correlationId: requestId, commandId: randomUUID() };
}

export interface HandledCommand<State, E extends DomainEvent> {
  readonly state: State;
  readonly events: readonly E[];
  /** Revision of the stream after the command (-1n when the stream is still empty). */
  readonly revision: bigint;
  /** Position of the last appended event, or null when the command appended nothing. */
  readonly position: GlobalPosition | null;
}

export interface HandleOptions {
  /** How many times to re-read and re-decide after a concurrent append. */
  readonly maxRetries?: number;
}

export function eventMetadata(ctx: CommandContext, occurredAt: string): EventMetadata {
  return {
    occurredAt,
    actor: ctx.actor,
    requestId: ctx.requestId,
    causationId: ctx.commandId,
    correlationId: ctx.correlationId,
  };
}

export function toNewEvents(events: readonly DomainEvent[], ctx: CommandContext, occurredAt: string): NewEvent[] {
  const metadata = eventMetadata(ctx, occurredAt);
  return events.map((e) => ({ id: randomUUID(), type: e.type, data: e.data, metadata }));
}

/** Reads a stream and folds it; returns the state and the stream's revision (-1n when empty). */
export async function loadAggregate<State, E extends DomainEvent>(
  store: EventStore,
  evolve: (state: State, event: E) => State,
  initialState: () => State,
  streamName: string,
): Promise<{ state: State; revision: bigint }> {
  let state = initialState();
  let revision = -1n;
  for await (const recorded of store.readStream(streamName)) {
    state = evolve(state, { type: recorded.type, data: recorded.data } as E);
    revision = recorded.revision;
  }
  return { state, revision };
}

/**
 * The one command handler: read the stream, fold, decide, append with the expected
 * revision. On a concurrent append it starts over, a bounded number of times, then
 * answers 409. `decide` may throw domain errors; they pass through untouched.
 */
export async function handleCommand<State, C extends Command, E extends DomainEvent>(
  store: EventStore,
  decider: Decider<State, C, E>,
  streamName: string,
  command: C,
  ctx: CommandContext,
  clock: Clock,
  options: HandleOptions = {},
): Promise<HandledCommand<State, E>> {
  const maxRetries = options.maxRetries ?? 5;
  for (let attempt = 0; ; attempt++) {
    const { state, revision } = await loadAggregate(store, decider.evolve, decider.initialState, streamName);
    const events = decider.decide(command, state);
    if (events.length === 0) return { state, events, revision, position: null };

    const expected: ExpectedRevision = revision < 0n ? 'no_stream' : revision;
    let result: AppendResult;
    try {
      result = await store.append(streamName, toNewEvents(events, ctx, clock.now().toISOString()), expected);
    } catch (error) {
      if (error instanceof WrongExpectedRevisionError && attempt < maxRetries) continue;
      if (error instanceof WrongExpectedRevisionError) {
        throw new ConflictError('The resource was changed concurrently, please retry');
      }
      throw error;
    }
    const newState = events.reduce(decider.evolve, state);
    return { state: newState, events, revision: result.nextExpectedRevision, position: result.position };
  }
}
