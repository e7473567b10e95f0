import type { Turns } from '../../src/runtime/turns';

/** Turns whose jobs run only when the test releases them: what happens while one waits is decided by the test, not by how busy the machine is. */
export interface ManualTurns extends Turns {
  readonly jobs: Array<() => void>;
  release(): void;
}

export function manualTurns(): ManualTurns {
  const jobs: Array<() => void> = [];
  return {
    jobs,
    run: (job) => void jobs.push(job),
    stats: () => ({ waiting: jobs.length, perTurn: 0, waited: 0, overdue: 0 }),
    release() {
      for (const job of jobs.splice(0)) job();
    },
  };
}
