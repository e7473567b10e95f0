/**
 * Part 1 of `npm run bench:scale`: round trips per operation in distributed mode, on the
 * stack's stand-ins (EventStoreDB stand-in, jongodb, a private redis-server), counted at
 * the clients (bench/round-trips.ts). Two API processes share the stack, as behind a load
 * balancer; both run in this process, each with its own clients and connections.
 *
 * Counts, not times: jongodb's per-write cost says nothing about MongoDB's. Background
 * work (the generation poll, the projector lease, checkpoint polls) is measured while
 * idle and its rate subtracted from each operation's window.
 */
import { randomUUID } from 'node:crypto';
import { newCommandContext, toNewEvents } from '../src/commands/handler';
import { heartbeatStream } from '../src/domain/events';
import { comparePositions, parsePosition, type GlobalPosition } from '../src/infra/eventstore/port';
import { CHECKPOINT_NAME } from '../src/projections/projector';
import type { MessageAck, MessageToDevice } from '../src/tunnel/events';
import { createAccount, login } from '../test/support/accounts';
import { api, startTestService, type TestService } from '../test/support/harness';
import { startTestSmtpServer } from '../test/support/smtp';
import { connect, request, type Probe } from '../test/support/tunnel';
import { byStore, difference, startRoundTripCounters, type Counts, type RoundTripCounters } from './round-trips';

