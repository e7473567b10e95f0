import type Redis from 'ioredis';
import type { GlobalPosition } from '../infra/eventstore/port';
import { comparePositions, formatPosition, parsePosition } from '../infra/eventstore/port';
import type { ReadStore } from '../infra/readstore/port';
import { CHECKPOINT_NAME } from './projector';

/**
 * Read-your-writes (decisions §1): a write waits until the projections have applied the
 * position it appended, so a GET on any process reflects it.
 */
export interface Watermark {
  /** The projector applied everything up to `position`. */
  advance(position: GlobalPosition): void;
  /** True once `position` is applied; false when `timeoutMs` passed first. */
  waitFor(position: GlobalPosition, timeoutMs: number): Promise<boolean>;
  current(): GlobalPosition | null;
  close(): Promise<void>;
}

interface Waiter {
  readonly position: GlobalPosition;
  readonly resolve: (reached: boolean) => void;
  readonly timer: NodeJS.Timeout;
}

/** The in-process watermark: the projector and the API share one process. */
export function createLocalWatermark(): Watermark {
  let current: GlobalPosition | null = null;
  let waiters: Waiter[] = [];

  const reached = (p: GlobalPosition): boolean => current !== null && comparePositions(current, p) >= 0;

  return {
    current: () => current,
    advance(position) {
      if (current !== null && comparePositions(position, current) <= 0) return;
      current = position;
      if (waiters.length === 0) return;
      const still: Waiter[] = [];
      for (const w of waiters) {
        if (reached(w.position)) {
          clearTimeout(w.timer);
          w.resolve(true);
        } else still.push(w);
      }
      waiters = still;
    },
    waitFor(position, timeoutMs) {
      if (reached(position)) return Promise.resolve(true);
      return new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => {
          waiters = waiters.filter((w) => w.timer !== timer);
          resolve(false);
        }, timeoutMs);
        waiters.push({ position, resolve, timer });
      });
    },
    async close() {
      for (const w of waiters) {
        clearTimeout(w.timer);
        w.resolve(false);
      }
      waiters = [];
    },
  };
}

const CHANNEL = 'hhc:projector:position';

/**
 * Across processes: the active projector publishes its position on a Redis channel; every
 * API process follows it. While someone waits, the stored checkpoint is polled too, so a
 * missed message only costs a poll interval.
 */
export async function createRedisWatermark(
  publisher: Redis,
  subscriber: Redis,
  readStore: ReadStore,
  pollMs = 100,
): Promise<Watermark> {
  const local = createLocalWatermark();
  let pending: GlobalPosition | null = null;
  let waiting = 0;

  subscriber.on('message', (channel: string, message: string) => {
    if (channel !== CHANNEL) return;
    try {
      local.advance(parsePosition(message));
    } catch {
      // A malformed message on our channel is ignored; the checkpoint poll covers it.
    }
  });
  // Subscribe only on a ready connection, and again at every ready (after any reconnection),
  // then read the stored checkpoint for what was published while not subscribed. ioredis
  // writes a SUBSCRIBE issued between the TCP connect and its own ready check (an `INFO`);
  // the connection is then in subscriber mode, the ready check is refused ("Connection in
  // subscriber mode"), and the connection is reopened without the subscription (ioredis
  // resubscribes only connections that had been ready), while the SUBSCRIBE had already
  // succeeded: this process would never hear the projector again.
  const follow = async (): Promise<void> => {
    await subscriber.subscribe(CHANNEL);
    const stored = await readStore.getCheckpoint(CHECKPOINT_NAME);
    if (stored !== null) local.advance(parsePosition(stored));
  };
  const onReady = (): void => {
    follow().catch(() => undefined);
  };
  subscriber.on('ready', onReady);
  // (Not `events.once`: an 'error' while Redis is still unreachable must not end the wait.)
  if (subscriber.status !== 'ready') await new Promise<void>((resolve) => subscriber.once('ready', () => resolve()));
  await follow();

  const poller = setInterval(() => {
    if (waiting === 0) return;
    readStore
      .getCheckpoint(CHECKPOINT_NAME)
      .then((value) => value !== null && local.advance(parsePosition(value)))
      .catch(() => undefined);
  }, pollMs);
  poller.unref();

  return {
    current: local.current,
    advance(position) {
      local.advance(position);
      // Coalesce: one publish per tick with the newest position.
      const schedule = pending === null;
      pending = position;
      if (schedule) {
        setImmediate(() => {
          const p = pending;
          pending = null;
          if (p !== null) publisher.publish(CHANNEL, formatPosition(p)).catch(() => undefined);
        });
      }
    },
    async waitFor(position, timeoutMs) {
      waiting++;
      try {
        return await local.waitFor(position, timeoutMs);
      } finally {
        waiting--;
      }
    },
    async close() {
      clearInterval(poller);
      subscriber.off('ready', onReady);
      // Redis away: the command would wait for it; the subscription ends with the connection anyway.
      if (subscriber.status === 'ready') await subscriber.unsubscribe(CHANNEL).catch(() => undefined);
      await local.close();
    },
  };
}
