import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { api, CRM_KEY, createUser, generousServiceForDescribe, GENEROUS_RATE_LIMITS, MODES, startTestService, type Mode, type TestService } from '../support/harness';
import { startTestSmtpServer, type TestSmtpServer } from '../support/smtp';
import { filesUnder } from '../support/data-dir-bytes';

/**
 * Erasure and export at their edges (decisions §11): devices deleted before the erasure, an
 * erasure stopped half-way and asked for again, the export of events on devices deleted or
 * left since, and the validation message of a CRM id of 0.
 */

/** The files under `dir` that hold any of `needles`, as `file: needle`. */
function holding(dir: string, needles: readonly string[]): string[] {
  return filesUnder(dir).flatMap((file) => {
    const bytes = readFileSync(file);
    return needles.filter((n) => bytes.includes(Buffer.from(n, 'utf8'))).map((n) => `${file.slice(dir.length + 1)}: ${n}`);
  });
}

async function syncIdOf(service: TestService, token: string): Promise<number> {
  const res = await api(service, 'GET', '/users/me/export', { token });
  return (res.body as { user: { syncId: number } }).user.syncId;
}

describe.each<Mode>(MODES)('erasure of devices deleted or left before, and their export (%s mode)', (mode) => {
  let service: TestService;

  beforeAll(async () => {
    service = await startTestService(mode, { RATE_LIMITS: GENEROUS_RATE_LIMITS });
  }, 60_000);

  afterAll(async () => {
    await service?.stop();
  });

  test('a device the person registered and deleted themselves is no longer readable once the person is erased', async () => {
    const tag = randomUUID().slice(0, 8);
    const admin = await createUser(service, { role: 'admin' });
    const person = await createUser(service);
    const uuid = randomUUID();
    const secrets = [`Cabin of ${tag}`, `10.66.${tag.charCodeAt(0) % 200}.7`, `floorplan-${tag}`];
    const registered = await api(service, 'POST', '/devices/register', {
      token: person.accessToken,
      body: { uuid, deviceId: 'CABIN-1', name: secrets[0], ipAddress: secrets[1], metadata: { plan: secrets[2] } },
    });
    expect(registered.status).toBe(201);
    expect((await api(service, 'DELETE', `/devices/${uuid}`, { token: person.accessToken })).status).toBe(200);
    const syncId = await syncIdOf(service, person.accessToken);

    const erased = await api(service, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id: syncId } });
    expect(erased).toMatchObject({ status: 200, body: { erased: true, userId: person.id } });

    // §11: after an erasure nothing the service keeps holds that personal data in readable
    // form; auditors see the events with the erased fields as "[erased]". The device was the
    // person's alone (household data belonging to its owners), written by them.
    const history = await api(service, 'GET', `/devices/${uuid}/history`, { token: admin.accessToken });
    expect(history.status).toBe(200);
    const text = JSON.stringify(history.body);
    expect(secrets.filter((s) => text.includes(s))).toEqual([]);
  });

  test('the export holds the events the person caused on a device they have since deleted', async () => {
    const person = await createUser(service);
    const uuid = randomUUID();
    const name = `Deleted hub ${randomUUID().slice(0, 8)}`;
    expect((await api(service, 'POST', '/devices/register', { token: person.accessToken, body: { uuid, deviceId: 'GONE-1', name } })).status).toBe(201);
    expect((await api(service, 'DELETE', `/devices/${uuid}`, { token: person.accessToken })).status).toBe(200);

    // §11: `events` are those of the user's own stream and those the user caused as actor.
    // The service still keeps these (the admin history shows them), so the export must too.
    const res = await api(service, 'GET', '/users/me/export', { token: person.accessToken });
    expect(res.status).toBe(200);
    const events = (res.body as { events: Array<{ stream: string; type: string }> }).events;
    expect(events.filter((e) => e.stream === `device-${uuid}`).map((e) => e.type)).toEqual(
      expect.arrayContaining(['DeviceRegistered', 'UserLinked', 'DeviceDeleted']),
    );
  });

  test('a device registered again by another household after the person deleted it keeps that household\'s data readable', async () => {
    const tag = randomUUID().slice(0, 8);
    const admin = await createUser(service, { role: 'admin' });
    const person = await createUser(service);
    const other = await createUser(service);
    const uuid = randomUUID();
    expect((await api(service, 'POST', '/devices/register', { token: person.accessToken, body: { uuid, deviceId: 'MOVED-1', name: `Old home ${tag}` } })).status).toBe(201);
    expect((await api(service, 'DELETE', `/devices/${uuid}`, { token: person.accessToken })).status).toBe(200);
    const newName = `New home ${tag}`;
    expect((await api(service, 'POST', '/devices/register', { token: other.accessToken, body: { uuid, deviceId: 'MOVED-1', name: newName } })).status).toBe(201);

    const syncId = await syncIdOf(service, person.accessToken);
    expect((await api(service, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id: syncId } })).status).toBe(200);

    // One data key per device uuid spans both registrations: it is kept, so the other household reads its device.
    const device = await api(service, 'GET', `/devices/${uuid}`, { token: other.accessToken });
    expect(device).toMatchObject({ status: 200, body: { name: newName } });
    const history = await api(service, 'GET', `/devices/${uuid}/history`, { token: admin.accessToken });
    expect(JSON.stringify(history.body)).toContain(newName);
  });

  test('the export holds the events the person caused on a device they have since left', async () => {
    const owner = await createUser(service);
    const person = await createUser(service);
    const uuid = randomUUID();
    expect((await api(service, 'POST', '/devices/register', { token: owner.accessToken, body: { uuid, deviceId: 'LEFT-1', name: 'Shared hub' } })).status).toBe(201);
    expect((await api(service, 'POST', `/devices/${uuid}/link`, { token: owner.accessToken, body: { email: person.email, role: 'viewer' } })).status).toBeLessThan(300);
    expect((await api(service, 'DELETE', `/devices/${uuid}/users/${person.id}`, { token: person.accessToken })).status).toBe(200);

    const res = await api(service, 'GET', '/users/me/export', { token: person.accessToken });
    const events = (res.body as { events: Array<{ stream: string; type: string }> }).events;
    expect(events.filter((e) => e.stream === `device-${uuid}`).map((e) => e.type)).toEqual(['UserUnlinked']);
    expect((res.body as { devices: unknown[] }).devices).toEqual([]);
  });
});

