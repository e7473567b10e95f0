import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { api, createUser, GENEROUS_RATE_LIMITS, startTestService, type TestService } from '../support/harness';

/**
 * What the service keeps per device holds one copy of a text where several fields or events
 * say the same (a link's times and the device's, the default port, a role), and the read
 * model's access keys as flat strings, not `userId + ':' + role` ropes. The answers are the
 * same texts: the device, its users, the lists filtered by role, the audit state, and all of
 * them again, byte for byte, after a restart (the start snapshot's documents).
 */

type User = Awaited<ReturnType<typeof createUser>>;

async function text(service: TestService, path: string, user: User): Promise<string> {
  const res = await fetch(`${service.baseUrl}/api/v1${path}`, { headers: { Authorization: `Bearer ${user.accessToken}` } });
  expect(res.status).toBe(200);
  return res.text();
}

test('devices, their users and roles read the same, and the same byte for byte after a restart', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'hhc-kept-texts-'));
  const env = { DATA_DIR: dir, RATE_LIMITS: GENEROUS_RATE_LIMITS };
  let service = await startTestService('embedded', env);
  try {
    const owner = await createUser(service);
    const other = await createUser(service);
    const register = async (fields: Record<string, unknown>): Promise<{ id: string; uuid: string; port: string; createdAt: string }> => {
      const res = await api(service, 'POST', '/devices/register', { token: owner.accessToken, body: { uuid: randomUUID(), deviceId: 'HUB-1', name: 'Hub', ...fields } });
      expect(res.status).toBe(201);
      return res.body as { id: string; uuid: string; port: string; createdAt: string };
    };
    const a = await register({});
    const b = await register({ port: '9000' });
    expect(a.port).toBe('8123');
    expect(b.port).toBe('9000');

    // A later link (its own time), its role changed, and a port set to the default's text.
    expect((await api(service, 'POST', `/devices/${a.id}/link`, { token: owner.accessToken, body: { email: other.email, role: 'editor' } })).status).toBe(201);
    expect((await api(service, 'POST', `/devices/${a.id}/link`, { token: owner.accessToken, body: { email: other.email, role: 'viewer' } })).status).toBe(200);
    expect((await api(service, 'PUT', `/devices/${b.id}`, { token: owner.accessToken, body: { port: '8123' } })).status).toBe(200);
    const token = (await api(service, 'POST', `/devices/auth/${a.uuid}`, { token: owner.accessToken })).body as { token: string };
    expect((await api(service, 'POST', `/devices/heartbeat/${a.uuid}`, { token: token.token })).status).toBe(200);

    const device = JSON.parse(await text(service, `/devices/${a.id}`, owner)) as Record<string, unknown>;
    expect(device).toMatchObject({ id: a.id, port: '8123', role: 'owner', isOnline: true, createdAt: a.createdAt });
    expect(device.users).toEqual(
      expect.arrayContaining([
        { id: owner.id, email: owner.email, role: 'owner' },
        { id: other.id, email: other.email, role: 'viewer' },
      ]),
    );
    expect(JSON.parse(await text(service, `/devices/${b.id}`, owner))).toMatchObject({ port: '8123' });

    // The role filters go by the access keys.
    const ids = async (user: User, query: string): Promise<string[]> =>
      (JSON.parse(await text(service, `/devices${query}`, user)) as { data: Array<{ id: string }> }).data.map((d) => d.id).sort();
    expect(await ids(owner, '?role=owner')).toEqual([a.id, b.id].sort());
    expect(await ids(other, '?role=viewer')).toEqual([a.id]);
    expect(await ids(other, '?role=editor')).toEqual([]);
    expect(await ids(other, '?role=owner,editor')).toEqual([]);

    // The fold: the registrant's link has the device's times, the later one its own.
    const at = new Date(Date.now() + 60_000).toISOString();
    const state = JSON.parse(await text(service, `/devices/${a.id}/state?at=${encodeURIComponent(at)}`, owner)) as {
      device: { port: string; createdAt: string };
      users: Array<{ id: string; role: string; createdAt: string; updatedAt: string }>;
    };
    expect(state.device).toMatchObject({ port: '8123', createdAt: a.createdAt });
    const [mine, theirs] = [owner.id, other.id].map((id) => state.users.find((u) => u.id === id));
    expect(mine).toMatchObject({ role: 'owner', createdAt: a.createdAt, updatedAt: a.createdAt });
    expect(theirs).toMatchObject({ role: 'viewer' });
    expect(theirs?.createdAt).not.toBe(a.createdAt);
    expect(theirs?.updatedAt).not.toBe(theirs?.createdAt);

    const paths: Array<[string, User]> = [
      [`/devices/${a.id}`, owner],
      [`/devices/${b.id}`, owner],
      [`/devices/${a.id}`, other],
      ['/devices?role=owner', owner],
      ['/devices?role=viewer', other],
      ['/devices?sort=lastSeenAt&order=desc', owner],
      ['/users/me', other],
      [`/devices/${a.id}/state?at=${encodeURIComponent(at)}`, owner],
    ];
    const before = await Promise.all(paths.map(([path, user]) => text(service, path, user)));

    await service.stop();
    service = await startTestService('embedded', env);
    const after = await Promise.all(paths.map(([path, user]) => text(service, path, user)));
    expect(after).toEqual(before);
  } finally {
    await service.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}, 120_000);
