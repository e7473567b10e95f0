/**
 * A fleet on the two clients, for operators load-testing their own deployment:
 *
 *   npm run simulate -- --hubs N --apps M --url URL --email E --password P --duration S
 *     [--heartbeat-seconds 60] [--ping-ms 1000] [--concurrency 20] [--json]
 *
 * Registers N hubs on the account (raise MAX_DEVICES_PER_USER and the register limit of the
 * service for large N), runs them with the hub client (heartbeats, renewal, the tunnel,
 * answering every `ping` with a `pong`), and M app sessions of the account (logins: raise the
 * login limit for large M) subscribed to every hub, each sending a ping to a random hub every
 * --ping-ms and timing the reply. A progress line every second; at the end a summary:
 * heartbeats per second, relay round trip p50/p99, reconnects, refusals by code, errors.
 * Exits 1 when something failed that the clients could not ride out (a hub or a session
 * stopped for good, a request that failed other than by a refusal the clients obeyed, a
 * ping answered by nobody); 2 on bad arguments.
 */
import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';
import { ApiError, AppClient, type AppTunnel } from '@home-hub-cloud/app-client';
import { agentFetch, HubClient } from '@home-hub-cloud/hub-client';
import type { MessageFromDevice } from '@home-hub-cloud/tunnel-contract';

interface Options {
  readonly hubs: number;
  readonly apps: number;
  readonly url: string;
  readonly email: string;
  readonly password: string;
  readonly durationSeconds: number;
  readonly heartbeatSeconds: number;
  readonly pingMs: number;
  readonly concurrency: number;
  readonly json: boolean;
}

function usage(problem: string): never {
  process.stderr.write(`${problem}\nusage: npm run simulate -- --hubs N --apps M --url URL --email E --password P --duration S [--heartbeat-seconds 60] [--ping-ms 1000] [--concurrency 20] [--json]\n`);
  process.exit(2);
}

function parse(argv: string[]): Options {
  const { values } = parseArgs({
    args: argv,
    options: {
      hubs: { type: 'string' },
      apps: { type: 'string' },
      url: { type: 'string' },
      email: { type: 'string' },
      password: { type: 'string' },
      duration: { type: 'string' },
      'heartbeat-seconds': { type: 'string' },
      'ping-ms': { type: 'string' },
      concurrency: { type: 'string' },
      json: { type: 'boolean' },
    },
    strict: true,
  });
  const count = (name: string, value: string | undefined, fallback?: number, min = 0): number => {
    if (value === undefined) {
      if (fallback === undefined) usage(`--${name} is required`);
      return fallback;
    }
    const n = Number(value);
    if (!Number.isFinite(n) || n < min) usage(`--${name} must be a number of at least ${min}`);
    return n;
  };
  if (values.url === undefined || values.email === undefined || values.password === undefined) usage('--url, --email and --password are required');
  return {
    hubs: count('hubs', values.hubs, undefined, 1),
    apps: count('apps', values.apps, undefined, 0),
    url: values.url.replace(/\/+$/, ''),
    email: values.email,
    password: values.password,
    durationSeconds: count('duration', values.duration, undefined, 1),
    heartbeatSeconds: count('heartbeat-seconds', values['heartbeat-seconds'], 60, 0.1),
    pingMs: count('ping-ms', values['ping-ms'], 1000, 10),
    concurrency: count('concurrency', values.concurrency, 20, 1),
    json: values.json === true,
  };
}

class Figures {
  heartbeats = 0;
  heartbeatsAtLastLine = 0;
  reconnects = 0;
  readonly refusals = new Map<string, number>();
  readonly errors = new Map<string, number>();
  /** Errors a client rode out (a heartbeat or renewal that failed, then went through): reported, not failures. */
  readonly riddenOut = new Map<string, number>();
  readonly rtts: number[] = [];
  pings = 0;
  undelivered = 0;

  refuse(code: string): void {
    this.refusals.set(code, (this.refusals.get(code) ?? 0) + 1);
  }
  rodeOut(what: string): void {
    this.riddenOut.set(what, (this.riddenOut.get(what) ?? 0) + 1);
  }
  fail(what: string): void {
    this.errors.set(what, (this.errors.get(what) ?? 0) + 1);
  }
  errorCount(): number {
    return [...this.errors.values()].reduce((a, b) => a + b, 0);
  }
}

function percentile(sorted: readonly number[], p: number): number | null {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? null;
}

/** Runs `work` over `items` with at most `limit` at a time. */
async function pool<T, R>(items: readonly T[], limit: number, work: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const results: R[] = new Array<R>(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        results[i] = await work(items[i] as T, i);
      }
    }),
  );
  return results;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** A request refused with 429 is retried after its retryAfter (counted as a refusal); anything else fails. */
