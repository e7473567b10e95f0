import type { Logger } from '../logger';

/**
 * The shutdown sequence (decisions §8): named steps run in order, each given the time left
 * of one budget. A step that does not finish in it is logged and left behind, so that the
 * next ones still run (a store that hangs, say); one that fails is logged too.
 */

/** The whole shutdown, within the 10 s an orchestrator gives between SIGTERM and SIGKILL (main.ts exits at 10 s regardless). */
export const SHUTDOWN_BUDGET_MS = 9000;

export interface ShutdownStep {
  readonly name: string;
  readonly run: () => Promise<unknown>;
}

export async function runShutdown(steps: readonly ShutdownStep[], logger: Logger, budgetMs: number = SHUTDOWN_BUDGET_MS): Promise<void> {
  const deadline = Date.now() + budgetMs;
  for (const step of steps) {
    let timer: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([
      step.run().then(
        () => 'done' as const,
        (error: unknown) => {
          logger.warn({ step: step.name, err: error instanceof Error ? error.message : String(error) }, 'shutdown: step failed');
          return 'done' as const;
        },
      ),
      new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), Math.max(0, deadline - Date.now())))),
    ]);
    clearTimeout(timer);
    if (outcome === 'late') logger.warn({ step: step.name }, 'shutdown: step did not finish in time; going on');
  }
}
