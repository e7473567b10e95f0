/**
 * Message shapes shared by every aggregate. Events and commands are plain readonly
 * data: `{type, data}` plus metadata that auditors rely on.
 */

export type ActorType = 'user' | 'device' | 'crm' | 'system';

export interface Actor {
  readonly type: ActorType;
  readonly id: string;
}

export interface EventMetadata {
  /** ISO 8601 UTC with milliseconds. */
  readonly occurredAt: string;
  readonly actor: Actor;
  /** The X-Request-Id of the request that caused the event. */
  readonly requestId: string;
  /** Id of the command (or event) that directly caused this event. */
  readonly causationId: string;
  /** Id shared by everything that one request set in motion. */
  readonly correlationId: string;
}

/** A domain event as a decider emits it: type and data, no metadata yet. */
export interface DomainEvent<Type extends string = string, Data = unknown> {
  readonly type: Type;
  readonly data: Data;
}

export type Command<Type extends string = string, Data = unknown> = {
  readonly type: Type;
  readonly data: Data;
};

/**
 * A decider: pure business logic of one aggregate. No IO, no clock, no random ids:
 * the command carries `now` and any generated ids.
 */
export interface Decider<State, C extends Command, E extends DomainEvent> {
  readonly initialState: () => State;
  readonly evolve: (state: State, event: E) => State;
  /**
   * Optional: the same state as `events.reduce(evolve, state)`, made at once. For a state
   * that grows with its stream (a session's tokens), where `evolve` copies it at each event
   * and a fold of n events would cost n copies.
   */
  readonly evolveAll?: (state: State, events: readonly E[]) => State;
  readonly decide: (command: C, state: State) => readonly E[];
}