async function withRetry<T>(figures: Figures, what: string, deadline: number, attempt: () => Promise<{ status: number; retryAfter?: number; value?: T; message?: string }>): Promise<T> {
  for (;;) {
    const answer = await attempt();
    if (answer.value !== undefined) return answer.value;
    if (answer.status === 429 && Date.now() + (answer.retryAfter ?? 10) * 1000 < deadline) {
      figures.refuse(`HTTP 429 (${what})`);
      await sleep((answer.retryAfter ?? 10) * 1000 + Math.random() * 1000);
      continue;
    }
    throw new Error(`${what} answered ${answer.status}${answer.message !== undefined ? `: ${answer.message}` : ''}`);
  }
}

async function login(options: Options, figures: Figures, deadline: number): Promise<AppClient> {
  const client = new AppClient({ baseUrl: options.url });
  await withRetry(figures, 'login', deadline, async () => {
    try {
      await client.login(options.email, options.password);
      return { status: 201, value: true };
    } catch (error) {
      if (error instanceof ApiError) return { status: error.status, retryAfter: error.retryAfter, message: error.message };
      throw error;
    }
  });
  return client;
}

export async function simulate(options: Options, out: NodeJS.WritableStream = process.stdout): Promise<number> {
  const figures = new Figures();
  const started = Date.now();
  const setupDeadline = started + Math.max(60_000, options.durationSeconds * 1000);
  const hubs: HubClient[] = [];
  /** Per hub, its heartbeat and renewal errors not yet followed by a success: failures if the run ends on them. */
  const unresolved: string[][] = [];
  const tunnels: AppTunnel[] = [];
  let stopping = false;
  const tty = (out as { isTTY?: boolean }).isTTY === true;

  // 1. The account; its hubs registered and given their tokens.
  const owner = await login(options, figures, setupDeadline);
  const registered = await pool(Array.from({ length: options.hubs }, (_, i) => i), options.concurrency, async (i) => {
    const uuid = randomUUID();
    await withRetry(figures, 'register', setupDeadline, async () => {
      const { data, error, response } = await owner.api.POST('/devices/register', { body: { uuid, deviceId: `SIM-${i + 1}`, name: `Simulated hub ${i + 1}` } });
      const body = error as { message?: unknown; retryAfter?: number } | undefined;
      return { status: response.status, value: data === undefined ? undefined : true, retryAfter: body?.retryAfter, message: String(body?.message) };
    });
    const token = await withRetry(figures, 'device token', setupDeadline, async () => {
      const { data, error, response } = await owner.api.POST('/devices/auth/{uuid}', { params: { path: { uuid } } });
      const body = error as { message?: unknown; retryAfter?: number } | undefined;
      return { status: response.status, value: data?.token, retryAfter: body?.retryAfter, message: String(body?.message) };
    });
    return { uuid, token };
  });
  out.write(`registered ${registered.length} hubs on ${options.email}\n`);

  // 2. The hubs, their HTTP through one keep-alive agent (`agentFetch`: the global fetch costs
  // many hubs in one process several times the CPU, and keeps a connection per waiting request).
  const http = agentFetch();
  for (const { uuid, token } of registered) {
    let current = token;
    const hub = new HubClient({ baseUrl: options.url, uuid, tokens: { load: () => current, save: (t) => void (current = t) }, heartbeatIntervalMs: options.heartbeatSeconds * 1000, fetch: http });
    hub.onMessage((message, reply) => {
      if (message.type === 'ping') void reply({ type: 'pong', payload: message.payload });
    });
    const pendingErrors: string[] = [];
    unresolved.push(pendingErrors);
    hub.on((event) => {
      if ((event.type === 'heartbeat' && event.ok) || event.type === 'renewed') {
        if (event.type === 'heartbeat') figures.heartbeats++;
        for (const what of pendingErrors.splice(0)) figures.rodeOut(what);
      } else if (event.type === 'reconnecting') figures.reconnects++;
      else if (event.type === 'refused') figures.refuse(event.code);
      else if (event.type === 'error' && (event.where === 'heartbeat' || event.where === 'renew')) pendingErrors.push(`hub ${event.where}: ${event.message}`);
      else if (event.type === 'error' && event.where !== 'tunnel') figures.fail(`hub ${event.where}: ${event.message}`);
      else if (event.type === 'stopped' && !stopping) figures.fail(`hub stopped: ${event.reason}`);
    });
    hubs.push(hub);
  }
  await pool(hubs, options.concurrency * 5, (hub) => hub.start());

  // 3. The apps: one session each, subscribed to every hub, pinging a random hub.
  const pending = new Map<string, number>();
  const sessions = await pool(Array.from({ length: options.apps }, (_, i) => i), options.concurrency, () => login(options, figures, setupDeadline));
  for (const session of sessions) {
    const tunnel = session.tunnel();
    tunnel.on((event) => {
      if (event.type === 'reconnecting') figures.reconnects++;
      else if (event.type === 'refused') figures.refuse(event.code);
      else if (event.type === 'closed' && event.reason !== 'closed') figures.fail(`app session ended: ${event.message}`);
    });
    tunnel.onMessage((message: MessageFromDevice) => {
      const sentAt = message.replyTo === undefined ? undefined : pending.get(message.replyTo);
      if (sentAt === undefined || message.replyTo === undefined) return;
      pending.delete(message.replyTo);
      figures.rtts.push(performance.now() - sentAt);
    });
    tunnels.push(tunnel);
  }
  await Promise.all(tunnels.map((t) => t.connected()));
  await pool(
    tunnels.flatMap((tunnel) => registered.map((hub) => ({ tunnel, uuid: hub.uuid }))),
    options.concurrency * 5,
    async ({ tunnel, uuid }) => {
      for (;;) {
        const ack = await tunnel.subscribe(uuid);
        if (ack.success) return;
        if (ack.error.code !== 'RATE_LIMITED') return figures.fail(`subscribe: ${ack.error.code}`);
        figures.refuse('RATE_LIMITED (subscribe)');
        await sleep((ack.error.retryAfter ?? 10) * 1000);
      }
    },
  );

  // 4. Run: pings, and a progress line every second.
  const until = Date.now() + options.durationSeconds * 1000;
  const timeoutMs = 10_000;
  const pingers = tunnels.map((tunnel) =>
    setInterval(() => {
      const hub = registered[Math.floor(Math.random() * registered.length)];
      if (hub === undefined) return;
      const id = randomUUID();
      pending.set(id, performance.now());
      figures.pings++;
      tunnel.send(hub.uuid, 'ping', { at: Date.now() }, id).then(
        (ack) => {
          if (!ack.delivered) {
            pending.delete(id);
            figures.undelivered++;
          }
        },
        () => figures.fail('ping: no ack'),
      );
    }, options.pingMs),
  );
  const sweeper = setInterval(() => {
    const now = performance.now();
    for (const [id, sentAt] of pending) {
      if (now - sentAt > timeoutMs) {
        pending.delete(id);
        figures.fail('ping: no reply within 10 s');
      }
    }
  }, 1000);
  let lastLine = Date.now();
  const progress = setInterval(() => {
    const now = Date.now();
    const rate = ((figures.heartbeats - figures.heartbeatsAtLastLine) * 1000) / Math.max(1, now - lastLine);
    figures.heartbeatsAtLastLine = figures.heartbeats;
    lastLine = now;
    const sorted = [...figures.rtts].sort((a, b) => a - b);
    const connected = hubs.filter((h) => h.connected).length;
    const line = `[${Math.round((now - started) / 1000)}s] hubs connected ${connected}/${hubs.length}  heartbeats/s ${rate.toFixed(1)}  rtt p50 ${fmt(percentile(sorted, 50))} p99 ${fmt(percentile(sorted, 99))}  reconnects ${figures.reconnects}  refusals ${sum(figures.refusals)}  errors ${figures.errorCount()}`;
    out.write(tty ? `\r${line}` : `${line}\n`);
  }, 1000);
  await sleep(Math.max(0, until - Date.now()));

  // 5. Stop and report.
  stopping = true;
  for (const timer of [...pingers, sweeper, progress]) clearInterval(timer);
  await sleep(Math.min(2000, options.pingMs));
  for (const tunnel of tunnels) tunnel.close();
  for (const hub of hubs) hub.stop();
  http.close();
  for (const what of unresolved.flat()) figures.fail(what);
  const elapsed = (Date.now() - started) / 1000;
  const sorted = [...figures.rtts].sort((a, b) => a - b);
  const summary = {
    hubs: hubs.length,
    apps: tunnels.length,
    durationSeconds: options.durationSeconds,
    heartbeats: figures.heartbeats,
    heartbeatsPerSecond: Number((figures.heartbeats / Math.max(1, options.durationSeconds)).toFixed(2)),
    pings: figures.pings,
    replies: figures.rtts.length,
    undelivered: figures.undelivered,
    rttMs: { p50: round(percentile(sorted, 50)), p99: round(percentile(sorted, 99)), max: round(sorted.at(-1) ?? null) },
    reconnects: figures.reconnects,
    refusals: Object.fromEntries(figures.refusals),
    errors: Object.fromEntries(figures.errors),
    riddenOut: Object.fromEntries(figures.riddenOut),
    elapsedSeconds: Number(elapsed.toFixed(1)),
  };
  if (tty) out.write('\n');
  out.write(options.json ? `${JSON.stringify(summary)}\n` : `summary ${JSON.stringify(summary, null, 2)}\n`);
  return figures.errorCount() > 0 ? 1 : 0;
}

const fmt = (ms: number | null): string => (ms === null ? '-' : `${ms.toFixed(1)}ms`);
const round = (ms: number | null): number | null => (ms === null ? null : Number(ms.toFixed(2)));
const sum = (map: Map<string, number>): number => [...map.values()].reduce((a, b) => a + b, 0);

if (require.main === module) {
  const options = parse(process.argv.slice(2));
  simulate(options).then(
    (code) => process.exit(code),
    (error: unknown) => {
      process.stderr.write(`simulate: ${error instanceof Error ? error.message : String(error)}\n`);
      process.exit(1);
    },
  );
}
