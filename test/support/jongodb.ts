import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { dirname, join } from 'node:path';

/**
 * jongodb: a MongoDB-wire-compatible server in one native executable, the stand-in for
 * MongoDB on machines where none can be installed. In memory only; it implements a subset
 * of MongoDB, and the Mongo read store uses nothing outside it.
 */
export interface Jongodb {
  readonly uri: string;
  stop(): Promise<void>;
}

const PACKAGE = '@jongodb/memory-server-bin-linux-x64-gnu';
const START_TIMEOUT_MS = 15_000;
const STOP_TIMEOUT_MS = 5_000;

export interface JongodbOptions {
  /**
   * false: a standalone server, which a client reaches through a proxy with
   * `directConnection=true` (a replica-set member sends clients to its own address). Default true.
   */
  readonly replicaSet?: boolean;
}

export async function startJongodb(options: JongodbOptions = {}): Promise<Jongodb> {
  const binary = locateBinary();
  const topology = options.replicaSet === false ? [] : ['--topology-profile=singleNodeReplicaSet', '--replica-set-name=rs0'];
  const child = spawn(binary, ['--host=127.0.0.1', '--port=0', ...topology], { stdio: ['ignore', 'pipe', 'pipe'] });
  // Should the test process end without stop(), do not leave the server behind.
  const killOnExit = (): void => {
    child.kill('SIGKILL');
  };
  process.once('exit', killOnExit);

  let uri: string;
  try {
    uri = await readUri(child);
  } catch (error) {
    process.removeListener('exit', killOnExit);
    await terminate(child);
    throw error;
  }
  return {
    uri: withPollingMonitor(uri),
    stop: async () => {
      process.removeListener('exit', killOnExit);
      await terminate(child);
    },
  };
}

/**
 * jongodb answers the driver's awaitable `hello` (the streaming server-monitoring protocol
 * of `serverMonitoringMode: 'auto'`, MongoDB 4.4+) at once and without `moreToCome`, so
 * the driver's exhaust loop ends with "Server ended moreToCome unexpectedly" about once a
 * second; the driver then marks the server unknown and clears its connection pool, and the
 * operations waiting for a connection fail with `MongoPoolClearedError`. Polling monitoring
 * (a plain `hello` every `heartbeatFrequencyMS`) is what it does answer correctly, so the
 * URI handed out says so, and every client built from it (the service's, the tests') polls.
 * A real MongoDB keeps the driver's default (`auto`: streaming).
 */
export function withPollingMonitor(uri: string): string {
  if (/[?&]serverMonitoringMode=/.test(uri)) return uri;
  return `${uri}${uri.includes('?') ? '&' : '?'}serverMonitoringMode=poll`;
}

function locateBinary(): string {
  const unavailable = (detail: string): Error =>
    new Error(
      `jongodb is not available (${detail}). It ships as the optional dependency ${PACKAGE}, ` +
        `which exists for linux-x64 with glibc only (this is ${process.platform}-${process.arch}). ` +
        'Elsewhere set MONGODB_URI to a real MongoDB server (e.g. `docker compose up mongodb`).',
    );
  let packageJson: string;
  try {
    packageJson = require.resolve(`${PACKAGE}/package.json`);
  } catch {
    throw unavailable(`package ${PACKAGE} is not installed`);
  }
  const binary = join(dirname(packageJson), 'bin', 'jongodb');
  try {
    accessSync(binary, constants.X_OK);
  } catch {
    throw unavailable(`${binary} is missing or not executable`);
  }
  return binary;
}

function readUri(child: ChildProcess): Promise<string> {
  return new Promise((resolve, reject) => {
    let stdout = '';
    let stderr = '';
    const cleanup = (): void => {
      clearTimeout(timer);
      child.stdout?.removeListener('data', onStdout);
      child.removeListener('error', onError);
      child.removeListener('exit', onExit);
      // Keep draining the pipes so the server never blocks on a full one.
      child.stdout?.resume();
      child.stderr?.resume();
    };
    const fail = (message: string): void => {
      cleanup();
      const tail = stderr.trim().slice(-2000);
      reject(new Error(tail.length > 0 ? `${message}; stderr:\n${tail}` : message));
    };
    const onStdout = (chunk: Buffer): void => {
      stdout += chunk.toString('utf8');
      // Wait for the end of the line: a chunk may end in the middle of the URI.
      const match = /^JONGODB_URI=(mongodb:\/\/\S+)\r?\n/m.exec(stdout);
      if (match?.[1] !== undefined) {
        cleanup();
        resolve(match[1]);
      }
    };
    const onStderr = (chunk: Buffer): void => {
      stderr = (stderr + chunk.toString('utf8')).slice(-8000);
    };
    const onError = (error: Error): void => fail(`jongodb could not be started: ${error.message}`);
    const onExit = (code: number | null, signal: NodeJS.Signals | null): void =>
      fail(`jongodb exited before printing its URI (code ${String(code)}, signal ${String(signal)})`);
    const timer = setTimeout(() => fail(`jongodb printed no URI within ${START_TIMEOUT_MS} ms`), START_TIMEOUT_MS);
    child.stdout?.on('data', onStdout);
    child.stderr?.on('data', onStderr);
    child.once('error', onError);
    child.once('exit', onExit);
  });
}

async function terminate(child: ChildProcess): Promise<void> {
  // No pid: the spawn itself failed, so there is nothing to stop.
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(true), STOP_TIMEOUT_MS);
  });
  const stuck = await Promise.race([exited.then(() => false), timedOut]);
  clearTimeout(timer);
  if (stuck) {
    child.kill('SIGKILL');
    await exited;
  }
}
