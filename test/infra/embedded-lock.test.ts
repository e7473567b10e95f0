import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { buildSync } from 'esbuild';
import { EventStoreLockedError, LOCK_FILE_NAME, openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import { acquireLock } from '../../src/infra/eventstore/embedded/lock';

/**
 * One process per data directory (src/infra/eventstore/embedded/lock.ts): a kernel lock on
 * `events.lock` decides, not the pid written in it. Of many simultaneous starters exactly one
 * wins; a holder in another pid namespace (another container on the same volume) is seen; a
 * holder killed with SIGKILL leaves nothing behind, and the next start gets the lock at once.
 */

const ROOT = resolve(__dirname, '../..');
const CONTENDER_SOURCE = join(__dirname, 'fixtures', 'lock-contender.ts');
/** The contender bundled to plain JavaScript once, so that 60 of them start in a moment. */
let contenderScript: string;
/** Each contender in a pid namespace of its own, as in a container; killed with its `unshare`. */
const OWN_PID_NAMESPACE = ['unshare', '--pid', '--fork', '--mount-proc', '--kill-child'];
const pidNamespacesAvailable = spawnSync(OWN_PID_NAMESPACE[0] as string, [...OWN_PID_NAMESPACE.slice(1), 'true']).status === 0;

interface Contender {
  /** The pid it reports (its own, inside its namespace). */
  readonly pid: number;
  readonly process: ChildProcessWithoutNullStreams;
  send(line: string): void;
  /** The next line it writes. */
  next(): Promise<string>;
  /** SIGKILL, and resolves once it (and the process it runs in a namespace) has exited. */
  kill(): Promise<void>;
}

const started: ChildProcessWithoutNullStreams[] = [];
const directories: string[] = [];

async function dataDirectory(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'hhc-lock-'));
  directories.push(dir);
  return dir;
}

async function startContender(dir: string, prefix: readonly string[] = []): Promise<Contender> {
  const command = [...prefix, process.execPath, contenderScript, dir];
  const child = spawn(command[0] as string, command.slice(1), {
    cwd: ROOT,
    env: { ...process.env, NODE_PATH: join(ROOT, 'node_modules') },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  started.push(child);
  const lines: string[] = [];
  const waiting: ((line: string) => void)[] = [];
  let buffered = '';
  let errors = '';
  child.stderr.on('data', (chunk: Buffer) => (errors += chunk.toString()));
  child.stdout.on('data', (chunk: Buffer) => {
    buffered += chunk.toString();
    const complete = buffered.split('\n');
    buffered = complete.pop() ?? '';
    for (const line of complete) {
      const waiter = waiting.shift();
      if (waiter === undefined) lines.push(line);
      else waiter(line);
    }
  });
  const exited = new Promise<void>((done) => child.once('exit', () => done()));
  const next = (): Promise<string> =>
    lines.length > 0
      ? Promise.resolve(lines.shift() as string)
      : Promise.race([
          new Promise<string>((done) => waiting.push(done)),
          exited.then(() => Promise.reject(new Error(`the contender exited: ${errors}`))),
        ]);
  const ready = await next();
  expect(ready).toMatch(/^ready \d+$/);
  return {
    pid: Number.parseInt(ready.split(' ')[1] as string, 10),
    process: child,
    send: (line) => child.stdin.write(`${line}\n`),
    next,
    kill: async () => {
      // With a prefix, the contender is a child of `unshare`, killed by the kernel when it dies.
      const inner = prefix.length > 0 ? childrenOf(child.pid as number) : [];
      child.kill('SIGKILL');
      await exited;
      for (const pid of inner) await gone(pid);
    },
  };
}

beforeAll(async () => {
  const out = await mkdtemp(join(tmpdir(), 'hhc-lock-contender-'));
  directories.push(out);
  contenderScript = join(out, 'lock-contender.js');
  buildSync({ entryPoints: [CONTENDER_SOURCE], bundle: true, platform: 'node', format: 'cjs', outfile: contenderScript, external: ['fs-native-extensions'], logLevel: 'error' });
});

function childrenOf(pid: number): number[] {
  return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8')
    .trim()
    .split(' ')
    .filter((text) => text !== '')
    .map(Number);
}

/**
 * Resolves once the process has exited with all its threads: its files are closed then. (A
 * zombie whose other threads are still exiting may hold them a moment longer; a parent's
 * wait, as a supervisor's, returns only after that.)
 */
async function gone(pid: number): Promise<void> {
  for (;;) {
    let tasks: string[];
    try {
      tasks = readdirSync(`/proc/${pid}/task`);
      if (tasks.length === 1 && /\) [ZX] /.test(readFileSync(`/proc/${pid}/stat`, 'utf8'))) return;
    } catch {
      return;
    }
    await new Promise((done) => setTimeout(done, 10));
  }
}

afterAll(async () => {
  for (const child of started) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  await Promise.all(directories.map((dir) => rm(dir, { recursive: true, force: true })));
});

const ROUNDS = 20;
test(`of 60 processes that start at once, exactly one holds the lock, in every one of ${ROUNDS} rounds`, async () => {
  const dir = await dataDirectory();
  const contenders = await Promise.all(Array.from({ length: 60 }, () => startContender(dir)));
  const winnersPerRound: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    // All of them at one instant, a little after the last one is told.
    const at = Date.now() + 200;
    for (const contender of contenders) contender.send(`go ${at}`);
    const answers = await Promise.all(contenders.map((contender) => contender.next()));
    const winners = contenders.filter((_, i) => answers[i] === 'won');
    winnersPerRound.push(winners.length);
    expect(answers.filter((answer) => answer !== 'won').every((answer) => answer.startsWith('lost Event store in'))).toBe(true);
    for (const winner of winners) winner.send('release');
    await Promise.all(winners.map((winner) => winner.next()));
  }
  expect(winnersPerRound).toEqual(Array.from({ length: ROUNDS }, () => 1));
  await Promise.all(contenders.map((contender) => contender.kill()));
}, 240_000);

