import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { PROCESS_START_TIMEOUT_MS } from '../support/server';

/**
 * The service as separate processes, exactly as it is deployed: `node --import tsx
 * src/main.ts` with its configuration in the environment, each on a fixed port so that a
 * process killed with SIGKILL comes back where its clients look for it.
 */

const ROOT = join(__dirname, '..', '..');
/** The test suite's start budget for a service process (a loaded machine took over 60 s). */
const READY_TIMEOUT_MS = PROCESS_START_TIMEOUT_MS;

export interface ServiceProcess {
  readonly name: string;
  readonly port: number;
  readonly baseUrl: string;
  /** Whether it is running now (between a kill and the restart it is not). */
  alive(): boolean;
  /** The process holds the projector lease, as far as its own log said last. */
  holdsLease(): boolean;
  /** SIGKILL, and wait until the kernel has reaped it. */
  kill(): Promise<void>;
  /** Start again with the same environment (DATA_DIR, port) and wait until it answers. */
  start(): Promise<void>;
  /** SIGTERM at the end of the run. */
  stop(): Promise<void>;
  /** Log lines at error level or above, for the report. */
  readonly problems: string[];
  /** Calls `listener` with every log line the process writes from now on (across restarts). */
  onLine(listener: (line: string) => void): void;
}

export function serviceProcess(name: string, port: number, env: Readonly<Record<string, string>>): ServiceProcess {
  let child: ChildProcess | undefined;
  let lease = false;
  const problems: string[] = [];
  const listeners: Array<(line: string) => void> = [];
  const baseUrl = `http://127.0.0.1:${port}`;

  const watchLog = (c: ChildProcess): void => {
    if (c.stdout === null) return;
    createInterface({ input: c.stdout }).on('line', (line) => {
      if (line.includes('"projector lease acquired"')) lease = true;
      if (line.includes('"projector lease lost')) lease = false;
      if (/"level":(50|60)/.test(line)) problems.push(`${name}: ${line.slice(0, 400)}`);
      for (const listener of listeners) listener(line);
    });
  };

  const exited = (c: ChildProcess): Promise<void> =>
    c.exitCode !== null || c.signalCode !== null ? Promise.resolve() : new Promise((resolve) => c.once('exit', () => resolve()));

  return {
    name,
    port,
    baseUrl,
    problems,
    onLine: (listener) => listeners.push(listener),
    alive: () => child !== undefined && child.exitCode === null && child.signalCode === null,
    holdsLease: () => lease && child !== undefined && child.exitCode === null,
    async kill() {
      const c = child;
      child = undefined;
      lease = false;
      if (c === undefined) return;
      c.kill('SIGKILL');
      await exited(c);
    },
    async start() {
      const c = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'src', 'main.ts')], {
        cwd: ROOT,
        env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...env, PORT: String(port), HOST: '127.0.0.1' },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      child = c;
      lease = false;
      watchLog(c);
      c.stderr?.on('data', (chunk: Buffer) => problems.push(`${name} stderr: ${chunk.toString().slice(0, 400)}`));
      await waitUntilServing(baseUrl, c);
    },
    async stop() {
      const c = child;
      child = undefined;
      if (c === undefined) return;
      c.kill('SIGTERM');
      const killer = setTimeout(() => c.kill('SIGKILL'), 15_000);
      await exited(c);
      clearTimeout(killer);
    },
  };
}

/** Until GET /health answers 200 (the process is up and its roles started). */
async function waitUntilServing(baseUrl: string, child: ChildProcess): Promise<void> {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`service exited while starting (${child.exitCode ?? child.signalCode})`);
    try {
      const res = await fetch(`${baseUrl}/health`, { signal: AbortSignal.timeout(2000) });
      if (res.status === 200) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`service at ${baseUrl} did not answer within ${READY_TIMEOUT_MS} ms`);
}
