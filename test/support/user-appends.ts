import type { EventStore } from '../../src/infra/eventstore/port';

/**
 * Faults on the next append to a user's stream (`user-<id>`), for tests of what a sync does
 * between its claims and that append: the append fails (as a store error or a stop there
 * answers), or waits until released (a slow round trip, an append in flight).
 */

type Appending = { append: EventStore['append'] };

/** The next append to a user's stream fails; returns the undo. */
export function failNextUserAppend(eventStore: EventStore): () => void {
  const store = eventStore as Appending;
  const original = store.append.bind(eventStore);
  let used = false;
  store.append = async (streamName, events, expected) => {
    if (!used && streamName.startsWith('user-')) {
      used = true;
      throw new Error('event store unavailable');
    }
    return original(streamName, events, expected);
  };
  return () => {
    store.append = original;
  };
}

export interface HeldAppend {
  /** Settles once the append is waiting. */
  readonly atAppend: Promise<void>;
  /** Lets it go on. */
  release(): void;
  /** Lets it go on, and puts the store back. */
  restore(): void;
}

/** The next append to a user's stream waits until released. */
export function holdNextUserAppend(eventStore: EventStore): HeldAppend {
  const store = eventStore as Appending;
  const original = store.append.bind(eventStore);
  let release: () => void = () => undefined;
  let reached: () => void = () => undefined;
  const held = new Promise<void>((resolve) => (release = resolve));
  const atAppend = new Promise<void>((resolve) => (reached = resolve));
  let once = false;
  store.append = async (streamName, events, expected) => {
    if (!once && streamName.startsWith('user-')) {
      once = true;
      reached();
      await held;
    }
    return original(streamName, events, expected);
  };
  return {
    atAppend,
    release: () => release(),
    restore: () => {
      release();
      store.append = original;
    },
  };
}
