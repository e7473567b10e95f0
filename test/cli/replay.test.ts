import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { api, createUser, startTestService, type TestService } from '../support/harness';
import { runReplay } from '../support/replay';
import { snapshotReadModels } from '../support/snapshot';

/**
 * `npm run replay -- history|state|rebuild` prints what the endpoints answer: on a stopped
 * embedded service's DATA_DIR, and against a running distributed stack.
 */

type User = Awaited<ReturnType<typeof createUser>>;

interface Traced {
  readonly device: { id: string; uuid: string };
  /** Endpoint answers keyed by the CLI arguments that must print the same JSON. */
  readonly expected: ReadonlyArray<{ args: string[]; body: unknown }>;
}

/** A device with some history, and what the auditor endpoints say about it. */
async function traceDevice(service: TestService): Promise<Traced> {
  const [owner, editor]: User[] = await Promise.all([createUser(service), createUser(service)]);
  const reg = await api(service, 'POST', '/devices/register', { token: owner.accessToken, body: { uuid: randomUUID(), deviceId: 'HUB-CLI', name: 'Cli' } });
  const device = reg.body as { id: string; uuid: string };
  await api(service, 'POST', `/devices/${device.uuid}/link`, { token: owner.accessToken, body: { email: editor.email, role: 'editor' } });
  await api(service, 'PUT', `/devices/${device.uuid}`, { token: owner.accessToken, body: { name: 'Renamed' } });
  const auth = await api(service, 'POST', `/devices/auth/${device.uuid}`, { token: owner.accessToken });
  const token = (auth.body as { token: string }).token;
  for (let i = 0; i < 2; i++) await api(service, 'POST', `/devices/heartbeat/${device.uuid}`, { token, body: { ipAddress: `10.1.1.${i}` } });

  const get = async (path: string): Promise<unknown> => {
    const res = await api(service, 'GET', path, { token: owner.accessToken });
    expect(res.status).toBe(200);
    return res.body;
  };
  const linkedAt = ((await get(`/devices/${device.uuid}/history`)) as { data: Array<{ occurredAt: string }> }).data[2]?.occurredAt as string;
  return {
    device,
    expected: [
      { args: ['history', device.uuid], body: await get(`/devices/${device.uuid}/history`) },
      { args: ['history', device.id, '--limit', '3', '--after', '1'], body: await get(`/devices/${device.id}/history?limit=3&after=1`) },
      {
        args: ['history', device.uuid, '--include', 'heartbeats', '--limit', '4', '--heartbeat-after', '0'],
        body: await get(`/devices/${device.uuid}/history?include=heartbeats&limit=4&heartbeatAfter=0`),
      },
      { args: ['state', device.uuid, '--at', linkedAt], body: await get(`/devices/${device.uuid}/state?at=${encodeURIComponent(linkedAt)}`) },
    ],
  };
}

async function expectSameJson(env: Readonly<Record<string, string>>, traced: Traced): Promise<void> {
  for (const { args, body } of traced.expected) {
    const run = await runReplay(env, args);
    expect({ args, code: run.code, stderr: run.stderr }).toEqual({ args, code: 0, stderr: '' });
    expect(JSON.parse(run.stdout)).toEqual(body);
  }
}

describe('npm run replay (embedded: a stopped service\'s DATA_DIR)', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'hhc-replay-'));
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  test('refuses a running service\'s log, then prints the endpoints\' JSON once it is stopped; rebuild replays the log', async () => {
    const service = await startTestService('embedded', { DATA_DIR: dataDir });
    let traced: Traced;
    let live: Awaited<ReturnType<typeof snapshotReadModels>>;
    try {
      traced = await traceDevice(service);
      live = await snapshotReadModels(service.readStore);
      const locked = await runReplay({ DATA_DIR: dataDir }, ['history', traced.device.uuid]);
      expect(locked.code).toBe(1);
      expect(locked.stderr).toContain('POST /api/v1/admin/read-models/rebuild');
    } finally {
      await service.stop();
    }

    await expectSameJson({ DATA_DIR: dataDir }, traced);

    const rebuild = await runReplay({ DATA_DIR: dataDir }, ['rebuild']);
    expect(rebuild.code).toBe(0);
    const report = JSON.parse(rebuild.stdout) as { events: number; collections: Record<string, number> };
    expect(report.collections).toEqual(Object.fromEntries(Object.entries(live).map(([name, docs]) => [name, docs.length])));
    expect(report.events).toBeGreaterThan(0);

    const usage = await runReplay({ DATA_DIR: dataDir }, ['history', traced.device.uuid, '--limit', '500']);
    expect({ code: usage.code, stderr: usage.stderr.trim() }).toEqual({ code: 2, stderr: 'limit must not be greater than 100' });
    const unknown = await runReplay({ DATA_DIR: dataDir }, ['state', randomUUID()]);
    expect({ code: unknown.code, stderr: unknown.stderr.trim() }).toEqual({ code: 1, stderr: 'Device not found' });
  }, 60_000);
});

describe('npm run replay (distributed: against the running stack)', () => {
  let service: TestService;
  beforeAll(async () => {
    service = await startTestService('distributed');
  }, 60_000);
  afterAll(async () => {
    await service?.stop();
  });

  test('history and state print what the endpoints answer', async () => {
    await expectSameJson(service.env, await traceDevice(service));
  }, 60_000);
});
