import { DelayedError, Queue, Worker, type Job, type JobsOptions } from 'bullmq';
import Redis from 'ioredis';
import { RETRY_AFTER_FAILURE_MS, type ExpiryHandler, type ExpiryScheduler } from './scheduler';

/**
 * The distributed expiry scheduler: one BullMQ delayed job per key, with the key as job id,
 * in the Redis of REDIS_URL. Any number of processes may schedule and work; BullMQ's job
 * lock lets one worker at a time run a job. A run that answers a later time moves its own
 * job back to delayed (same id), so a device that keeps sending heartbeats costs one job
 * update per offline window, not one per heartbeat.
 *
 * Redis is the only home of these jobs: when it restarts empty they are gone, and
 * `onReconnect` tells the owner to schedule again what must be scheduled.
 */

export interface BullmqSchedulerOptions {
  readonly redisUrl: string;
  readonly queueName?: string;
  /** Key prefix in Redis. */
  readonly prefix?: string;
  /** Jobs one worker runs at once. */
  readonly concurrency?: number;
  /** How long a worker may hold a job without renewing its lock; a dead worker's job runs again after about this long. */
  readonly lockDurationMs?: number;
  /** Told every time the connection is back after a loss (Redis may have restarted empty). */
  readonly onReconnect?: () => void;
  readonly onError?: (error: Error) => void;
}

export const EXPIRY_QUEUE_NAME = 'presence-expiry';
const JOB_NAME = 'expire';
const ACTIVE_POLL_MS = 20;
/** A run moves its job to delayed at least this far ahead, so a clock step never spins a job. */
const MIN_REDELAY_MS = 5;

const JOB_OPTIONS: JobsOptions = {
  removeOnComplete: true,
  removeOnFail: true,
  // A failing run (event store unreachable) is retried for as long as it takes.
  attempts: 1_000_000,
  backoff: { type: 'fixed', delay: RETRY_AFTER_FAILURE_MS },
};

/** Reconnect fast: a job that should fire while Redis is away fires once it is back. */
const connectionOptions = {
  maxRetriesPerRequest: null,
  retryStrategy: (attempt: number) => Math.min(100 * attempt, 1000),
} as const;

export function createBullmqExpiryScheduler(options: BullmqSchedulerOptions): ExpiryScheduler {
  const queueName = options.queueName ?? EXPIRY_QUEUE_NAME;
  const prefix = options.prefix ?? 'hhc';
  const onError = options.onError ?? (() => undefined);
  const lockDuration = options.lockDurationMs ?? 5000;
  // Connections of our own, with the fast reconnect; BullMQ leaves shared connections open, so close() quits them.
  const queueConnection = new Redis(options.redisUrl, connectionOptions);
  const workerConnection = new Redis(options.redisUrl, connectionOptions);
  queueConnection.on('error', onError);
  workerConnection.on('error', onError);

  let connectedOnce = false;
  queueConnection.on('ready', () => {
    if (connectedOnce) options.onReconnect?.();
    connectedOnce = true;
  });

  const queue = new Queue(queueName, { connection: queueConnection, prefix });
  queue.on('error', onError);
  let worker: Worker | null = null;
  let closed = false;

  const add = (key: string, at: number): Promise<Job> => queue.add(JOB_NAME, {}, { ...JOB_OPTIONS, jobId: key, delay: Math.max(0, at - Date.now()) });

  return {
    async schedule(key, at) {
      // An add with the id of an existing job changes nothing. That is right for a delayed or
      // waiting job (it runs later and re-checks), and for a run that starts after this
      // check (it reads what the caller wrote before calling). A run already going may have
      // decided on older state and be about to end the job: let it finish first.
      for (;;) {
        if (closed) throw new Error('The expiry scheduler is closed');
        if ((await queue.getJobState(key)) !== 'active') break;
        await new Promise((resolve) => setTimeout(resolve, ACTIVE_POLL_MS));
      }
      await add(key, at);
    },

    async start(handler: ExpiryHandler) {
      if (worker !== null) throw new Error('The expiry scheduler is already started');
      const processor = async (job: Job, token?: string): Promise<void> => {
        const key = job.id;
        if (key === undefined) return;
        const next = await handler(key);
        if (next === null) return;
        await job.moveToDelayed(Math.max(next, Date.now() + MIN_REDELAY_MS), token);
        throw new DelayedError();
      };
      worker = new Worker(queueName, processor, {
        connection: workerConnection,
        prefix,
        concurrency: options.concurrency ?? 50,
        lockDuration,
        stalledInterval: lockDuration,
        // A job is only stalled because its worker died: run it again, however often that happens.
        maxStalledCount: 1_000_000,
      });
      worker.on('error', onError);
      await worker.waitUntilReady();
    },

    async size() {
      const counts = await queue.getJobCounts('delayed', 'waiting', 'active', 'prioritized');
      return Object.values(counts).reduce((sum, n) => sum + n, 0);
    },

    async close() {
      if (closed) return;
      closed = true;
      // Redis away: nothing to finish properly. Cut the connections first, so that closing
      // does not wait for a reconnection; a job that was running is retried by another worker.
      const away = queueConnection.status !== 'ready' || workerConnection.status !== 'ready';
      if (away) {
        queueConnection.disconnect();
        workerConnection.disconnect();
      }
      await worker?.close(away);
      await queue.close();
      // disconnect, not quit: quit would wait for a Redis that may be away.
      queueConnection.disconnect();
      workerConnection.disconnect();
    },
  };
}
