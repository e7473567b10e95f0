import { spawn } from 'node:child_process';
import { resolve } from 'node:path';

/**
 * Runs a fixture script (tsx) in its own process, which prints `stopped at=<ms>` when it calls
 * a client's `stop()`, and says how long after that the process exited by itself: a timer or a
 * socket left behind keeps it alive (killed after `giveUpMs`: 'still running').
 */
export async function runUntilExit(
  fixture: string,
  env: Record<string, string>,
  giveUpMs: number,
): Promise<{ stdout: string; stderr: string; exitAfterStopMs: number | 'still running' }> {
  const child = spawn(process.execPath, ['--import', 'tsx', fixture], {
    cwd: resolve(__dirname, '..', '..'),
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
  child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
  const exitedAt = await new Promise<number | 'still running'>((done) => {
    const guard = setTimeout(() => {
      child.kill('SIGKILL');
      done('still running');
    }, giveUpMs);
    child.on('exit', () => {
      clearTimeout(guard);
      done(Date.now());
    });
  });
  const stoppedAt = Number(/stopped at=(\d+)/.exec(stdout)?.[1] ?? NaN);
  return { stdout, stderr, exitAfterStopMs: typeof exitedAt === 'number' ? exitedAt - stoppedAt : exitedAt };
}
