/**
 * `npm run bench:login`: logins per second and their latency through the real service
 * (embedded mode, started in this process with every role, as `npm start` would), next to
 * the raw argon2id verification rate of the same parameters and binding measured in the same
 * run at the same concurrency (the password hasher's semaphore slots), then the p99 at an
 * offered load of half that raw rate, open loop. Last, the argon2id bindings that are
 * installed, compared at the same parameters (bench/argon2-bindings.ts).
 *
 * Users get their password the way a real user does: the CRM creates them
 * (POST /auth/sync-customer), then each asks for a reset, the mail goes to a local SMTP
 * server (test/support/smtp.ts) and the token from it sets the password
 * (POST /auth/password-reset/confirm): the hash in the credential store is the one the
 * service wrote itself.
 *
 * Bounded: BENCH_LOGIN_USERS users (64); BENCH_ROUNDS (2) rounds of BENCH_SECONDS (10) of
 * saturated load on BENCH_CONNECTIONS keep-alive connections (16), each between two raw
 * measurements of BENCH_RAW_SECONDS (5), so that load from elsewhere on the machine weighs on
 * both sides of the ratio; BENCH_OPEN_SECONDS of open-loop load (20) at BENCH_OPEN_FRACTION
 * (0.5) of the raw rate. Load generators run in child processes
 * (bench/http-load.ts closed loop, bench/http-open-load.ts open loop), all on 127.0.0.1.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ARGON2_OPTIONS, createPasswordHasher, defaultHashConcurrency } from '../src/auth/passwords';
import { createAccount, type Account } from '../test/support/accounts';
import { startTestService } from '../test/support/harness';
import { startTestSmtpServer } from '../test/support/smtp';
import { BINDING_NAMES, loadBinding, type Binding } from './argon2-bindings';
import type { LoadJob, LoadRequest, LoadResult } from './http-load';
import { runInChild, type OpenLoadJob, type OpenLoadResult } from './http-open-load';
import { profiled } from './profile';

const USERS = Number(process.env.BENCH_LOGIN_USERS ?? 64);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 16);
const SATURATED_MS = Number(process.env.BENCH_SECONDS ?? 10) * 1000;
const OPEN_MS = Number(process.env.BENCH_OPEN_SECONDS ?? 20) * 1000;
const RAW_MS = Number(process.env.BENCH_RAW_SECONDS ?? 5) * 1000;
/** Saturated measurements, each between two raw ones. */
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);
/** The open loop's offered load as a fraction of the raw rate. */
const OPEN_FRACTION = Number(process.env.BENCH_OPEN_FRACTION ?? 0.5);
/** A directory: write CPU profiles of this process (the service's event loop) for the saturated and the open-loop phases. */
const PROFILE_DIR = process.env.BENCH_PROFILE;
/** Set to 0 to skip the comparison of bindings. */
const COMPARE_BINDINGS = process.env.BENCH_BINDINGS !== '0';
const LOGIN_PATH = '/api/v1/auth/login';

function log(message: string): void {
  process.stdout.write(`${new Date().toISOString().slice(11, 19)} ${message}\n`);
}

interface RateResult {
  readonly perSecond: number;
  readonly count: number;
  readonly p50: number;
  readonly p99: number;
  /** CPU time of this whole process (every thread) per verification. */
  readonly cpuMs: number;
  readonly usage: string;
}

