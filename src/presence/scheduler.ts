/**
 * The expiry scheduler port: at most one job per key (a device uuid) that fires at a time
 * given in epoch milliseconds. Adapters: in-process timers (`timer-scheduler.ts`, embedded
 * mode) and BullMQ delayed jobs in Redis (`bullmq-scheduler.ts`, distributed mode); one
 * contract suite (test/contract/expiry-scheduler.contract.ts) runs against both.
 *
 * The scheduler knows nothing of devices: the handler decides, each time a job fires,
 * whether it fires again (and when) or ends.
 */

/**
 * Called when the job of `key` fires. Answers when to fire again (epoch ms), or null to
 * end the job. A throw is a failed run: the job fires again after a short pause.
 */
export type ExpiryHandler = (key: string) => Promise<number | null>;

export interface ExpiryScheduler {
  /**
   * Makes sure a job for `key` exists. A new job fires at `at` (at once when `at` is past).
   * An existing job is kept as it is: it was set from what was known when it was made, and
   * its handler re-checks when it fires.
   *
   * Never lost: once the returned promise resolves, a run of the handler for `key` is due
   * that starts after this call began — even when the call overlapped a run that then
   * ended the job.
   */
  schedule(key: string, at: number): Promise<void>;
  /** Starts firing due jobs through `handler` (once per scheduler). */
  start(handler: ExpiryHandler): Promise<void>;
  /** Jobs that exist now (pending or running): for tests, logs and metrics. */
  size(): Promise<number>;
  /**
   * Stops firing; running handlers finish first. In-process jobs are gone with the
   * process; BullMQ jobs stay in Redis for the next worker.
   */
  close(): Promise<void>;
}

/** How long a failed run waits before its job fires again. */
export const RETRY_AFTER_FAILURE_MS = 1000;
