import { MongoClient } from 'mongodb';
import { createEsdbEventStore } from '../../src/infra/eventstore/esdb';
import { formatPosition } from '../../src/infra/eventstore/port';
import { CHECKPOINT_NAME } from '../../src/projections/projector';
import { api, CRM_KEY } from '../support/harness';
import { startJongodb, type Jongodb } from '../support/jongodb';
import { startServerProcess, TEST_SECRETS, type ServerProcess, PROCESS_TEST_TIMEOUT_MS } from '../support/server';
import { startStack, type Stack } from '../support/stack';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy';
import { eventually, ready, testTokens as tokens } from '../support/service-probes';

/**
 * Distributed mode, MongoDB unreachable for a while and then back with its data (a TCP proxy
 * in front of the stand-in is cut, then listens again): every route meeting the outage
 * answers 503 with the §7 body, never 500 (the rebuild too); readiness names the stores
 * `down`; an event appended meanwhile is projected once MongoDB is back, by the projector
 * resuming from its checkpoint by itself; readiness is 200 again.
 */

const UNAVAILABLE = { statusCode: 503, message: 'Service unavailable', error: 'Service Unavailable' };
/** A hang guard for the service's start (under tsx), not a speed requirement: a loaded machine took over 30 s. */
const START_TIMEOUT_MS = 90_000;
const ADMIN_EMAIL = 'resume.admin@example.com';
/** How many events the event store holds (system events aside), and the position of the last. */
async function headOf(url: string): Promise<{ count: number; last: string | null }> {
  const store = createEsdbEventStore(url);
  let count = 0;
  let last: string | null = null;
  try {
    const subscription = store.subscribe();
    for await (const item of subscription) {
      if (item.kind === 'caught-up') break;
      count++;
      last = formatPosition(item.event.position);
    }
    await subscription.close();
  } finally {
    await store.close();
  }
  return { count, last };
}

/** The projector's checkpoint as stored in MongoDB (generation 0), read past the proxy. */
async function storedCheckpoint(uri: string): Promise<string | null> {
  const client = new MongoClient(uri);
  try {
    const doc = await client.db().collection<{ _id: string; value: string }>('checkpoints').findOne({ _id: CHECKPOINT_NAME });
    return doc?.value ?? null;
  } finally {
    await client.close();
  }
}

let nextCrmId = 700_000_000 + Math.floor(Math.random() * 100_000_000);

async function syncCustomer(service: ServerProcess, email: string): Promise<{ status: number; userId: string | null; crmId: number; email: string }> {
  const crmId = nextCrmId++;
  const res = await api(service, 'POST', '/auth/sync-customer', {
    headers: { 'X-Internal-Api-Key': CRM_KEY },
    body: { id: crmId, first_name: 'Re', last_name: 'Sume', email, active: true },
  });
  const user = (res.body as { user?: { id?: string } } | null)?.user;
  return { status: res.status, userId: user?.id ?? null, crmId, email };
}

