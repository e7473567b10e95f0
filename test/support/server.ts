import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';

const ROOT = join(__dirname, '..', '..');

export interface ServerProcess {
  readonly port: number;
  /** The process id, to signal it (e.g. a heap snapshot, test/support/heap-snapshot.ts). */
  readonly pid: number;
  readonly baseUrl: string;
  /** Every line the process wrote to stdout and stderr so far. */
  readonly output: () => string;
  /** SIGTERM and wait: resolves with the exit code. */
  stop(): Promise<number | null>;
  /** SIGKILL: a crash. */
  kill(): Promise<void>;
}

/**
 * Starts the real service (`src/main.ts`) in a child process on port 0 and waits for
 * its "service started" log line. Use it for tests that restart, kill or run several
 * API processes.
 */
/**
 * How long a child process may take to print "service started". Generous on purpose: a
 * start that fails exits (and rejects at once); a slow one is the machine's load (tsx
 * compiling the sources with the other processes of a busy 2-core machine), not a defect.
 */
export const PROCESS_START_TIMEOUT_MS = 120_000;
/** A test or hook that starts such processes: their start and some work of its own. */
export const PROCESS_TEST_TIMEOUT_MS = PROCESS_START_TIMEOUT_MS + 60_000;

export async function startServerProcess(
  env: Record<string, string>,
  timeoutMs = PROCESS_START_TIMEOUT_MS,
  prefix: readonly string[] = [],
  imports: readonly string[] = [],
): Promise<ServerProcess> {
  // `prefix`: a command that runs the service, e.g. `unshare --pid --fork` for a pid namespace of its own.
  // `imports`: modules loaded before the service, e.g. a fault at a point of its own (test/support/faults).
  const command = [...prefix, process.execPath, '--import', 'tsx', ...imports.flatMap((file) => ['--import', file]), join(ROOT, 'src', 'main.ts')];
  const child: ChildProcess = spawn(command[0] as string, command.slice(1), {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', PORT: '0', HOST: '127.0.0.1', LOG_LEVEL: 'info', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  let buffered = '';
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`service did not start in ${timeoutMs} ms:\n${output}`));
    }, timeoutMs);
    child.stdout?.on('data', (chunk: Buffer) => {
      const text = chunk.toString();
      output += text;
      buffered += text;
      const lines = buffered.split('\n');
      buffered = lines.pop() ?? '';
      for (const line of lines) {
        try {
          const entry = JSON.parse(line) as { msg?: string; port?: number | null };
          if (entry.msg === 'service started') {
            clearTimeout(timer);
            resolve(entry.port ?? 0);
          }
        } catch {
          // not a JSON log line
        }
      }
    });
    child.stderr?.on('data', (chunk: Buffer) => {
      output += chunk.toString();
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`service exited with ${String(code)} before starting:\n${output}`));
    });
  });

  const exited = new Promise<number | null>((resolve) => {
    if (child.exitCode !== null) resolve(child.exitCode);
    else child.once('exit', (code) => resolve(code));
  });
  return {
    port,
    pid: child.pid ?? 0,
    baseUrl: `http://127.0.0.1:${port}`,
    output: () => output,
    stop: async () => {
      child.kill('SIGTERM');
      return exited;
    },
    kill: async () => {
      child.kill('SIGKILL');
      await exited;
    },
  };
}

/** Distributed-mode secrets for tests (never used outside them). */
export const TEST_SECRETS = {
  JWT_ACCESS_SECRET: 'test-access-secret-0123456789abcdef0123456789',
  JWT_REFRESH_SECRET: 'test-refresh-secret-0123456789abcdef012345678',
  JWT_DEVICE_SECRET: 'test-device-secret-0123456789abcdef0123456789',
  INTERNAL_API_KEYS: 'test-crm-key-1,test-crm-key-2',
  DATA_KEY_ENCRYPTION_KEY: 'test-data-key-encryption-key-0123456789abcdef',
} as const;
