import { eventually } from './client-timers';

/**
 * The event loop, for tests that decide what a server finds readable together: holding it (the
 * server in this process too) while clients write, and waiting for its turns.
 */

/** Holds this process's event loop for `ms`: what clients wrote meanwhile is read in one turn. */
export function holdEventLoop(ms: number): void {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    /* held on purpose */
  }
}

/** Resolves in the next turn's check phase (after the sockets read in this one). */
export const nextTurn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** Resolves once `check` holds; fails, saying `what`, after `ms`. */
export async function until(check: () => boolean, what: string, ms = 20_000): Promise<void> {
  await eventually(check, ms, what);
}