describe('an erasure stopped half-way (embedded mode)', () => {
  let smtp: TestSmtpServer;
  let service: TestService;
  const dirs: string[] = [];

  beforeAll(async () => {
    smtp = await startTestSmtpServer();
    service = await startTestService('embedded', { SMTP_URL: smtp.url, RATE_LIMITS: GENEROUS_RATE_LIMITS });
  }, 60_000);

  afterAll(async () => {
    await service?.stop();
    await smtp?.stop();
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });


  test('an erasure stopped after UserErased (the start snapshot could not be written) is finished by asking again', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hhc-erasure-'));
    dirs.push(dir);
    const env = { SMTP_URL: smtp.url, RATE_LIMITS: GENEROUS_RATE_LIMITS, DATA_DIR: dir };
    const tag = randomUUID().slice(0, 8);
    const email = `snapshot.erased.${tag}@example.net`;
    let first = await startTestService('embedded', env);
    let syncId = Number.NaN;
    try {
      const person = await createUser(first, { email, firstName: `Snapper${tag}` });
      syncId = await syncIdOf(first, person.accessToken);
    } finally {
      await first.stop(); // the shutdown snapshot holds the person's read-model documents
    }
    expect(holding(dir, [email])).not.toEqual([]);

    first = await startTestService('embedded', env);
    try {
      const blocker = join(dir, 'read-models.snapshot.tmp');
      mkdirSync(blocker);
      const interrupted = await api(first, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id: syncId } });
      rmSync(blocker, { recursive: true });
      expect(interrupted.status).toBeGreaterThanOrEqual(500);
      expect(holding(dir, [email])).not.toEqual([]);

      const again = await api(first, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id: syncId } });
      expect(again).toMatchObject({ status: 200, body: { erased: true } });
      expect(holding(dir, [email, `Snapper${tag}`])).toEqual([]);
    } finally {
      await first.stop();
    }
  }, 120_000);

  test('an erasure interrupted before UserErased (the key store write failed) is finished by asking again, and stays finished after a restart', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hhc-erasure-'));
    dirs.push(dir);
    const env = { SMTP_URL: smtp.url, RATE_LIMITS: GENEROUS_RATE_LIMITS, DATA_DIR: dir };
    const tag = randomUUID().slice(0, 8);
    const email = `half.erased.${tag}@example.net`;
    const deviceName = `Half hub ${tag}`;
    let first = await startTestService('embedded', env);
    let person: { id: string; accessToken: string };
    const uuid = randomUUID();
    try {
      person = await createUser(first, { email, firstName: `Halbert${tag}` });
      expect((await api(first, 'POST', '/devices/register', { token: person.accessToken, body: { uuid, deviceId: 'HALF-1', name: deviceName } })).status).toBe(201);
    } finally {
      await first.stop(); // the shutdown snapshot now holds the person's read-model documents
    }
    const syncId = Number(/"syncId":(\d+)/.exec(readFileSync(join(dir, 'read-models.snapshot'), 'latin1'))?.[1] ?? 'NaN');

    first = await startTestService('embedded', env);
    try {
      const admin = await createUser(first, { role: 'admin' });
      // The credential store cannot rewrite its file: the erasure stops after its events
      // were appended, where a kill -9 at that moment would also leave it.
      const blocker = join(dir, 'credentials.jsonl.tmp');
      mkdirSync(blocker);
      const interrupted = await api(first, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id: syncId } });
      rmSync(blocker, { recursive: true });
      expect(interrupted.status).toBeGreaterThanOrEqual(500);

      // "Every step is idempotent, so an erasure that failed half-way is finished by asking again."
      const again = await api(first, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id: syncId } });
      expect(again).toMatchObject({ status: 200, body: { erased: true, userId: person.id } });

      const left: string[] = [];
      // The person's and their device's data keys are gone from the key store...
      const credentials = readFileSync(join(dir, 'credentials.jsonl'), 'utf8');
      for (const subject of [`user:${person.id}`, `device:${uuid}`]) if (credentials.includes(`"${subject}"`)) left.push(`credentials.jsonl: key of ${subject}`);
      // ...and no file holds their data in the clear (the snapshot was replaced).
      left.push(...holding(dir, [email, deviceName, `Halbert${tag}`]));
      expect(left).toEqual([]);
      await first.stop();

      // After a restart the erased data does not come back.
      first = await startTestService('embedded', env);
      const history = await api(first, 'GET', `/devices/${uuid}/history`, { token: (await createUser(first, { role: 'admin' })).accessToken });
      expect(JSON.stringify(history.body)).not.toContain(deviceName);
      void admin;
    } finally {
      await first.stop();
    }
  }, 120_000);
});

