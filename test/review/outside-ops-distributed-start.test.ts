import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { startJongodb, type Jongodb } from '../support/jongodb';
import { freePort } from '../support/ports';
import { startPrivateRedis, type PrivateRedis } from '../support/redis';
import { TEST_SECRETS } from '../support/server';

/**
 * Distributed mode started while a store it needs is not there, seen by an operator.
 *
 * decisions §8: "`GET /health`: no auth, 200 ... while the process lives. `GET /health/ready`:
 * 200 when every dependency answers ..., else 503 with which one is not". The task of an
 * operator whose deployment does not come up is to learn which store is missing. Two ways
 * satisfy it, and either passes here: the process serves health (200) and readiness (503
 * naming the store as not `ok`) while it waits for the store; or it stops (non-zero) with a
 * message on stderr that names the store or its variable, without a stack trace.
 *
 * Today, with EventStoreDB unreachable (MongoDB and Redis up), the process never listens on
 * PORT and never exits: it waits for its projector to catch up, forever, logging gRPC
 * "14 UNAVAILABLE" retries; nothing answers `/health`. With all three unreachable it exits
 * after about 30 s with "Failed to start: connect ECONNREFUSED 127.0.0.1:<port>", naming no
 * store.
 */

const ROOT = join(__dirname, '..', '..');
const STORE_NAMES = /EVENTSTORE_URL|MONGODB_URI|REDIS_URL|EventStore|KurrentDB|MongoDB|Redis/i;
const STACK_FRAME = /\n\s+at .+\(.+:\d+:\d+\)/;

interface ReadyBody {
  readonly checks?: Record<string, { status: string }>;
}

interface Outcome {
  readonly exit?: { code: number | null; stderr: string };
  readonly health?: { status: number; ready: number; readyBody: ReadyBody };
}

async function startDistributed(env: Record<string, string>, deadlineMs: number): Promise<Outcome> {
  const port = await freePort();
  const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'src', 'main.ts')], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', HOST: '127.0.0.1', PORT: String(port), LOG_LEVEL: 'info', STORE_START_TIMEOUT_SECONDS: '5', ...TEST_SECRETS, ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  let exit: { code: number | null } | undefined;
  const exited = new Promise<void>((resolve) =>
    child.once('exit', (code) => {
      exit = { code };
      resolve();
    }),
  );
  try {
    const deadline = Date.now() + deadlineMs;
    while (Date.now() < deadline) {
      if (exit !== undefined) return { exit: { code: exit.code, stderr } };
      try {
        const health = await fetch(`http://127.0.0.1:${port}/api/v1/health`, { signal: AbortSignal.timeout(2000) });
        await health.text();
        const ready = await fetch(`http://127.0.0.1:${port}/api/v1/health/ready`, { signal: AbortSignal.timeout(5000) });
        return { health: { status: health.status, ready: ready.status, readyBody: (await ready.json()) as ReadyBody } };
      } catch {
        // not listening (yet)
      }
      await new Promise((r) => setTimeout(r, 500));
    }
    return {};
  } finally {
    if (exit === undefined) {
      child.kill('SIGKILL');
      await exited;
    }
  }
}

function expectClear(outcome: Outcome, store: string): void {
  if (outcome.exit !== undefined) {
    expect(outcome.exit.code).not.toBe(0);
    expect(outcome.exit.stderr).toMatch(STORE_NAMES);
    expect(outcome.exit.stderr).not.toMatch(STACK_FRAME);
    return;
  }
  // Neither exited nor served health within the deadline: the operator learns nothing.
  expect(outcome.health).toBeDefined();
  expect(outcome.health?.status).toBe(200);
  expect(outcome.health?.ready).toBe(503);
  expect(outcome.health?.readyBody.checks?.[store]?.status).not.toBe('ok');
}

let mongo: Jongodb;
let redis: PrivateRedis;
beforeAll(async () => {
  [mongo, redis] = await Promise.all([startJongodb(), startPrivateRedis()]);
}, 60_000);
afterAll(async () => {
  await Promise.all([mongo?.stop(), redis?.stop()]);
});

test('EventStoreDB unreachable, MongoDB and Redis up: the start fails naming it, or serves health and readiness naming it', async () => {
  const esdbPort = await freePort(); // nothing listens there
  const outcome = await startDistributed(
    { EVENTSTORE_URL: `esdb://127.0.0.1:${esdbPort}?tls=false`, MONGODB_URI: mongo.uri.replace('/test?', '/outside_ops_start?'), REDIS_URL: redis.url },
    60_000,
  );
  expectClear(outcome, 'eventStore');
}, 120_000);

test('all three stores unreachable: the start fails naming one, or serves health and readiness naming them', async () => {
  const [a, b, c] = await Promise.all([freePort(), freePort(), freePort()]);
  const outcome = await startDistributed(
    { EVENTSTORE_URL: `esdb://127.0.0.1:${a}?tls=false`, MONGODB_URI: `mongodb://127.0.0.1:${b}/hhc`, REDIS_URL: `redis://127.0.0.1:${c}` },
    90_000,
  );
  expectClear(outcome, 'readStore');
}, 150_000);
