import { spawnSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startServerProcess, type ServerProcess } from '../support/server';

/**
 * The service as a whole refuses a second process on one DATA_DIR, also when each runs in a
 * pid namespace of its own (two containers on one volume, a rolling deploy that starts the new
 * one first): the second exits with a message that says who holds it, the first serves on.
 */

const OWN_PID_NAMESPACE = ['unshare', '--pid', '--fork', '--mount-proc', '--kill-child'];
const pidNamespacesAvailable = spawnSync(OWN_PID_NAMESPACE[0] as string, [...OWN_PID_NAMESPACE.slice(1), 'true']).status === 0;
/** Where namespaces cannot be made (not root), the same test in this one. */
const prefix = pidNamespacesAvailable ? OWN_PID_NAMESPACE : [];

let dataDir: string;
let first: ServerProcess | null = null;
beforeEach(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'hhc-one-process-'));
});
afterEach(async () => {
  await first?.kill();
  first = null;
  await rm(dataDir, { recursive: true, force: true });
});

test(`a second service on the same DATA_DIR${pidNamespacesAvailable ? ', each in its own pid namespace,' : ''} refuses to start and says why; the first serves on`, async () => {
  first = await startServerProcess({ DATA_DIR: dataDir }, 60_000, prefix);

  const second = startServerProcess({ DATA_DIR: dataDir }, 60_000, prefix);

  const refusal = await second.then(
    async (started) => {
      await started.kill();
      return 'started as well';
    },
    (error: unknown) => (error instanceof Error ? error.message : String(error)),
  );
  expect(refusal).toMatch(/^service exited with 1 before starting/);
  expect(refusal).toContain(
    `Failed to start: Event store in ${dataDir} is already open by process ${pidNamespacesAvailable ? 1 : ''}`,
  );
  expect(refusal).toMatch(/a data directory is used by one process at a time/);
  expect((await fetch(`${first.baseUrl}/api/v1/health`)).status).toBe(200);
}, 120_000);
