import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HubClient, type HubEvent } from '@home-hub-cloud/hub-client';
import { createUser, startTestService, type TestService } from '../support/harness';
import { deviceToken, registerHub } from '../support/tunnel';
import { eventually } from '../support/client-timers';
import { runUntilExit } from '../support/stopped-child';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy';

/**
 * Outside attack on the hub client's tunnel connection timeout (clients/hub/src/index.ts,
 * docs/hub-protocol.md: "Give one connection attempt 30 s"; "any drop, a transport error, a
 * timeout: reconnect after a random wait in [0, min(10 s, 1 s × 2^attempt))"; `stop()` "Stops
 * everything: timers, heartbeats, the tunnel").
 */
const dir = mkdtempSync(join(tmpdir(), 'hhc-attack-hub-'));
let service: TestService;
let proxy: TcpProxy;
const cleanups: Array<() => void | Promise<void>> = [];

beforeAll(async () => {
  service = await startTestService('embedded', { DATA_DIR: dir });
  proxy = await startTcpProxy(service.baseUrl);
}, 60_000);
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
  proxy.heal();
});
afterAll(async () => {
  await proxy?.close();
  await service?.stop();
  rmSync(dir, { recursive: true, force: true });
});

async function household(): Promise<{ uuid: string; token: string }> {
  const owner = await createUser(service);
  const hub = await registerHub(service, owner);
  return { uuid: hub.uuid, token: await deviceToken(service, hub, owner) };
}

function hubVia(baseUrl: string, uuid: string, token: string, extra: Partial<ConstructorParameters<typeof HubClient>[0]> = {}): { hub: HubClient; events: HubEvent[] } {
  let current: string | null = token;
  const events: HubEvent[] = [];
  const hub = new HubClient({
    baseUrl,
    uuid,
    tokens: { load: () => current, save: (t) => void (current = t) },
    // HTTP straight to the service: the proxy is for the tunnel only.
    fetch: (input, init) => fetch(String(input).replace(baseUrl, service.baseUrl), init),
    reconnect: { baseMs: 200, capMs: 1_000 },
    ...extra,
  });
  hub.on((e) => events.push(e));
  cleanups.push(() => hub.stop());
  return { hub, events };
}

test('a hub stopped while its tunnel attempt hangs: its process exits at once, not when the 30 s attempt would time out', async () => {
  const { uuid, token } = await household();
  proxy.blackhole();
  const run = await runUntilExit('test/review/fixtures/attack-hub-stop-pending.ts', { URL: service.baseUrl, PROXY_URL: proxy.baseUrl, UUID: uuid, TOKEN: token, STOP_AFTER_MS: '1500' }, 40_000);
  expect(run.stderr).toBe('');
  expect(run.stdout).toContain('connected=false');
  expect(run.stdout).not.toMatch(/events=.*connected(,|\n)/);
  expect(run.exitAfterStopMs).toBeLessThan(5_000);
}, 60_000);

test('a hub stopped while its attempt hangs, the path then healed: it never connects, and no reconnect is scheduled', async () => {
  const { uuid, token } = await household();
  proxy.blackhole();
  const { hub, events } = hubVia(proxy.baseUrl, uuid, token);
  await hub.start();
  await new Promise((r) => setTimeout(r, 1_000));
  hub.stop();
  proxy.heal();
  await new Promise((r) => setTimeout(r, 3_000));
  expect(hub.connected).toBe(false);
  expect(events.filter((e) => e.type === 'connected' || e.type === 'reconnecting')).toEqual([]);
}, 30_000);

test('a blackholed service: the attempt is given up after connectTimeoutMs (not the request timeout), retried with backoff, and the hub connects once the path heals', async () => {
  const { uuid, token } = await household();
  proxy.blackhole();
  // The default's 30 s scaled down (test/clients/hub-client.test.ts checks the default itself).
  const { hub, events } = hubVia(proxy.baseUrl, uuid, token, { connectTimeoutMs: 3_000, requestTimeoutMs: 1_000 });
  const startedAt = Date.now();
  await hub.start();
  // Not given up at the request timeout.
  await new Promise((r) => setTimeout(r, 1_500));
  expect(events.filter((e) => e.type === 'reconnecting')).toEqual([]);
  const first = await eventually(() => events.find((e) => e.type === 'reconnecting'), 10_000, 'a retry after the connect timeout');
  const elapsed = Date.now() - startedAt;
  expect(elapsed).toBeGreaterThanOrEqual(2_900);
  expect(elapsed).toBeLessThan(6_000);
  expect(first).toMatchObject({ type: 'reconnecting', attempt: 0 });
  proxy.heal({ reset: true });
  await eventually(() => hub.connected, 15_000, 'connected after heal');
  expect(events.filter((e) => e.type === 'stopped')).toEqual([]);
}, 60_000);

test('the service restarted (same port and data) while an attempt hangs: the hub comes back by itself', async () => {
  const { uuid, token } = await household();
  proxy.blackhole();
  const { hub, events } = hubVia(proxy.baseUrl, uuid, token, { connectTimeoutMs: 5_000 });
  await hub.start();
  await new Promise((r) => setTimeout(r, 1_000));
  const port = new URL(service.baseUrl).port;
  await service.stop();
  service = await startTestService('embedded', { DATA_DIR: dir, PORT: port });
  proxy.heal();
  await eventually(() => hub.connected, 30_000, 'connected after the restart');
  expect(events.filter((e) => e.type === 'stopped')).toEqual([]);
}, 90_000);