export interface OperationCost {
  readonly operation: string;
  readonly count: number;
  readonly mongo: number;
  readonly esdb: number;
  readonly redis: number;
  /** Per operation, by command (after the background was subtracted), for the detail table. */
  readonly detail: Counts;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
/** Long enough for the projector's idle checkpoint (100 ms) and the watermark publish after the last write. */
const SETTLE_MS = 400;

interface Meter {
  measure(operation: string, count: number, run: () => Promise<void>): Promise<OperationCost>;
}

async function backgroundRate(counters: RoundTripCounters, ms: number): Promise<Record<string, number>> {
  const before = await counters.snapshot();
  await sleep(ms);
  const delta = difference(await counters.snapshot(), before);
  return Object.fromEntries(Object.entries(delta).map(([key, value]) => [key, value / ms]));
}

function meter(counters: RoundTripCounters, background: Readonly<Record<string, number>>): Meter {
  return {
    async measure(operation, count, run) {
      const before = await counters.snapshot();
      const started = Date.now();
      await run();
      await sleep(SETTLE_MS);
      const elapsed = Date.now() - started;
      const delta = difference(await counters.snapshot(), before);
      const detail: Record<string, number> = {};
      for (const [key, value] of Object.entries(delta)) {
        const net = (value - (background[key] ?? 0) * elapsed) / count;
        if (net >= 0.005) detail[key] = Math.round(net * 1000) / 1000;
      }
      const totals = byStore(detail);
      return { operation, count, ...totals, detail };
    },
  };
}

type User = { id: string; email: string; accessToken: string };
interface Hub {
  readonly id: string;
  readonly uuid: string;
  token: string;
}

async function ok(res: Promise<{ status: number; body: unknown }>, expected: number, what: string): Promise<unknown> {
  const { status, body } = await res;
  if (status !== expected) throw new Error(`${what} answered ${status}: ${JSON.stringify(body)}`);
  return body;
}

async function inParallel(count: number, task: (i: number) => Promise<void>): Promise<void> {
  await Promise.all(Array.from({ length: count }, (_, i) => task(i)));
}

/** Devices: register, token, first heartbeat, routine heartbeats at two concurrencies, reads. */
async function deviceOperations(service: TestService, m: Meter, owner: User): Promise<{ results: OperationCost[]; hubs: Hub[] }> {
  const results: OperationCost[] = [];
  const hubs: Hub[] = [];
  const register = async (): Promise<void> => {
    const uuid = randomUUID();
    const body = (await ok(
      api(service, 'POST', '/devices/register', { token: owner.accessToken, body: { uuid, deviceId: `HUB-${uuid.slice(0, 8)}`, name: 'Hub' } }),
      201,
      'register',
    )) as { id: string };
    hubs.push({ id: body.id, uuid, token: '' });
  };
  // Registrations beyond the measured ten, so that 64 hubs can beat at once.
  for (let i = 0; i < 54; i++) await register();
  results.push(await m.measure('register', 10, async () => {
    for (let i = 0; i < 10; i++) await register();
  }));
  const issue = async (hub: Hub): Promise<void> => {
    hub.token = ((await ok(api(service, 'POST', `/devices/auth/${hub.uuid}`, { token: owner.accessToken }), 201, 'device token')) as { token: string }).token;
  };
  for (const hub of hubs.slice(10)) await issue(hub);
  results.push(await m.measure('device token', 10, async () => {
    for (const hub of hubs.slice(0, 10)) await issue(hub);
  }));
  const beat = (hub: Hub): Promise<unknown> => ok(api(service, 'POST', `/devices/heartbeat/${hub.uuid}`, { token: hub.token }), 200, 'heartbeat');
  for (const hub of hubs.slice(10)) await beat(hub);
  results.push(await m.measure('first heartbeat', 10, async () => {
    for (const hub of hubs.slice(0, 10)) await beat(hub);
  }));
  for (const concurrency of [8, 64]) {
    const rounds = concurrency === 8 ? 10 : 3;
    results.push(await m.measure(`routine heartbeat, ${concurrency} hubs at once`, concurrency * rounds, async () => {
      for (let round = 0; round < rounds; round++) await inParallel(concurrency, async (i) => void (await beat(hubs[i] as Hub)));
    }));
  }
  results.push(await m.measure('GET /devices (page of 20)', 10, async () => {
    for (let i = 0; i < 10; i++) await ok(api(service, 'GET', '/devices?page=1&limit=20&sort=createdAt&order=desc', { token: owner.accessToken }), 200, 'list');
  }));
  results.push(await m.measure('GET /devices/:id', 10, async () => {
    for (const hub of hubs.slice(0, 10)) await ok(api(service, 'GET', `/devices/${hub.id}`, { token: owner.accessToken }), 200, 'get');
  }));
  return { results, hubs };
}

async function authOperations(service: TestService, m: Meter, smtpAccounts: Array<{ email: string; password: string }>): Promise<OperationCost[]> {
  const refreshTokens: string[] = [];
  const loginCost = await m.measure('login', smtpAccounts.length, async () => {
    for (const account of smtpAccounts) refreshTokens.push((await login(service, account.email, account.password)).refreshToken);
  });
  const refreshCost = await m.measure('refresh', refreshTokens.length, async () => {
    for (const refreshToken of refreshTokens) await ok(api(service, 'POST', '/auth/refresh', { body: { refreshToken } }), 201, 'refresh');
  });
  return [loginCost, refreshCost];
}

/** An app on process A sends to its hub connected to process B, which answers (one tunnel message each way counted as two). */
async function tunnelOperation(a: TestService, b: TestService, m: Meter, owner: User, hub: Hub): Promise<OperationCost> {
  const sockets: Probe[] = [];
  try {
    const app = await connect(a, owner.accessToken);
    sockets.push(app);
    await request(app, 'tunnel:subscribe', { deviceUuid: hub.uuid });
    const device = await connect(b, hub.token);
    sockets.push(device);
    await sleep(200);
    return await m.measure('tunnel message, app on A to device on B', 20, async () => {
      for (let i = 0; i < 20; i++) {
        const ack = await request<MessageAck>(app, 'tunnel:message', { deviceUuid: hub.uuid, id: `m-${i}`, type: 'x', payload: { i } });
        if (!ack.delivered) throw new Error('tunnel message not delivered');
        await device.next<MessageToDevice>('tunnel:message');
      }
    });
  } finally {
    for (const socket of sockets) socket.close();
  }
}

export async function measureRoundTrips(): Promise<OperationCost[]> {
  const smtp = await startTestSmtpServer();
  let counters: RoundTripCounters | null = null;
  let a: TestService | null = null;
  let b: TestService | null = null;
  try {
    // Counting is installed before the services open their clients.
    const pending = startRoundTripCounters(null);
    await pending.close();
    a = await startTestService('distributed', { SMTP_URL: smtp.url, LOG_LEVEL: 'warn' });
    b = await a.startAnother();
    counters = startRoundTripCounters(a.redis?.url ?? null);
    const ownerAccount = await createAccount(a, smtp);
    const owner: User = { id: ownerAccount.id, email: ownerAccount.email, accessToken: (await login(a, ownerAccount.email, ownerAccount.password)).accessToken };
    const accounts = [];
    for (let i = 0; i < 5; i++) accounts.push(await createAccount(a, smtp));
    const background = await backgroundRate(counters, 3000);
    const m = meter(counters, background);
    const { results, hubs } = await deviceOperations(a, m, owner);
    results.push(...(await authOperations(a, m, accounts)));
    const hub = hubs[0];
    if (hub !== undefined) results.push(await tunnelOperation(a, b, m, owner, hub));
    results.push(await burstOperation(a, m, hubs, 40));
    return results;
  } finally {
    await counters?.close();
    await b?.stop();
    await a?.stop();
    await smtp.stop();
  }
}

/**
 * The projector saturated: heartbeats appended straight to the event store by many writers
 * at once (as after an outage, when every hub comes back), none waiting for the projector.
 * What counts is MongoDB commands per projected event while it works through them.
 */
async function burstOperation(service: TestService, m: Meter, hubs: readonly Hub[], perHub: number): Promise<OperationCost> {
  let last: GlobalPosition | null = null;
  const count = hubs.length * perHub;
  const cost = await m.measure(`projector under a burst (${count.toLocaleString('en-US')} heartbeats appended at once), per event`, count, async () => {
    await inParallel(hubs.length, async (i) => {
      const hub = hubs[i] as Hub;
      const ctx = newCommandContext({ type: 'device', id: hub.uuid }, randomUUID());
      for (let n = 0; n < perHub; n++) {
        const at = new Date().toISOString();
        const result = await service.eventStore.append(heartbeatStream(hub.uuid), toNewEvents([{ type: 'HeartbeatReceived', data: { uuid: hub.uuid, receivedAt: at } }], ctx, at), 'any');
        if (last === null || comparePositions(result.position, last) > 0) last = result.position;
      }
    });
    // Until the projector has checkpointed past the burst (these polls are counted: a few).
    for (;;) {
      const checkpoint = await service.readStore.getCheckpoint(CHECKPOINT_NAME);
      const reached: GlobalPosition | null = last;
      if (checkpoint !== null && reached !== null && comparePositions(parsePosition(checkpoint), reached) >= 0) break;
      await sleep(250);
    }
  });
  return cost;
}

export function roundTripTable(results: readonly OperationCost[]): string {
  const lines = [
    '| operation | measured | MongoDB commands | EventStoreDB calls | Redis commands | by command (per operation) |',
    '| --- | ---: | ---: | ---: | ---: | --- |',
  ];
  for (const r of results) {
    const detail = Object.entries(r.detail)
      .sort(([x], [y]) => (x < y ? -1 : 1))
      .map(([key, value]) => `${key} ${value}`)
      .join(', ');
    lines.push(`| ${r.operation} | ${r.count} | ${r.mongo.toFixed(3)} | ${r.esdb.toFixed(3)} | ${r.redis.toFixed(3)} | ${detail} |`);
  }
  return lines.join('\n');
}
