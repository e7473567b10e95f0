import { spawn } from 'node:child_process';
import { Socket } from 'node:net';
import path from 'node:path';
import { createInterface } from 'node:readline';

export interface EsdbStandin {
  /** `esdb://127.0.0.1:<port>?tls=false` */
  readonly url: string;
  readonly port: number;
  /** SIGTERM, then waits for the process to exit (SIGKILL after a grace period). */
  readonly stop: () => Promise<void>;
}

export interface EsdbStandinOptions {
  /** How often the stand-in writes a `$statsCollected` system event; 0 disables. Default 2000. */
  readonly statsIntervalMs?: number;
  /** false: behave like servers before 23.10, which never send CaughtUp. Default true. */
  readonly sendsCaughtUp?: boolean;
  readonly startTimeoutMs?: number;
}

const SERVER_PATH = path.join(__dirname, 'server.ts');
const PROJECT_ROOT = path.resolve(__dirname, '..', '..', '..');
const PORT_LINE = /^ESDB_STANDIN_PORT=(\d+)$/;

/** Starts the EventStoreDB stand-in (server.ts) as a child process on a free port. */
export async function startEsdbStandin(options: EsdbStandinOptions = {}): Promise<EsdbStandin> {
  const args = ['--import', 'tsx', SERVER_PATH, '--port=0', '--exit-with-stdin'];
  if (options.statsIntervalMs !== undefined) args.push(`--stats-interval-ms=${options.statsIntervalMs}`);
  if (options.sendsCaughtUp === false) args.push('--no-caught-up');
  const child = spawn(process.execPath, args, { cwd: PROJECT_ROOT, stdio: ['pipe', 'pipe', 'pipe'] });

  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  let stderr = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (chunk: string) => {
    stderr = (stderr + chunk).slice(-4000);
  });

  const port = await new Promise<number>((resolve, reject) => {
    const lines = createInterface({ input: child.stdout });
    const timer = setTimeout(() => {
      fail(new Error(`EventStoreDB stand-in did not start within ${options.startTimeoutMs ?? 20000} ms\n${stderr}`));
    }, options.startTimeoutMs ?? 20000);
    const onExit = (code: number | null, signal: NodeJS.Signals | null): void => {
      fail(new Error(`EventStoreDB stand-in exited (${signal ?? code}) before listening\n${stderr}`));
    };
    const onError = (error: Error): void => fail(error);
    function cleanup(): void {
      clearTimeout(timer);
      child.off('exit', onExit);
      child.off('error', onError);
    }
    function fail(error: Error): void {
      cleanup();
      lines.close();
      child.kill('SIGKILL');
      reject(error);
    }
    child.once('exit', onExit);
    child.once('error', onError);
    lines.on('line', (line) => {
      const match = PORT_LINE.exec(line.trim());
      if (match?.[1] === undefined) return;
      cleanup();
      // Keep draining stdout so the child never blocks on a full pipe.
      lines.removeAllListeners('line');
      child.stdout.resume();
      // A forgotten stop() must not keep the test process alive; the child exits when its
      // stdin closes with us.
      child.unref();
      for (const pipe of [child.stdin, child.stdout, child.stderr]) if (pipe instanceof Socket) pipe.unref();
      resolve(Number(match[1]));
    });
  });

  let stopping: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopping ??= (async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.ref();
      child.kill('SIGTERM');
      const killer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(killer);
      child.stdin.destroy();
    })();
    return stopping;
  };

  return { url: `esdb://127.0.0.1:${port}?tls=false`, port, stop };
}