describe('erasure: validation messages', () => {
  const service = generousServiceForDescribe('embedded');

  test('erase-customer with id 0 is refused with a message that is true of 0', async () => {
    const res = await api(service(), 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id: 0 } });
    expect(res.status).toBe(400);
    // 0 is refused (ids are positive), so "id must not be less than 0" would mislead the CRM.
    expect((res.body as { message: string[] }).message).toEqual(['id must be a positive number']);
  });

  test('sync-customer with id 0 gets the same message', async () => {
    const res = await api(service(), 'POST', '/auth/sync-customer', {
      headers: { 'X-Internal-Api-Key': CRM_KEY },
      body: { id: 0, first_name: 'Zero', last_name: 'Id', email: `zero.${randomUUID().slice(0, 8)}@example.net`, active: true },
    });
    expect(res.status).toBe(400);
    expect((res.body as { message: string[] }).message).toEqual(['id must be a positive number']);
  });
});

describe('erasure: logs (embedded mode, no SMTP_URL: the default)', () => {
  const service = generousServiceForDescribe('embedded');

  test('after an erasure the service log holds nothing of the person (a reset they asked for included)', async () => {
    const email = `logged.${randomUUID().slice(0, 8)}@example.net`;
    const person = await createUser(service(), { email });
    expect((await api(service(), 'POST', '/auth/password-reset/request', { body: { email } })).status).toBe(202);
    const syncId = await syncIdOf(service(), person.accessToken);
    expect((await api(service(), 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id: syncId } })).status).toBe(200);
    // §11: after an erasure nothing the service keeps (… logs) holds that personal data in readable form.
    expect(service().logs()).not.toContain(email);
  });
});

