import { spawn } from 'node:child_process';
import { resolve } from 'node:path';

/**
 * agentFetch in a process of its own, where an error nobody listens for ends the process (in
 * jest it would only fail a test): a fleet of thousands of hubs in one process must not die of
 * one answer.
 */

const ROOT = resolve(__dirname, '../..');

test('an answer over maxBodyBytes that arrived whole is refused without killing the process; after close() the process ends by itself', async () => {
  const child = spawn(process.execPath, ['--import', 'tsx', 'test/review/agentfetch-oversize-child.ts'], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const outcome = await new Promise<string>((done) => {
    // A bound on a failure (something left the process running), not a condition of success.
    const guard = setTimeout(() => {
      child.kill('SIGKILL');
      done('still running 20 s after start');
    }, 20_000);
    child.on('exit', (code) => {
      clearTimeout(guard);
      done(`exited ${String(code)}`);
    });
  });
  expect({ outcome, stderr }).toEqual({ outcome: 'exited 0', stderr: '' });
  expect(stdout).toBe('over the limit: refused: answer body over 1024 bytes\nthen: answered 200 {"ok":true}\n');
}, 30_000);
