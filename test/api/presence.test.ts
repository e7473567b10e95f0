import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { DeviceWentOffline } from '../../src/domain/device';
import { deviceStream } from '../../src/domain/events';
import { api, createUser, MODES, startTestService, type Mode, type TestService } from '../support/harness';

/**
 * Presence end to end (decisions §4): real services, real HTTP, a short OFFLINE_AFTER_SECONDS.
 * Embedded: in-process timers. Distributed: BullMQ on the stack's private Redis. Every
 * offline transition is checked against its deadline (last heartbeat + window): never
 * before it, and no more than 10 s after it.
 */

const LATE_LIMIT_MS = 10_000;

interface Device {
  readonly id: string;
  readonly uuid: string;
  readonly token: string;
  readonly ownerToken: string;
}

type Target = Pick<TestService, 'baseUrl'>;

async function newDevice(service: TestService): Promise<Device> {
  const owner = await createUser(service);
  const uuid = randomUUID();
  const registered = await api(service, 'POST', '/devices/register', { token: owner.accessToken, body: { uuid, deviceId: 'HUB-P', name: 'Presence hub' } });
  if (registered.status !== 201) throw new Error(`register answered ${registered.status}`);
  const auth = await api(service, 'POST', `/devices/auth/${uuid}`, { token: owner.accessToken });
  if (auth.status !== 201) throw new Error(`device auth answered ${auth.status}`);
  return { id: (registered.body as { id: string }).id, uuid, token: (auth.body as { token: string }).token, ownerToken: owner.accessToken };
}

/** One heartbeat; answers its lastSeenAt, after checking the response shape. */
async function heartbeat(target: Target, device: Device): Promise<string> {
  const res = await api(target, 'POST', `/devices/heartbeat/${device.uuid}`, { token: device.token, body: { ipAddress: '10.0.0.7' } });
  if (res.status !== 200) throw new Error(`heartbeat answered ${res.status}: ${JSON.stringify(res.body)}`);
  const body = res.body as { success: boolean; device: { id: string; isOnline: boolean; lastSeenAt: string } };
  expect(body).toEqual({ success: true, device: { id: device.id, isOnline: true, lastSeenAt: expect.any(String) } });
  return body.device.lastSeenAt;
}

/** A device on a timer, as real hubs are: a heartbeat every `intervalMs`, whether or not the last one was answered. */
function beating(target: () => Target, device: Device, intervalMs: number): { stop: () => Promise<string | null>; accepted: () => readonly string[] } {
  let last: string | null = null;
  const accepted: string[] = [];
  const inFlight = new Set<Promise<void>>();
  const beat = (): void => {
    const p = heartbeat(target(), device)
      .then((seen) => {
        accepted.push(seen);
        if (last === null || seen > last) last = seen;
      })
      .catch(() => undefined) // the service or Redis is away: a lost heartbeat, as in real life
      .finally(() => inFlight.delete(p));
    inFlight.add(p);
  };
  beat();
  const timer = setInterval(beat, intervalMs);
  return {
    stop: async () => {
      clearInterval(timer);
      await Promise.allSettled([...inFlight]);
      return last;
    },
    accepted: () => accepted,
  };
}

/**
 * A device kept beating never goes offline while the service hears it: every offline
 * transition it has names its last accepted heartbeat, comes a whole window after it, and
 * no heartbeat was accepted in between. (On a quiet machine it has none; on a busy one the
 * beats themselves can reach the service more than a window apart, and then going offline
 * is right.)
 */
function expectOnlyEarnedOffline(offline: ReadonlyArray<DeviceWentOffline['data']>, accepted: readonly string[], windowSeconds: number): void {
  for (const e of offline) {
    const lastSeenAt = e.lastSeenAt ?? '';
    expect(e).toMatchObject({ reason: 'heartbeat-timeout' });
    expect(Date.parse(e.wentOfflineAt) - Date.parse(lastSeenAt)).toBeGreaterThanOrEqual(windowSeconds * 1000);
    expect(accepted.filter((seen) => seen > lastSeenAt && seen < e.wentOfflineAt)).toEqual([]);
  }
}

