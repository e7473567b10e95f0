/**
 * Given / when / then for deciders:
 *
 *   spec(deviceDecider).given([registered]).when(updateName).then([renamed]);
 *   spec(deviceDecider).given([]).when(updateName).thenThrows(NotFoundError, 'Device not found');
 *
 * `given` folds the events with `evolve` from `initialState()`; `when` runs `decide` on the
 * result only when an assertion is called, so a throwing `decide` is caught by `thenThrows`.
 */
import type { Command, Decider, DomainEvent } from '../../src/domain/messages';

type ErrorClass = abstract new (...args: never[]) => Error;

export interface When<State, E> {
  /** Exactly these events, in this order. */
  then(expected: readonly E[]): void;
  /** No events, and no error. */
  thenNothing(): void;
  /** `decide` throws an instance of `errorClass`, with exactly `message` when given. */
  thenThrows(errorClass: ErrorClass, message?: string): void;
  /** The decided events and the state after them, for assertions of another shape. */
  result(): { readonly events: readonly E[]; readonly state: State };
}

export interface Given<State, C, E> {
  when(command: C): When<State, E>;
}

export interface Spec<State, C, E> {
  given(events: readonly E[]): Given<State, C, E>;
}

export function spec<State, C extends Command, E extends DomainEvent>(
  decider: Decider<State, C, E>,
): Spec<State, C, E> {
  const fold = (from: State, events: readonly E[]): State => events.reduce(decider.evolve, from);

  return {
    given(history) {
      return {
        when(command) {
          const run = (): { events: readonly E[]; state: State } => {
            const before = fold(decider.initialState(), history);
            const events = decider.decide(command, before);
            return { events, state: fold(before, events) };
          };
          return {
            then(expected) {
              expect(run().events).toEqual(expected);
            },
            thenNothing() {
              expect(run().events).toEqual([]);
            },
            thenThrows(errorClass, message) {
              let thrown: unknown = undefined;
              try {
                run();
              } catch (error) {
                thrown = error;
              }
              expect(thrown).toBeInstanceOf(errorClass);
              if (message !== undefined) expect((thrown as Error).message).toBe(message);
            },
            result: run,
          };
        },
      };
    },
  };
}