describe('MongoDB unreachable for a while (distributed mode)', () => {
  let stack: Stack;
  let mongo: Jongodb;
  let proxy: TcpProxy;
  let service: ServerProcess;

  beforeAll(async () => {
    stack = await startStack();
    // A standalone stand-in reached straight through the proxy (a replica-set member would
    // send the driver to its own address), with a short server selection, so an operation
    // during the outage fails in a second instead of thirty.
    mongo = await startJongodb({ replicaSet: false });
    const stored = new URL(mongo.uri);
    proxy = await startTcpProxy(Number(stored.port));
    const uri = `mongodb://127.0.0.1:${proxy.port}${stored.pathname}?directConnection=true&serverMonitoringMode=poll&serverSelectionTimeoutMS=1000`;
    service = await startServerProcess({
      ...TEST_SECRETS,
      ...stack.env,
      MONGODB_URI: uri,
      ADMIN_EMAILS: ADMIN_EMAIL,
      READ_YOUR_WRITES_TIMEOUT_MS: '500',
    }, START_TIMEOUT_MS);
  }, START_TIMEOUT_MS + 30_000);
  afterAll(async () => {
    await service?.kill();
    await proxy?.stop();
    await mongo?.stop();
    await stack?.stop();
  }, PROCESS_TEST_TIMEOUT_MS);

  test('503 on every route meanwhile, the projector resumes from its checkpoint, readiness follows', async () => {
    const before = await syncCustomer(service, `before.${nextCrmId}@example.com`);
    expect(before.status).toBe(201);
    const admin = await syncCustomer(service, ADMIN_EMAIL);
    expect(admin.status).toBe(201);
    const userToken = tokens.signAccess({ sub: before.userId ?? '', email: 'before@example.com', role: 'user' });
    const adminToken = tokens.signAccess({ sub: admin.userId ?? '', email: ADMIN_EMAIL, role: 'admin' });
    expect((await api(service, 'GET', '/users/me', { token: userToken })).status).toBe(200);
    expect((await ready(service)).status).toBe(200);

    // Everything before the outage checkpointed first: the restarted projector then applies
    // only what came after (without this, an event applied just before the cut whose
    // checkpoint the cut refused is applied again, harmlessly: writes are guarded).
    const head = await headOf(stack.env.EVENTSTORE_URL);
    const eventsBefore = head.count;
    await eventually(() => storedCheckpoint(mongo.uri), (value) => value === head.last, 'the checkpoint of everything before the outage');
    await proxy.cut();

    const me = await api(service, 'GET', '/users/me', { token: userToken });
    expect({ status: me.status, body: me.body }).toEqual({ status: 503, body: UNAVAILABLE });
    const rebuild = await api(service, 'POST', '/admin/read-models/rebuild', { token: adminToken });
    expect({ status: rebuild.status, body: rebuild.body }).toEqual({ status: 503, body: UNAVAILABLE });
    const down = await eventually(() => ready(service), (r) => r.status === 503 && r.body.checks.readStore?.status === 'down', 'readiness naming the read store down');
    expect(down.body.checks.credentials?.status).toBe('down');
    expect(down.body.checks.eventStore?.status).toBe('ok');

    // An event appended during the outage: a known customer renamed (the command side needs the
    // event store, and the customer's data key, which this process already holds; a new customer
    // would need a new key from the credential store, which is down too).
    const renamed = await api(service, 'POST', '/auth/sync-customer', {
      headers: { 'X-Internal-Api-Key': CRM_KEY },
      body: { id: before.crmId, first_name: 'During', last_name: 'Sume', email: before.email, active: true },
    });
    expect(renamed.status).toBe(200);
    // The projector met the outage when it tried to apply it.
    await eventually(async () => service.output(), (out) => out.includes('"msg":"projector failed"'), 'a projector failure in the log');

    await proxy.resume();

    // Readiness allows 5 s of lag, so it may show 200 before the event is applied: the
    // event itself is what says the projector resumed.
    const projected = await eventually(
      () => api(service, 'GET', '/users/me', { token: userToken }),
      (r) => r.status === 200 && (r.body as { firstName?: string }).firstName === 'During',
      'the rename of the outage projected',
    );
    expect((projected.body as { firstName?: string }).firstName).toBe('During');
    const up = await eventually(() => ready(service), (r) => r.status === 200, 'readiness 200 again');
    expect(Object.values(up.body.checks).map((c) => c.status)).toEqual(Object.values(up.body.checks).map(() => 'ok'));
    // It resumed from its checkpoint: the events before the outage were not applied again.
    // The restarted projector logs its catch-up after applying what it found (which the read above may see first).
    const caughtUpLines = (): number[] =>
      service
        .output()
        .split('\n')
        .filter((line) => line.includes('"msg":"projector caught up"'))
        .map((line) => (JSON.parse(line) as { eventsApplied: number }).eventsApplied);
    const caughtUp = await eventually(async () => caughtUpLines(), (lines) => lines.length >= 2, 'the restarted projector caught up');
    const eventsAfter = (await headOf(stack.env.EVENTSTORE_URL)).count;
    expect(caughtUp.length).toBeGreaterThanOrEqual(2);
    expect(caughtUp.at(-1)).toBeLessThanOrEqual(eventsAfter - eventsBefore);
    expect(service.output()).toContain('"msg":"projector restarting"');
    expect(service.output()).not.toContain('"statusCode":500');
  }, 90_000);
});

describe('the event store unreachable for a while (distributed mode)', () => {
  let stack: Stack;
  let proxy: TcpProxy;
  let service: ServerProcess;

  beforeAll(async () => {
    stack = await startStack();
    proxy = await startTcpProxy(stack.esdb.port);
    service = await startServerProcess({
      ...TEST_SECRETS,
      ...stack.env,
      EVENTSTORE_URL: `esdb://127.0.0.1:${proxy.port}?tls=false`,
      READ_YOUR_WRITES_TIMEOUT_MS: '500',
    }, START_TIMEOUT_MS);
  }, START_TIMEOUT_MS + 30_000);
  afterAll(async () => {
    await service?.kill();
    await proxy?.stop();
    await stack?.stop();
  }, PROCESS_TEST_TIMEOUT_MS);

  test('writes answer 503 meanwhile; the projector resubscribes from its checkpoint by itself; readiness follows', async () => {
    expect((await syncCustomer(service, `esdb.before.${nextCrmId}@example.com`)).status).toBe(201);
    expect((await ready(service)).status).toBe(200);

    await proxy.cut();

    const refused = await api(service, 'POST', '/auth/sync-customer', {
      headers: { 'X-Internal-Api-Key': CRM_KEY },
      body: { id: nextCrmId++, first_name: 'Re', last_name: 'Fused', email: `esdb.refused.${nextCrmId}@example.com`, active: true },
    });
    expect({ status: refused.status, body: refused.body }).toEqual({ status: 503, body: UNAVAILABLE });
    const down = await eventually(() => ready(service), (r) => r.body.checks.eventStore?.status === 'down', 'readiness naming the event store down');
    expect(down.status).toBe(503);
    // The projector's subscription broke with the connection.
    await eventually(async () => service.output(), (out) => out.includes('"msg":"projector restarting"'), 'the projector restarting');

    await proxy.resume();

    // A fresh customer per attempt: the client reconnects on its own schedule.
    const after = await eventually(() => syncCustomer(service, `esdb.after.${nextCrmId}@example.com`), (r) => r.status === 201, 'a write accepted again');
    const token = tokens.signAccess({ sub: after.userId ?? '', email: 'after@example.com', role: 'user' });
    const projected = await eventually(() => api(service, 'GET', '/users/me', { token }), (r) => r.status === 200, 'the new user projected');
    expect((projected.body as { email?: string }).email).toMatch(/^esdb\.after\./);
    const up = await eventually(() => ready(service), (r) => r.status === 200, 'readiness 200 again');
    expect(Object.values(up.body.checks)).toEqual(Object.values(up.body.checks).map(() => ({ status: 'ok' })));
    expect(service.output()).not.toContain('"statusCode":500');
  }, 120_000);
});
