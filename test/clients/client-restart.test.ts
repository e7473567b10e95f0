import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { randomUUID } from 'node:crypto';
import { AppClient, type AppTunnelEvent } from '@home-hub-cloud/app-client';
import { HubClient, type HubEvent } from '@home-hub-cloud/hub-client';
import type { DeviceStatus, MessageFromDevice } from '@home-hub-cloud/tunnel-contract';
import { GENEROUS_RATE_LIMITS } from '../support/harness';
import { startServerProcess, TEST_SECRETS, type ServerProcess } from '../support/server';
import { eventually } from '../support/client-timers';

/**
 * Both clients through a real crash of the service: kill -9, then the service started again
 * on the same port and data. The hub comes back by itself (capped backoff, never giving
 * up) and beats again; the app's tunnel comes back, subscribed again, and relays again.
 */

const ROOT = resolve(__dirname, '../..');
const dataDir = mkdtempSync(join(tmpdir(), 'hhc-restart-'));
const env = { ...TEST_SECRETS, DATA_DIR: dataDir, RATE_LIMITS: GENEROUS_RATE_LIMITS };
const email = `restart.${randomUUID().slice(0, 8)}@example.com`;
const password = 'correct horse battery';
let server: ServerProcess | null = null;
const cleanups: Array<() => void> = [];

beforeAll(async () => {
  const code = await new Promise<number | null>((done) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/user.ts', 'create', email, '--password-stdin'], { cwd: ROOT, env: { ...process.env, ...env }, stdio: ['pipe', 'ignore', 'inherit'] });
    child.stdin.end(`${password}\n`);
    child.on('exit', done);
  });
  if (code !== 0) throw new Error(`user create exited ${String(code)}`);
  server = await startServerProcess(env, 60_000);
}, 120_000);
afterAll(async () => {
  for (const cleanup of cleanups.splice(0)) cleanup();
  await server?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

test('kill -9 and a restart: the hub reconnects and beats again, the app re-subscribes and relays again', async () => {
  const first = server as ServerProcess;
  const app = new AppClient({ baseUrl: first.baseUrl });
  await app.login(email, password);
  const uuid = randomUUID();
  expect((await app.api.POST('/devices/register', { body: { uuid, deviceId: 'HUB-R', name: 'Hall' } })).response.status).toBe(201);
  const issued = await app.api.POST('/devices/auth/{uuid}', { params: { path: { uuid } } });
  let token = issued.data?.token ?? null;
  const hubEvents: HubEvent[] = [];
  const hub = new HubClient({ baseUrl: first.baseUrl, uuid, tokens: { load: () => token, save: (t) => void (token = t) }, heartbeatIntervalMs: 1_000, reconnect: { baseMs: 200, capMs: 1_000 } });
  cleanups.push(() => hub.stop());
  hub.on((e) => hubEvents.push(e));
  hub.onMessage((message, reply) => void reply({ type: 'pong', payload: message.payload }));
  await hub.start();
  const tunnel = app.tunnel({ reconnect: { baseMs: 200, capMs: 1_000 } });
  cleanups.push(() => tunnel.close());
  const tunnelEvents: AppTunnelEvent[] = [];
  const statuses: DeviceStatus[] = [];
  const replies: MessageFromDevice[] = [];
  tunnel.on((e) => tunnelEvents.push(e));
  tunnel.onStatus((s) => statuses.push(s));
  tunnel.onMessage((m) => replies.push(m));
  await tunnel.connected();
  await eventually(() => hub.connected, 10_000, 'hub connected');
  expect((await tunnel.subscribe(uuid)).success).toBe(true);

  await first.kill();
  const beatsBefore = hubEvents.filter((e) => e.type === 'heartbeat' && e.ok).length;
  // Down for a while: the hub keeps trying (and its heartbeats fail) without giving up.
  await eventually(() => hubEvents.filter((e) => e.type === 'reconnecting').length >= 3, 20_000, 'hub retrying');
  server = await startServerProcess({ ...env, PORT: String(first.port) }, 60_000);

  await eventually(() => hub.connected && tunnel.isConnected, 30_000, 'both back');
  await eventually(() => hubEvents.filter((e) => e.type === 'heartbeat' && e.ok).length > beatsBefore, 10_000, 'a heartbeat after the restart');
  await eventually(() => tunnelEvents.some((e) => e.type === 'resubscribed' && e.deviceUuids.includes(uuid)), 10_000, 'resubscribed');
  expect(hubEvents.filter((e) => e.type === 'stopped')).toEqual([]);
  expect(tunnelEvents.filter((e) => e.type === 'closed')).toEqual([]);
  // Every wait was inside the cap.
  const delays = hubEvents.flatMap((e) => (e.type === 'reconnecting' ? [e.delayMs] : []));
  expect(Math.max(...delays)).toBeLessThanOrEqual(1_000);
  // The relay works again, both ways.
  const sent = await tunnel.send(uuid, 'ping', { n: 1 }, 'after-restart');
  expect(sent.delivered).toBe(true);
  await eventually(() => replies.find((m) => m.replyTo === 'after-restart'), 10_000, 'the reply');
  // The session survived the crash: REST still works with the same tokens (and refreshes).
  expect((await app.api.GET('/users/me')).response.status).toBe(200);
  await expect(app.refresh()).resolves.toMatchObject({ accessToken: expect.any(String) });
}, 180_000);