(pidNamespacesAvailable ? test : test.skip)('a holder in another pid namespace (another container on the volume) is seen, though both are pid 1', async () => {
  const dir = await dataDirectory();
  const first = await startContender(dir, OWN_PID_NAMESPACE);
  const second = await startContender(dir, OWN_PID_NAMESPACE);
  // The same pid in each namespace: what a pid file would see as "our own, stale" lock.
  expect([first.pid, second.pid]).toEqual([1, 1]);

  first.send('go');
  expect(await first.next()).toBe('won');
  second.send('go');
  const refused = await second.next();
  expect(refused).toMatch(/^lost Event store in .* is already open by process 1 on host /);

  await first.kill();
  second.send('go');
  expect(await second.next()).toBe('won');
  await second.kill();
}, 60_000);

test('the pid in the lock file does not decide: a live holder is seen even when the file names a process that is gone', async () => {
  const dir = await dataDirectory();
  const holder = await startContender(dir);
  holder.send('go');
  expect(await holder.next()).toBe('won');
  // What a holder in another pid namespace looks like from here: a pid with no process (or another one).
  await writeFile(join(dir, LOCK_FILE_NAME), `${await pidOfFinishedProcess()} 1\n`);

  await expect(acquireLock(dir)).rejects.toBeInstanceOf(EventStoreLockedError);
  await expect(openEmbeddedEventStore(dir)).rejects.toBeInstanceOf(EventStoreLockedError);

  await holder.kill();
}, 60_000);

test('the lock of a holder killed with SIGKILL is taken at once by the next start, with no wait', async () => {
  const dir = await dataDirectory();
  const holder = await startContender(dir);
  holder.send('go');
  expect(await holder.next()).toBe('won');
  await expect(acquireLock(dir)).rejects.toBeInstanceOf(EventStoreLockedError);

  await holder.kill();

  // The first attempt after the exit succeeds: no stale lock to judge, no lease to wait out.
  const release = await acquireLock(dir);
  expect(JSON.parse(await readFile(join(dir, LOCK_FILE_NAME), 'utf8'))).toMatchObject({ pid: process.pid });
  await release();
}, 60_000);

test('a lock file left by an earlier version (a pid, maybe ours) is no obstacle when nobody holds the lock', async () => {
  const dir = await dataDirectory();
  await writeFile(join(dir, LOCK_FILE_NAME), `${process.pid} 1\n`);
  const store = await openEmbeddedEventStore(dir);
  expect(await store.headPosition()).toBeNull();
  await store.close();
});

test('closing releases the lock but leaves the file, so every starter locks the same file', async () => {
  const dir = await dataDirectory();
  const store = await openEmbeddedEventStore(dir);
  await expect(acquireLock(dir)).rejects.toThrow(/already open by process \d+ on host .*, since /);
  await store.close();
  await expect(readFile(join(dir, LOCK_FILE_NAME), 'utf8')).resolves.toContain(`"pid":${process.pid}`);
  const again = await acquireLock(dir);
  await again();
});

async function pidOfFinishedProcess(): Promise<number> {
  const child = spawn('true');
  await new Promise((done) => child.once('exit', done));
  return child.pid as number;
}
