import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { api, CRM_KEY, GENEROUS_RATE_LIMITS, MODES, type Mode } from '../support/harness';
import { PROCESS_TEST_TIMEOUT_MS, startServerProcess, TEST_SECRETS, type ServerProcess } from '../support/server';
import { eventually, ready, testTokens as tokens } from '../support/service-probes';
import { startStack, type Stack } from '../support/stack';

/**
 * An erasure killed (kill -9) right after `UserErased` was appended, before the person's
 * e-mail reservation was released (decisions §11: "the e-mail and the CRM id are free again").
 * The service process loads test/support/faults/kill-before-email-release.ts, which kills it
 * with SIGKILL at that instant; a new process (no cache of the old one) then serves.
 */

const ERASED = '[erased]';
const ADMIN = 'admin.crash@example.com';
const HOOK = join(__dirname, '..', 'support', 'faults', 'kill-before-email-release.ts');
const crm = { 'X-Internal-Api-Key': CRM_KEY };

async function sync(service: ServerProcess, id: number, email: string, firstName: string): Promise<{ status: number; id: string }> {
  const res = await api(service, 'POST', '/auth/sync-customer', { headers: crm, body: { id, first_name: firstName, last_name: 'Crash', email, active: true } });
  return { status: res.status, id: (res.body as { user?: { id: string } }).user?.id ?? '' };
}

describe.each<Mode>(MODES)('an erasure killed between UserErased and the release of the e-mail (%s mode)', (mode) => {
  let stack: Stack | null = null;
  let dir: string | null = null;
  let env: Record<string, string>;
  const running: ServerProcess[] = [];

  beforeAll(async () => {
    const common = { RATE_LIMITS: GENEROUS_RATE_LIMITS, ADMIN_EMAILS: ADMIN };
    if (mode === 'embedded') {
      dir = mkdtempSync(join(tmpdir(), 'hhc-erasure-crash-'));
      // The data-key KEK is left to DATA_DIR, as an embedded deployment has it.
      const { DATA_KEY_ENCRYPTION_KEY: _generatedInDataDir, ...secrets } = TEST_SECRETS;
      env = { ...secrets, ...common, DATA_DIR: dir };
    } else {
      stack = await startStack();
      // The killed process's projector lease passes on after this long.
      env = { ...TEST_SECRETS, ...common, ...stack.env, PROJECTOR_LEASE_MS: '3000' };
    }
  }, 60_000);

  afterAll(async () => {
    for (const service of running) await service.kill();
    await stack?.stop();
    if (dir !== null) rmSync(dir, { recursive: true, force: true });
  });

  test('after a restart the address serves a new account, the person stays erased, and erasing them again answers as the spec says', async () => {
    const tag = randomUUID().slice(0, 8);
    const email = `crash.${tag}@example.net`;
    const firstName = `Crashy${tag}`;
    const deviceName = `Crash hub ${tag}`;
    const syncId = 700_000 + Math.floor(Math.random() * 200_000);

    const dying = await startServerProcess(env, undefined, [], [HOOK]);
    running.push(dying);
    const person = await sync(dying, syncId, email, firstName);
    expect(person.status).toBe(201);
    const token = tokens.signAccess({ sub: person.id, email, role: 'user' });
    const hub = randomUUID();
    expect((await api(dying, 'POST', '/devices/register', { token, body: { uuid: hub, deviceId: 'CRASH-1', name: deviceName } })).status).toBe(201);

    // The process dies inside the erasure: the request gets no answer.
    const erasing = await api(dying, 'POST', '/auth/erase-customer', { headers: crm, body: { id: syncId } }).then(
      (res) => `answered ${res.status}`,
      () => 'no answer',
    );
    await dying.kill();
    expect(erasing).toBe('no answer');

    const service = await startServerProcess(env);
    running.push(service);
    // Distributed: it serves once the killed process's projector lease has passed on to it.
    if (mode === 'distributed') await eventually(async () => service.output(), (out) => out.includes('projector lease acquired'), 'the new process projecting');
    await eventually(() => ready(service), (r) => r.status === 200, 'the new process ready');

    // The address is free: a new customer gets it.
    const newcomer = await sync(service, syncId + 1, email, `Newcomer${tag}`);
    expect(newcomer.status).toBe(201);
    expect(newcomer.id).not.toBe(person.id);

    // The person stays erased: their token is refused, their hub gone, its history erased.
    expect(await api(service, 'GET', '/users/me', { token })).toMatchObject({ status: 401, body: { message: 'Token has been revoked' } });
    const admin = await sync(service, syncId + 2, ADMIN, 'Admin');
    expect(admin.status).toBe(201);
    const adminToken = tokens.signAccess({ sub: admin.id, email: ADMIN, role: 'admin' });
    const history = await api(service, 'GET', `/devices/${hub}/history`, { token: adminToken });
    expect(history.status).toBe(200);
    const events = (history.body as { data: Array<{ type: string; data: Record<string, unknown> }> }).data;
    expect(events.find((e) => e.type === 'DeviceRegistered')?.data).toMatchObject({ uuid: hub, name: ERASED });
    expect(JSON.stringify(history.body)).not.toContain(deviceName);

    // Asking again answers as for any erased customer (§11: 200, idempotent), twice, and the newcomer keeps the address.
    for (let i = 0; i < 2; i++) {
      expect(await api(service, 'POST', '/auth/erase-customer', { headers: crm, body: { id: syncId } })).toMatchObject({ status: 200, body: { erased: true, userId: person.id } });
    }
    expect(await api(service, 'DELETE', '/users/me', { token, body: { password: 'whatever-it-was' } })).toMatchObject({ status: 401, body: { message: 'Token has been revoked' } });
    const newcomerToken = tokens.signAccess({ sub: newcomer.id, email, role: 'user' });
    expect(await api(service, 'GET', '/users/me', { token: newcomerToken })).toMatchObject({ status: 200, body: { email, firstName: `Newcomer${tag}` } });
    // The CRM id is free again too: a later sync of it creates another new user.
    const reused = await sync(service, syncId, `crash.again.${tag}@example.net`, `Again${tag}`);
    expect(reused.status).toBe(201);
    expect([person.id, newcomer.id]).not.toContain(reused.id);

    // Nothing of the person in the service's logs, and (embedded) their data key is gone from the key store.
    for (const output of [dying.output(), service.output()]) expect([email, firstName, deviceName].filter((s) => output.includes(s))).toEqual([]);
    if (dir !== null) expect(readFileSync(join(dir, 'credentials.jsonl'), 'utf8')).not.toContain(`"user:${person.id}"`);
  }, 2 * PROCESS_TEST_TIMEOUT_MS);
});
