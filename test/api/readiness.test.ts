import { api, createUser, CRM_KEY, MODES, startTestService, type Mode, type TestService } from '../support/harness';
import { allEvents } from '../support/accounts';
import { scrape } from '../support/metrics';
import { deviceToken, registerHub } from '../support/tunnel';
import { startServerProcess, TEST_SECRETS, type ServerProcess, PROCESS_TEST_TIMEOUT_MS } from '../support/server';
import { startStack, type Stack } from '../support/stack';

/**
 * `GET /api/v1/health/ready` (decisions §8): 200 while every dependency answers and the
 * projections are caught up within 5 s, else 503 naming what is not ready. Distributed
 * mode, with the stack's real processes stopped one by one under a running service.
 */

interface Readiness {
  readonly status: number;
  readonly body: { status: string; checks: Record<string, { status: string }> };
}

async function ready(service: Pick<TestService, 'baseUrl'>): Promise<Readiness> {
  const res = await fetch(`${service.baseUrl}/api/v1/health/ready`);
  return { status: res.status, body: (await res.json()) as Readiness['body'] };
}

async function waitForReadiness(service: Pick<TestService, 'baseUrl'>, until: (r: Readiness) => boolean, what: string, timeoutMs = 15_000): Promise<Readiness> {
  const deadline = Date.now() + timeoutMs;
  let last: Readiness | null = null;
  for (;;) {
    last = await ready(service);
    if (until(last)) return last;
    if (Date.now() > deadline) throw new Error(`readiness never showed ${what}; last: ${JSON.stringify(last)}`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}

const failing = (r: Readiness): string[] =>
  Object.entries(r.body.checks)
    .filter(([, check]) => check.status !== 'ok')
    .map(([name]) => name)
    .sort();

/** Stopping a service whose stores are gone must not hold the suite: bounded. */
async function stopWithin(service: TestService | null | undefined, ms: number): Promise<void> {
  if (service === null || service === undefined) return;
  await Promise.race([service.stop().catch(() => undefined), new Promise((resolve) => setTimeout(resolve, ms).unref())]);
}

describe('readiness names the dependency that is down (distributed mode)', () => {
  // The service runs as its own process: after its stores are gone it is killed, not stopped.
  let stack: Stack;
  let service: ServerProcess;

  beforeAll(async () => {
    stack = await startStack();
    service = await startServerProcess({ ...TEST_SECRETS, ...stack.env });
  }, PROCESS_TEST_TIMEOUT_MS);
  afterAll(async () => {
    await service?.kill();
    await stack?.stop();
  }, 30_000);

  test('every dependency up: 200, each check ok', async () => {
    const r = await ready(service);
    expect(r.status).toBe(200);
    expect(r.body.status).toBe('ok');
    expect(Object.values(r.body.checks)).toEqual(Object.values(r.body.checks).map(() => ({ status: 'ok' })));
    expect(Object.keys(r.body.checks).sort()).toEqual(['credentials', 'eventStore', 'projector', 'readStore', 'redis']);
    expect(failing(r)).toEqual([]);
  });

  test('Redis killed: 503 naming redis alone; back to 200 once it is back', async () => {
    const redis = stack.redis;
    await redis.kill();
    const down = await waitForReadiness(service, (r) => r.status === 503, '503');
    expect(down.body.status).toBe('unavailable');
    expect(failing(down)).toEqual(['redis']);
    expect(down.body.checks.redis).toEqual({ status: 'down' });

    await redis.restart();
    const up = await waitForReadiness(service, (r) => r.status === 200, '200 again');
    expect(failing(up)).toEqual([]);
  }, 30_000);

  test('the MongoDB server stopped: 503 naming the read store and the credentials', async () => {
    await stack.mongo.stop();
    const down = await waitForReadiness(service, (r) => r.status === 503 && failing(r).includes('credentials'), '503 for MongoDB');
    expect(failing(down)).toEqual(expect.arrayContaining(['credentials', 'readStore']));
    expect(down.body.checks.readStore).toEqual({ status: 'down' });
    expect(down.body.checks.credentials).toEqual({ status: 'down' });
    expect(failing(down)).not.toContain('redis');
    expect(failing(down)).not.toContain('eventStore');
  }, 30_000);

  test('the event store stopped: 503 naming it', async () => {
    await stack.esdb.stop();
    const down = await waitForReadiness(service, (r) => r.status === 503 && failing(r).includes('eventStore'), '503 for the event store');
    expect(down.body.checks.eventStore).toEqual({ status: 'down' });
    expect(down.body.checks.redis?.status).toBe('ok');
  }, 30_000);
});

describe('readiness while the projections are behind (distributed mode, no projector running)', () => {
  let apiOnly: TestService;
  let projector: TestService | null = null;

  beforeAll(async () => {
    apiOnly = await startTestService('distributed', { ROLES: 'api', READ_YOUR_WRITES_TIMEOUT_MS: '100' });
  }, 60_000);
  afterAll(async () => {
    await stopWithin(projector, 15_000);
    await stopWithin(apiOnly, 15_000);
  }, 40_000);

  test('ready while caught up; 503 naming the projector once an event waits more than 5 s; ready again once applied', async () => {
    expect((await ready(apiOnly)).status).toBe(200);
    await createUser(apiOnly);
    // Within the 5 s allowance: still ready.
    const early = await ready(apiOnly);
    expect(early.status).toBe(200);

    const behind = await waitForReadiness(apiOnly, (r) => r.status === 503, '503 for the projector', 10_000);
    expect(failing(behind)).toEqual(['projector']);
    // A fixed word, never a message (decisions §8); how far behind goes to the log.
    expect(behind.body.checks.projector).toEqual({ status: 'lagging' });
    const logged = apiOnly
      .logs()
      .split('\n')
      .filter((line) => line.includes('"msg":"readiness check not ok"'))
      .map((line) => JSON.parse(line) as { check: string; status: string; lagMs?: number });
    expect(logged.find((entry) => entry.check === 'projector')).toEqual(expect.objectContaining({ status: 'lagging', lagMs: expect.any(Number) }));
    expect(logged.find((entry) => entry.check === 'projector')?.lagMs).toBeGreaterThan(5000);

    projector = await apiOnly.startAnother({ ROLES: 'projector' });
    const caughtUp = await waitForReadiness(apiOnly, (r) => r.status === 200, '200 once projected');
    expect(failing(caughtUp)).toEqual([]);
  }, 40_000);
});

describe.each<Mode>(MODES)('readiness under ordinary writes (%s mode)', (mode) => {
  let service: TestService;

  beforeAll(async () => {
    service = await startTestService(mode);
  }, 60_000);
  afterAll(async () => {
    await service?.stop();
  });

  test('an e-mail change (its last event goes to a stream no read model reads) leaves no lag behind', async () => {
    const crmId = 500_000_000 + Math.floor(Math.random() * 100_000_000);
    // The CRM creates an account, then changes its e-mail: the old address's reservation is released last.
    const body = { id: crmId, first_name: 'Mail', last_name: 'Change', active: true };
    expect((await api(service, 'POST', '/auth/sync-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { ...body, email: `before.${crmId}@example.com` } })).status).toBe(201);
    expect((await api(service, 'POST', '/auth/sync-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { ...body, email: `after.${crmId}@example.com` } })).status).toBe(200);
    const events = await allEvents(service);
    expect(events.at(-1)?.streamName).toMatch(/^reservation-/);

    expect((await scrape(service)).value('projector_lag_events')).toBe(0);
    // Past the 5 s allowance: still ready.
    await new Promise((resolve) => setTimeout(resolve, 5500));
    const r = await ready(service);
    expect(failing(r)).toEqual([]);
    expect(r.status).toBe(200);
  }, 30_000);

  test('steady writes keep it ready: the projections are never 5 s behind', async () => {
    const owner = await createUser(service);
    // Enough writers that some write is nearly always on its way: a probe almost never finds the projections at the head.
    const hubs = await Promise.all(Array.from({ length: 16 }, () => registerHub(service, owner)));
    const tokens = await Promise.all(hubs.map((hub) => deviceToken(service, hub, owner)));
    let writing = true;
    let written = 0;
    const writers = hubs.map(async (hub, i) => {
      while (writing) {
        const res = await api(service, 'POST', `/devices/heartbeat/${hub.uuid}`, { token: tokens[i] as string });
        expect(res.status).toBe(200);
        written++;
      }
    });
    const probes: Readiness[] = [];
    // At least 7 s and at least 60 writes: on a busy machine the writes come slower, and the
    // probes go on until there were enough of them to make the point.
    const until = Date.now() + 7000;
    while (Date.now() < until || written < 60) {
      probes.push(await ready(service));
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
    writing = false;
    await Promise.all(writers);
    expect(written).toBeGreaterThanOrEqual(60);
    expect(probes.filter((p) => p.status !== 200).map((p) => p.body.checks.projector?.status)).toEqual([]);
  }, 90_000);
});