/** CPU time of this process's main thread (the event loop) in ms, from /proc on Linux (0 elsewhere). */
function mainThreadCpuMs(): number {
  try {
    const stat = readFileSync(`/proc/self/task/${process.pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // utime and stime, fields 14 and 15 of the line (11 and 12 after the name), in clock ticks of 10 ms.
    return (Number(fields[11]) + Number(fields[12])) * 10;
  } catch {
    return 0;
  }
}

interface Usage {
  readonly resources: NodeJS.ResourceUsage;
  readonly mainThreadMs: number;
}

function usageNow(): Usage {
  return { resources: process.resourceUsage(), mainThreadMs: mainThreadCpuMs() };
}

/** What this process spent per operation: CPU (all threads, and the event loop's), page faults, context switches. */
function usagePer(start: Usage, count: number): string {
  const after = process.resourceUsage();
  const before = start.resources;
  const per = (n: number): string => (n / Math.max(1, count)).toFixed(1);
  return (
    `per op: user ${per((after.userCPUTime - before.userCPUTime) / 1000)} ms, system ${per((after.systemCPUTime - before.systemCPUTime) / 1000)} ms ` +
    `(event loop thread ${per(mainThreadCpuMs() - start.mainThreadMs)} ms), ` +
    `minor faults ${per(after.minorPageFault - before.minorPageFault)}, voluntary switches ${per(after.voluntaryContextSwitches - before.voluntaryContextSwitches)}, ` +
    `involuntary ${per(after.involuntaryContextSwitches - before.involuntaryContextSwitches)}, fs writes ${per(after.fsWrite - before.fsWrite)}`
  );
}

function mean(values: readonly number[]): number {
  return values.reduce((sum, v) => sum + v, 0) / Math.max(1, values.length);
}

function percentileOf(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;
}

/** Closed loop: `concurrency` callers verifying back to back for `durationMs`, after a 1 s warm-up. */
async function verifyRate(verify: () => Promise<boolean>, concurrency: number, durationMs: number): Promise<RateResult> {
  const run = async (ms: number): Promise<number[]> => {
    const latencies: number[] = [];
    const end = performance.now() + ms;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (performance.now() < end) {
          const started = performance.now();
          if (!(await verify())) throw new Error('a correct password did not verify');
          latencies.push(performance.now() - started);
        }
      }),
    );
    return latencies;
  };
  await run(1000);
  const started = performance.now();
  const cpuBefore = process.cpuUsage();
  const usageBefore = usageNow();
  const latencies = await run(durationMs);
  const cpu = process.cpuUsage(cpuBefore);
  const usage = usagePer(usageBefore, latencies.length);
  const elapsed = performance.now() - started;
  latencies.sort((a, b) => a - b);
  return {
    perSecond: (latencies.length / elapsed) * 1000,
    count: latencies.length,
    p50: percentileOf(latencies, 50),
    p99: percentileOf(latencies, 99),
    cpuMs: (cpu.user + cpu.system) / 1000 / Math.max(1, latencies.length),
    usage,
  };
}

/** The raw rate of the service's own hasher (binding, parameters, semaphore), without HTTP or anything else. */
async function rawRate(slots: number): Promise<RateResult> {
  const hasher = createPasswordHasher({ concurrency: slots });
  const password = 'raw-verify-Secret!1';
  const hash = await hasher.hash(password);
  return verifyRate(() => hasher.verify(hash, password), slots, RAW_MS);
}

function summary(r: LoadResult): string {
  const l = r.latencyMs;
  const statuses = Object.entries(r.statuses)
    .map(([s, n]) => `${s}×${n}`)
    .join(' ');
  return `${r.perSecond.toFixed(1)} logins/s over ${r.requests}; p50 ${l.p50.toFixed(1)} ms, p90 ${l.p90.toFixed(1)} ms, p99 ${l.p99.toFixed(1)} ms, max ${l.max.toFixed(1)} ms; ${statuses}`;
}

function rawSummary(r: RateResult): string {
  return `${r.perSecond.toFixed(1)} verifications/s (${r.count}), p50 ${r.p50.toFixed(1)} ms, p99 ${r.p99.toFixed(1)} ms; ${r.usage}`;
}

async function createAccounts(service: Parameters<typeof createAccount>[0], smtp: Parameters<typeof createAccount>[1]): Promise<Account[]> {
  const accounts: Account[] = new Array<Account>(USERS);
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let i = next++; i < USERS; i = next++) {
      accounts[i] = await createAccount(service, smtp, { email: `bench.login.${i}@example.com`, password: `bench-${i}-correct horse battery` });
    }
  };
  await Promise.all(Array.from({ length: 4 }, worker));
  return accounts;
}

interface BindingRow {
  readonly binding: Binding;
  readonly concurrency: number;
  readonly rounds: RateResult[];
  /** Verifies the hashes every other binding made (PHC strings as each writes them). */
  readonly verifiesOthers: boolean;
}

async function compareBindings(slots: number): Promise<BindingRow[]> {
  const bindings: Binding[] = [];
  for (const name of BINDING_NAMES) {
    const binding = await loadBinding(name);
    if (binding === null) log(`bindings: ${name} is not installed, skipped`);
    else bindings.push(binding);
  }
  const password = 'compare-Secret!1';
  const hashes = new Map<string, string>();
  for (const binding of bindings) hashes.set(binding.name, await binding.hash(password));
  for (const [name, hash] of hashes) log(`bindings: ${name} writes ${hash.replace(/\$[^$]+\$[^$]+$/, '$<salt>$<hash>')}`);
  const rows: BindingRow[] = [];
  for (const binding of bindings) {
    let verifiesOthers = true;
    for (const [name, hash] of hashes) {
      if (name !== binding.name && !(await binding.verify(hash, password))) verifiesOthers = false;
      if (name !== binding.name && (await binding.verify(hash, `${password}x`))) verifiesOthers = false;
    }
    // A binding that computes on the event loop runs one at a time whatever the concurrency.
    rows.push({ binding, concurrency: binding.blocksEventLoop ? 1 : slots, rounds: [], verifiesOthers });
  }
  const own = (row: BindingRow): string => hashes.get(row.binding.name) as string;
  for (let round = 0; round < 2; round++) {
    const order = round % 2 === 0 ? rows : [...rows].reverse();
    for (const row of order) {
      const result = await verifyRate(() => row.binding.verify(own(row), password), row.concurrency, RAW_MS);
      row.rounds.push(result);
      log(`bindings: ${row.binding.name} ${row.binding.version} at concurrency ${row.concurrency}: ${rawSummary(result)}`);
    }
  }
  return rows;
}

interface SaturatedRound {
  readonly result: LoadResult;
  /** The raw rate measured just before and just after it. */
  readonly raw: readonly [RateResult, RateResult];
  readonly cpuMsPerLogin: number;
  readonly eventLoopMsPerLogin: number;
}

async function main(): Promise<void> {
  const slots = defaultHashConcurrency();
  const { memoryCost, timeCost, parallelism } = ARGON2_OPTIONS;
  log(
    `login bench: argon2id m=${memoryCost} KiB t=${timeCost} p=${parallelism}, ${slots} hasher slots, ${USERS} users, ` +
      `${ROUNDS} × (${CONNECTIONS} connections × ${SATURATED_MS / 1000} s saturated) between raw measurements, ${OPEN_MS / 1000} s open loop`,
  );

  const raws: RateResult[] = [await rawRate(slots)];
  log(`raw verify: ${rawSummary(raws[0] as RateResult)}`);

  const smtp = await startTestSmtpServer();
  const service = await startTestService('embedded', { SMTP_URL: smtp.url, LOG_LEVEL: 'warn' });
  const rounds: SaturatedRound[] = [];
  let open: OpenLoadResult;
  try {
    const setupStarted = Date.now();
    const accounts = await createAccounts(service, smtp);
    log(`${USERS} users created and their passwords set through sync-customer and the reset flow in ${((Date.now() - setupStarted) / 1000).toFixed(1)} s`);

    const port = Number(new URL(service.baseUrl).port);
    const requests = accounts.map((a): LoadRequest => ({ path: LOGIN_PATH, body: JSON.stringify({ email: a.email, password: a.password }) }));
    const closed = (mode: LoadJob['mode'], durationMs: number): Promise<LoadResult> =>
      runInChild<LoadJob, LoadResult>(join(__dirname, 'http-load.ts'), { port, requests, body: '', connections: CONNECTIONS, mode, durationMs, maxRequests: 1_000_000 });

    const warm = await closed('pass', 60_000);
    log(`warm-up, one login per user: ${summary(warm)}`);
    for (let round = 0; round < ROUNDS; round++) {
      const usageBefore = usageNow();
      const result = await profiled(PROFILE_DIR, `login-saturated-${round + 1}`, () => closed('sustained', SATURATED_MS));
      const cpu = process.resourceUsage();
      const per = (n: number): number => n / Math.max(1, result.requests);
      const cpuMsPerLogin = per((cpu.userCPUTime - usageBefore.resources.userCPUTime + cpu.systemCPUTime - usageBefore.resources.systemCPUTime) / 1000);
      const eventLoopMsPerLogin = per(mainThreadCpuMs() - usageBefore.mainThreadMs);
      log(`saturated ${round + 1} (${CONNECTIONS} connections, closed loop): ${summary(result)}; service process ${usagePer(usageBefore, result.requests)}`);
      const before = raws[raws.length - 1] as RateResult;
      const after = await rawRate(slots);
      raws.push(after);
      log(`raw verify: ${rawSummary(after)}`);
      rounds.push({ result, raw: [before, after], cpuMsPerLogin, eventLoopMsPerLogin });
    }

    const rate = mean(raws.map((r) => r.perSecond)) * OPEN_FRACTION;
    open = await profiled(PROFILE_DIR, 'login-open', () =>
      runInChild<OpenLoadJob, OpenLoadResult>(join(__dirname, 'http-open-load.ts'), {
        port,
        requests,
        body: '',
        ratePerSecond: rate,
        durationMs: OPEN_MS,
        initialConnections: 8,
        maxConnections: 256,
        seed: 8,
        drainTimeoutMs: 30_000,
      }),
    );
    log(
      `open loop at ${rate.toFixed(1)}/s offered (Poisson, ${open.offered} arrivals): ${summary(open)}; ` +
        `${open.unanswered} unanswered, ${open.connectionsUsed} connections, client send lag p99 ${open.sendLagMs.p99.toFixed(1)} ms`,
    );
  } finally {
    await service.stop();
    await smtp.stop();
  }

  const bindings = COMPARE_BINDINGS ? await compareBindings(slots) : [];

  const ok = (r: LoadResult): boolean => Object.keys(r.statuses).every((s) => s === '201');
  const ms = (n: number): string => n.toFixed(1);
  process.stdout.write(
    '\n| round | raw verify/s (before, after) | logins/s saturated | % of raw | saturated p50 / p99 ms | CPU ms per verify (raw) / per login (event loop) | all 201 |\n' +
      '| --- | ---: | ---: | ---: | ---: | ---: | --- |\n',
  );
  for (const [i, r] of rounds.entries()) {
    const raw = mean(r.raw.map((x) => x.perSecond));
    process.stdout.write(
      `| ${i + 1} | ${ms(raw)} (${r.raw.map((x) => ms(x.perSecond)).join(', ')}) | ${ms(r.result.perSecond)} | ${Math.round((100 * r.result.perSecond) / raw)} % | ` +
        `${ms(r.result.latencyMs.p50)} / ${ms(r.result.latencyMs.p99)} | ${ms(mean(r.raw.map((x) => x.cpuMs)))} / ${ms(r.cpuMsPerLogin)} (${ms(r.eventLoopMsPerLogin)}) | ${ok(r.result) ? 'yes' : 'NO'} |\n`,
    );
  }
  const allRaw = mean(raws.map((r) => r.perSecond));
  const allLogins = mean(rounds.map((r) => r.result.perSecond));
  process.stdout.write(`| all | ${ms(allRaw)} | ${ms(allLogins)} | ${Math.round((100 * allLogins) / allRaw)} % | | | |\n`);
  process.stdout.write(
    '\n| open loop: offered/s (half the raw rate) | answered/s | p50 / p90 / p99 / max ms | unanswered | all 201 |\n| ---: | ---: | ---: | ---: | --- |\n' +
      `| ${ms(open.offeredPerSecond)} | ${ms(open.perSecond)} | ${ms(open.latencyMs.p50)} / ${ms(open.latencyMs.p90)} / ${ms(open.latencyMs.p99)} / ${ms(open.latencyMs.max)} | ${open.unanswered} | ${ok(open) ? 'yes' : 'NO'} |\n`,
  );
  if (bindings.length > 0) {
    process.stdout.write(
      '\n| binding | version | concurrency | verify/s (rounds) | p50 ms | verifies the others\' hashes |\n| --- | --- | ---: | ---: | ---: | --- |\n',
    );
    for (const row of bindings) {
      const mean = row.rounds.reduce((sum, r) => sum + r.perSecond, 0) / row.rounds.length;
      const p50 = row.rounds.reduce((sum, r) => sum + r.p50, 0) / row.rounds.length;
      process.stdout.write(
        `| ${row.binding.name} | ${row.binding.version} | ${row.concurrency}${row.binding.blocksEventLoop ? ' (event loop)' : ''} | ` +
          `${mean.toFixed(1)} (${row.rounds.map((r) => r.perSecond.toFixed(1)).join(', ')}) | ${p50.toFixed(1)} | ${row.verifiesOthers ? 'yes' : 'NO'} |\n`,
      );
    }
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`bench failed: ${error instanceof Error ? error.stack : String(error)}\n`);
    process.exit(1);
  },
);