async function presenceEvents(service: TestService, device: Device): Promise<Array<{ type: string; data: unknown }>> {
  const out: Array<{ type: string; data: unknown }> = [];
  for await (const e of service.eventStore.readStream(deviceStream(device.uuid))) {
    if (e.type === 'DeviceWentOnline' || e.type === 'DeviceWentOffline') out.push({ type: e.type, data: e.data });
  }
  return out;
}

async function offlineEvents(service: TestService, device: Device): Promise<Array<DeviceWentOffline['data']>> {
  return (await presenceEvents(service, device)).filter((e) => e.type === 'DeviceWentOffline').map((e) => e.data as DeviceWentOffline['data']);
}

async function waitForOffline(service: TestService, device: Device, count = 1, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while ((await offlineEvents(service, device)).length < count) {
    if (Date.now() > deadline) throw new Error(`device ${device.uuid} did not go offline in time`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** The offline transition went out after the deadline of the heartbeat it names, and within 10 s of it. */
function expectInWindow(offline: DeviceWentOffline['data'] | undefined, lastSeenAt: string, windowSeconds: number): void {
  const deadline = Date.parse(lastSeenAt) + windowSeconds * 1000;
  expect(offline).toMatchObject({ reason: 'heartbeat-timeout', lastSeenAt });
  const wentOfflineAt = Date.parse(offline?.wentOfflineAt ?? '');
  expect(wentOfflineAt).toBeGreaterThanOrEqual(deadline);
  expect(wentOfflineAt).toBeLessThanOrEqual(deadline + LATE_LIMIT_MS);
}

async function getDevice(service: TestService, device: Device): Promise<{ isOnline: boolean; lastSeenAt: string | null; ipAddress: string | null }> {
  const res = await api(service, 'GET', `/devices/${device.id}`, { token: device.ownerToken });
  return res.body as { isOnline: boolean; lastSeenAt: string | null; ipAddress: string | null };
}

/**
 * The device as read once the read model shows it offline. The offline event is in the log
 * (waitForOffline) before the projector has applied it, and GET /devices/:id reads the read
 * model: read at once, it may still say online.
 */
async function readOffline(service: TestService, device: Device, timeoutMs = 10_000): Promise<{ isOnline: boolean; lastSeenAt: string | null }> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const read = await getDevice(service, device);
    if (!read.isOnline || Date.now() > deadline) return read;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/**
 * Read right after a heartbeat: the device shows that heartbeat, and it is online if the
 * answer came before the heartbeat's deadline. On a loaded machine the read can come later
 * than a short window; the expiry may then rightly have taken the device offline already.
 */
async function expectSeenAndOnline(
  service: TestService,
  device: Device,
  lastSeenAt: string | null,
  windowSeconds: number,
  fields: { ipAddress?: string } = {},
): Promise<void> {
  const read = await getDevice(service, device);
  const answeredAt = Date.now();
  expect(read).toMatchObject({ lastSeenAt, ...fields });
  if (answeredAt < Date.parse(lastSeenAt ?? '') + windowSeconds * 1000) expect(read.isOnline).toBe(true);
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe.each(MODES)('presence in %s mode', (mode: Mode) => {
  const WINDOW = 2;
  let service: TestService;

  beforeAll(async () => {
    service = await startTestService(mode, { OFFLINE_AFTER_SECONDS: String(WINDOW) });
  }, 60_000);

  afterAll(async () => {
    await service?.stop();
  });

  test('a silent device goes offline after its deadline, within 10 s; a beating one stays online; a returning one gets a new job', async () => {
    const [silent, live] = await Promise.all([newDevice(service), newDevice(service)]);
    const liveBeats = beating(() => service, live, 400);
    const silentSeen = await heartbeat(service, silent);
    await expectSeenAndOnline(service, silent, silentSeen, WINDOW, { ipAddress: '10.0.0.7' });

    await waitForOffline(service, silent);
    const [first] = await offlineEvents(service, silent);
    expectInWindow(first, silentSeen, WINDOW);
    expect(await readOffline(service, silent)).toMatchObject({ isOnline: false, lastSeenAt: silentSeen });

    // It comes back: online again, and silent again, offline again — its job was made anew.
    const backSeen = await heartbeat(service, silent);
    await expectSeenAndOnline(service, silent, backSeen, WINDOW);
    await waitForOffline(service, silent, 2);
    expectInWindow((await offlineEvents(service, silent))[1], backSeen, WINDOW);

    // The live device beat through more than two windows: offline only where its accepted
    // beats were a whole window apart (never on a quiet machine; on a busy one this process can
    // go unscheduled for that long), and always back online with the next beat.
    const liveSeen = await liveBeats.stop();
    const earned = await offlineEvents(service, live);
    expectOnlyEarnedOffline(earned, liveBeats.accepted(), WINDOW);
    await expectSeenAndOnline(service, live, liveSeen, WINDOW);
    // Then silent: offline once more, in the window of its last beat (unless it already was).
    const lastIsForLastBeat = earned.at(-1)?.lastSeenAt === liveSeen;
    await waitForOffline(service, live, lastIsForLastBeat ? earned.length : earned.length + 1);
    const liveOffline = await offlineEvents(service, live);
    expectInWindow(liveOffline.at(-1), liveSeen ?? '', WINDOW);
    expect((await presenceEvents(service, live)).map((e) => e.type)).toEqual(liveOffline.flatMap(() => ['DeviceWentOnline', 'DeviceWentOffline']));

    // GET /metrics counts them (this service's expiry worker took all three offline).
    const metrics = await fetch(`${service.baseUrl}/metrics`).then((res) => res.text());
    const counter = (name: string): number => Number(new RegExp(`^${name}\\{[^}]*\\} (\\d+)`, 'm').exec(metrics)?.[1] ?? -1);
    expect(counter('offline_expiries_total')).toBeGreaterThanOrEqual(3);
    expect(counter('heartbeats_accepted_total')).toBeGreaterThanOrEqual(5);
  }, 40_000);
});

describe('presence across a restart of the embedded service (same DATA_DIR)', () => {
  const WINDOW = 3;
  let dir: string;
  let services: TestService[] = [];

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'hhc-presence-restart-'));
  });

  afterAll(async () => {
    for (const s of services) await s.stop().catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  });

  test('a stop shorter than the window marks no live device offline; deadlines come back from the log', async () => {
    const start = async (): Promise<TestService> => {
      const s = await startTestService('embedded', { DATA_DIR: dir, OFFLINE_AFTER_SECONDS: String(WINDOW) });
      services.push(s);
      return s;
    };
    let current = await start();
    const [live, dead, deadDuringStop] = await Promise.all([newDevice(current), newDevice(current), newDevice(current)]);
    const deadDuringStopSeen = await heartbeat(current, deadDuringStop); // its deadline falls while the service is down
    await sleep(2200);
    const liveBeats = beating(() => current, live, 300);
    const deadSeen = await heartbeat(current, dead); // its deadline falls after the restart
    await sleep(300);

    await current.stop();
    services = services.filter((s) => s !== current);
    await sleep(700);
    current = await start();

    await waitForOffline(current, dead);
    await waitForOffline(current, deadDuringStop);
    const liveSeen = await liveBeats.stop();
    expectInWindow((await offlineEvents(current, dead))[0], deadSeen, WINDOW);
    const [late] = await offlineEvents(current, deadDuringStop);
    expect(await offlineEvents(current, deadDuringStop)).toHaveLength(1);
    expectInWindow(late, deadDuringStopSeen, WINDOW);
    expect(await offlineEvents(current, live)).toEqual([]);
    await expectSeenAndOnline(current, live, liveSeen, WINDOW);
  }, 40_000);
});

