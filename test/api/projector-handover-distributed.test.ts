import { api, CRM_KEY } from '../support/harness';
import { PROCESS_START_TIMEOUT_MS, PROCESS_TEST_TIMEOUT_MS, startServerProcess, TEST_SECRETS, type ServerProcess } from '../support/server';
import { startStack, type Stack } from '../support/stack';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy';
import { eventually, ready, testTokens as tokens } from '../support/service-probes';

/**
 * Distributed mode, the projector lease holder cut off from MongoDB alone, silently (its
 * proxy drops the traffic and keeps the connections open), while it still reaches Redis and
 * so could renew its lease for ever: it gives the lease up once its store has not answered
 * for the lease's time, and the other process, which reaches MongoDB, takes over and
 * projects; the tenures do not overlap (the fence), readiness follows each process's state,
 * and once the link is back the cut-off process serves the other's projections again.
 */

const LEASE_MS = 2000;
interface LeaseLine {
  readonly msg: string;
  readonly time: number;
  readonly epoch: number;
  readonly heldUntil?: number;
}

/** The process's lease log lines: acquisitions (logged time) and losses (until when it was certainly held). */
function leaseLines(service: ServerProcess): LeaseLine[] {
  const lines: LeaseLine[] = [];
  for (const line of service.output().split('\n')) {
    if (!line.includes('"projector lease') && !line.includes('"projector stalled')) continue;
    const entry = JSON.parse(line) as { msg: string; time: string; epoch: number; heldUntil?: number };
    lines.push({ msg: entry.msg, time: Date.parse(entry.time), epoch: entry.epoch, ...(entry.heldUntil !== undefined ? { heldUntil: entry.heldUntil } : {}) });
  }
  return lines;
}

let nextCrmId = 800_000_000 + Math.floor(Math.random() * 100_000_000);

async function syncCustomer(service: ServerProcess, firstName: string): Promise<{ status: number; token: string }> {
  const crmId = nextCrmId++;
  const email = `handover.${crmId}@example.com`;
  const res = await api(service, 'POST', '/auth/sync-customer', {
    headers: { 'X-Internal-Api-Key': CRM_KEY },
    body: { id: crmId, first_name: firstName, last_name: 'Over', email, active: true },
  });
  const userId = (res.body as { user?: { id?: string } } | null)?.user?.id ?? '';
  return { status: res.status, token: tokens.signAccess({ sub: userId, email, role: 'user' }) };
}

async function firstNameOn(service: ServerProcess, token: string): Promise<string | null> {
  const res = await api(service, 'GET', '/users/me', { token });
  return res.status === 200 ? ((res.body as { firstName?: string }).firstName ?? null) : null;
}

describe('the projector lease holder cut off from MongoDB alone (distributed mode)', () => {
  let stack: Stack;
  let proxy: TcpProxy;
  let holder: ServerProcess;
  let other: ServerProcess;

  beforeAll(async () => {
    // MongoDB standalone: the client behind the proxy stays behind it (a replica set's member list would lead around it).
    stack = await startStack({ mongo: 'standalone' });
    proxy = await startTcpProxy(Number(new URL(stack.env.MONGODB_URI).port));
    const env = { ...TEST_SECRETS, ...stack.env, PROJECTOR_LEASE_MS: String(LEASE_MS), READ_YOUR_WRITES_TIMEOUT_MS: '500' };
    holder = await startServerProcess({ ...env, MONGODB_URI: proxy.url(stack.env.MONGODB_URI) });
    await eventually(async () => holder.output(), (out) => out.includes('"msg":"projector lease acquired"'), 'the first process holding the lease');
    other = await startServerProcess(env);
  }, 2 * PROCESS_START_TIMEOUT_MS + 60_000);
  afterAll(async () => {
    await other?.kill();
    await holder?.kill();
    await proxy?.stop();
    await stack?.stop();
  }, PROCESS_TEST_TIMEOUT_MS);

  test('the holder gives the lease up, the other process projects, readiness follows; the tenures do not overlap', async () => {
    const before = await syncCustomer(other, 'Before');
    expect(before.status).toBe(201);
    expect(await eventually(() => firstNameOn(other, before.token), (name) => name === 'Before', 'the first write projected')).toBe('Before');
    expect(leaseLines(other).filter((l) => l.msg === 'projector lease acquired')).toEqual([]);

    proxy.blackhole();
    const cutAt = Date.now();

    // Written and read through the other process, which reaches MongoDB: projected only if it took the lease over.
    const during = await syncCustomer(other, 'During');
    expect(during.status).toBe(201);
    expect(await eventually(() => firstNameOn(other, during.token), (name) => name === 'During', 'the write of the cut projected by the other process', 45_000)).toBe('During');

    const stalled = leaseLines(holder).filter((l) => l.msg.startsWith('projector stalled'));
    expect(stalled.length).toBeGreaterThanOrEqual(1);
    const lost = leaseLines(holder).find((l) => l.msg.startsWith('projector lease lost') && l.time >= cutAt);
    const taken = leaseLines(other).find((l) => l.msg === 'projector lease acquired');
    const held = leaseLines(holder).filter((l) => l.msg === 'projector lease acquired').at(-1);
    expect(lost?.heldUntil).toEqual(expect.any(Number));
    expect(taken).toBeDefined();
    // One projector at a time: the holder stopped being certainly held before the other acquired, with a greater epoch.
    expect(lost?.heldUntil ?? Infinity).toBeLessThanOrEqual(taken?.time ?? -Infinity);
    expect(taken?.epoch ?? 0).toBeGreaterThan(held?.epoch ?? Infinity);

    // Readiness: the other process is ready (its projector is caught up); the cut-off one names its read store down.
    const otherReady = await eventually(() => ready(other), (r) => r.status === 200, 'the other process ready');
    expect(Object.values(otherReady.body.checks).map((c) => c.status)).toEqual(Object.values(otherReady.body.checks).map(() => 'ok'));
    const cutOff = await eventually(() => ready(holder), (r) => r.body.checks.readStore?.status === 'down', 'the cut-off process naming its read store down');
    expect(cutOff.status).toBe(503);
    expect(cutOff.body.checks.redis?.status).toBe('ok');

    proxy.heal();

    const back = await eventually(() => ready(holder), (r) => r.status === 200, 'the cut-off process ready again');
    expect(Object.values(back.body.checks).map((c) => c.status)).toEqual(Object.values(back.body.checks).map(() => 'ok'));
    // A write through the process that was cut off, projected (by whichever process holds the lease now) and read there.
    const after = await syncCustomer(holder, 'After');
    expect(after.status).toBe(201);
    expect(await eventually(() => firstNameOn(holder, after.token), (name) => name === 'After', 'a write after the cut projected')).toBe('After');
    expect(await firstNameOn(holder, during.token)).toBe('During');
    for (const service of [holder, other]) expect(service.output()).not.toContain('"statusCode":500');
  }, 180_000);
});
