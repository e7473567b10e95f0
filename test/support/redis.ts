import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createConnection } from 'node:net';
import { freePort } from './ports';

/** The reads Redis has made from its clients' sockets (`INFO stats`): what a batch of commands cost it in system calls. */
export async function readsProcessed(client: { info(section: 'stats'): Promise<string> }): Promise<number> {
  const match = /total_reads_processed:(\d+)/.exec(await client.info('stats'));
  if (match === null) throw new Error('no total_reads_processed in INFO stats');
  return Number(match[1]);
}

export interface PrivateRedis {
  readonly url: string;
  readonly port: number;
  /** SIGKILL: the way a crash looks to clients. */
  kill(): Promise<void>;
  /** Starts it again on the same port (empty: it keeps nothing on disk). */
  restart(): Promise<void>;
  /** SIGSTOP / SIGCONT: connections stay open and nothing is answered, as when Redis stalls. */
  pause(): void;
  resume(): void;
  stop(): Promise<void>;
}

async function waitForPort(port: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const ok = await new Promise<boolean>((resolve) => {
      const socket = createConnection({ port, host: '127.0.0.1' });
      socket.once('connect', () => {
        socket.destroy();
        resolve(true);
      });
      socket.once('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`redis-server did not listen on ${port}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/**
 * A private `redis-server` on a free port, for tests that stop, kill or restart Redis
 * (the machine's shared instance is never disturbed).
 */
export async function startPrivateRedis(): Promise<PrivateRedis> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'hhc-redis-'));
  let child: ChildProcess | undefined;

  const launch = async (): Promise<void> => {
    child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], {
      stdio: 'ignore',
    });
    const started = child;
    await Promise.race([
      waitForPort(port, 10_000),
      new Promise<never>((_, reject) => started.once('error', (e) => reject(new Error(`cannot start redis-server: ${e.message}`)))),
    ]);
  };

  const terminate = async (signal: NodeJS.Signals): Promise<void> => {
    const c = child;
    child = undefined;
    if (c === undefined || c.exitCode !== null || c.signalCode !== null) return;
    await new Promise<void>((resolve) => {
      c.once('exit', () => resolve());
      c.kill(signal);
    });
  };

  await launch();
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    kill: () => terminate('SIGKILL'),
    pause: () => {
      child?.kill('SIGSTOP');
    },
    resume: () => {
      child?.kill('SIGCONT');
    },
    restart: async () => {
      await terminate('SIGKILL');
      await launch();
    },
    stop: async () => {
      await terminate('SIGTERM');
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