describe('presence in distributed mode when Redis restarts empty', () => {
  const WINDOW = 3;
  let service: TestService;

  beforeAll(async () => {
    service = await startTestService('distributed', { OFFLINE_AFTER_SECONDS: String(WINDOW), READ_YOUR_WRITES_TIMEOUT_MS: '1000' });
  }, 60_000);

  afterAll(async () => {
    await service?.stop();
  });

  test('no live device goes offline, and no dead one stays online, once Redis is back', async () => {
    const redis = service.redis;
    if (redis === null) throw new Error('the distributed test service has no private Redis');
    const [live, dead, deadDuringOutage] = await Promise.all([newDevice(service), newDevice(service), newDevice(service)]);
    const outageSeen = await heartbeat(service, deadDuringOutage); // its deadline falls while Redis is away
    await sleep(1500);
    const liveBeats = beating(() => service, live, 300);
    const deadSeen = await heartbeat(service, dead);
    await sleep(300);

    await redis.kill(); // every delayed job is gone with it
    await sleep(2000);
    await redis.restart();

    await waitForOffline(service, deadDuringOutage);
    await waitForOffline(service, dead);
    const liveSeen = await liveBeats.stop();
    expectInWindow((await offlineEvents(service, dead))[0], deadSeen, WINDOW);
    expect(await offlineEvents(service, deadDuringOutage)).toHaveLength(1);
    expectInWindow((await offlineEvents(service, deadDuringOutage))[0], outageSeen, WINDOW);
    const liveOffline = await offlineEvents(service, live);
    expectOnlyEarnedOffline(liveOffline, liveBeats.accepted(), WINDOW);
    // Online now unless its last accepted heartbeat was already a window ago when it went offline.
    const lastOffline = liveOffline.at(-1);
    const wentOfflineAfterLastBeat = lastOffline !== undefined && liveSeen !== null && (lastOffline.lastSeenAt ?? '') >= liveSeen;
    expect((await getDevice(service, live)).isOnline).toBe(!wentOfflineAfterLastBeat);
    expect(service.logs()).toContain('presence expiry: scheduling every online device again');
    expect(liveSeen).not.toBeNull();
  }, 40_000);
});

