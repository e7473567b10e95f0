/**
 * What a distributed start needs from each store before it goes on: an answer. Without one
 * the start stops with a message that names the store and its variable (decisions §8: an
 * operator whose deployment does not come up learns which store is missing), instead of
 * waiting without end (the projector behind an unreachable EventStoreDB) or failing with a
 * bare `connect ECONNREFUSED` that names no store.
 */

/** How long a start waits for each store (MongoDB's driver gives up on a server after as long). */
export const STORE_START_TIMEOUT_MS = 30_000;
/** Between two tries of a store that refused. */
const RETRY_EVERY_MS = 1_000;

export interface StoreName {
  /** As the operator knows it: `EventStoreDB`, `MongoDB`, `Redis`. */
  readonly store: string;
  /** The variable that points at it. */
  readonly variable: string;
}

export class StoreUnreachableError extends Error {
  /** `timeoutMs`: how long it was waited for; absent when its driver gave up by itself. */
  constructor(name: StoreName, cause: unknown, timeoutMs?: number) {
    const reason = cause instanceof Error ? cause.message : cause === undefined ? 'no answer' : String(cause);
    const waited = timeoutMs === undefined ? 'could not be reached' : `did not answer within ${timeoutMs / 1000} s`;
    super(`${name.variable}: ${name.store} ${waited} (${reason.split('\n')[0] ?? ''})`);
    this.name = 'StoreUnreachableError';
  }
}

/**
 * Tries `probe` until it answers, for at most `timeoutMs`; a try still running at the deadline
 * is given up (its late answer ignored). Throws StoreUnreachableError naming the store.
 */
export async function untilAnswered<T>(name: StoreName, probe: () => Promise<T>, timeoutMs = STORE_START_TIMEOUT_MS, retryEveryMs = RETRY_EVERY_MS): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    const left = deadline - Date.now();
    if (left <= 0) throw new StoreUnreachableError(name, last, timeoutMs);
    let timer: NodeJS.Timeout | undefined;
    const attempt = probe();
    attempt.catch(() => undefined);
    try {
      return await Promise.race([
        attempt,
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new StoreUnreachableError(name, last, timeoutMs)), left);
        }),
      ]);
    } catch (error) {
      if (error instanceof StoreUnreachableError) throw error;
      last = error;
    } finally {
      clearTimeout(timer);
    }
    await new Promise((resolve) => setTimeout(resolve, Math.min(retryEveryMs, Math.max(0, deadline - Date.now()))));
  }
}

export const EVENTSTORE: StoreName = { store: 'EventStoreDB', variable: 'EVENTSTORE_URL' };
export const MONGODB: StoreName = { store: 'MongoDB', variable: 'MONGODB_URI' };
export const REDIS: StoreName = { store: 'Redis', variable: 'REDIS_URL' };