describe('presence in distributed mode with two expiry workers', () => {
  const WINDOW = 2;
  let api1: TestService;
  let workers: TestService[] = [];

  beforeAll(async () => {
    // The API process projects but does not expire; two processes do only that.
    api1 = await startTestService('distributed', { OFFLINE_AFTER_SECONDS: String(WINDOW), ROLES: 'api,projector' });
    workers = await Promise.all([api1.startAnother({ ROLES: 'expiry' }), api1.startAnother({ ROLES: 'expiry' })]);
  }, 60_000);

  afterAll(async () => {
    for (const w of workers) await w.stop().catch(() => undefined);
    await api1?.stop();
  });

  test('many devices going silent at once: each goes offline exactly once, in its window', async () => {
    const devices = await Promise.all(Array.from({ length: 20 }, () => newDevice(api1)));
    const seen = await Promise.all(devices.map((d) => heartbeat(api1, d)));
    await Promise.all(devices.map((d) => waitForOffline(api1, d)));
    await sleep(500);
    for (const [i, d] of devices.entries()) {
      const offline = await offlineEvents(api1, d);
      expect(offline).toHaveLength(1);
      expectInWindow(offline[0], seen[i] ?? '', WINDOW);
    }
    // Both workers took part (each logs nothing per device; BullMQ shares the jobs out).
    expect(workers.every((w) => w.logs().includes('presence expiry: online devices scheduled'))).toBe(true);
  }, 40_000);

  test('stopping every worker for less than the window: jobs wait in Redis; the live device stays online, the dead one goes offline', async () => {
    const [live, dead] = await Promise.all([newDevice(api1), newDevice(api1)]);
    const liveBeats = beating(() => api1, live, 300);
    await sleep(300);
    const deadSeen = await heartbeat(api1, dead);
    await Promise.all(workers.map((w) => w.stop()));
    workers = [];
    await sleep(1000);
    workers = [await api1.startAnother({ ROLES: 'expiry' })];

    await waitForOffline(api1, dead);
    expectInWindow((await offlineEvents(api1, dead))[0], deadSeen, WINDOW);
    await sleep(1000);
    await liveBeats.stop();
    expectOnlyEarnedOffline(await offlineEvents(api1, live), liveBeats.accepted(), WINDOW);
  }, 40_000);
});
