import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import Redis from 'ioredis';
import { MongoClient } from 'mongodb';
import { createEsdbEventStore } from '../../src/infra/eventstore/esdb';
import { TIERS } from '../../src/ratelimit/limiter';
import { createAccount, login, type LoginBody } from '../support/accounts';
import { api, CRM_KEY, MODES, startTestService, type Mode, type TestService } from '../support/harness';
import { startTestSmtpServer, type TestSmtpServer } from '../support/smtp';
import { connect, refusal } from '../support/tunnel';
import type { TunnelError } from '../../src/tunnel/events';
import { filesUnder, foundIn } from '../support/data-dir-bytes';

/**
 * Erasure (decisions §11), proven by scanning bytes: a person's e-mail, names, CRM fields,
 * session IPs and user agents and device data are written through every path, the person is
 * erased, and then none of those strings is found anywhere the service keeps anything: every
 * file under DATA_DIR, every event as the EventStoreDB client reads it, every MongoDB
 * document, every Redis key and value, the service's log. Another household is unaffected,
 * auditors still see the events (personal fields "[erased]", ids kept), a rebuild works.
 */

const RATE_LIMITS = TIERS.map((tier) => (tier === 'export' ? 'export=5/3600' : `${tier}=1000000/60`)).join(',');
const ERASED = '[erased]';

async function redisDump(url: string): Promise<string> {
  const redis = new Redis(url, { maxRetriesPerRequest: 1 });
  const parts: string[] = [];
  try {
    for (const key of await redis.keys('*')) {
      parts.push(key);
      const type = await redis.type(key);
      if (type === 'string') parts.push(String(await redis.get(key)));
      else if (type === 'hash') parts.push(JSON.stringify(await redis.hgetall(key)));
      else if (type === 'list') parts.push(JSON.stringify(await redis.lrange(key, 0, -1)));
      else if (type === 'set') parts.push(JSON.stringify(await redis.smembers(key)));
      else if (type === 'zset') parts.push(JSON.stringify(await redis.zrange(key, 0, -1, 'WITHSCORES')));
      else if (type === 'stream') parts.push(JSON.stringify(await redis.xrange(key, '-', '+')));
    }
  } finally {
    redis.disconnect();
  }
  return parts.join('\n');
}

async function mongoDump(uri: string): Promise<{ text: string; documents: number }> {
  const client = await MongoClient.connect(uri);
  const names = ['users', 'devices', 'sessions', 'checkpoints', 'credentials', 'readmodel_generation'];
  const all = [...names, ...[1, 2, 3, 4].flatMap((g) => names.map((n) => `g${g}_${n}`))];
  let text = '';
  let documents = 0;
  try {
    for (const name of all) {
      const docs = await client.db().collection(name).find({}).toArray();
      documents += docs.length;
      text += JSON.stringify(docs);
    }
  } finally {
    await client.close();
  }
  return { text, documents };
}

async function esdbDump(url: string): Promise<{ text: string; events: number }> {
  const store = createEsdbEventStore(url);
  let text = '';
  let events = 0;
  const subscription = store.subscribe();
  try {
    for await (const item of subscription) {
      if (item.kind === 'caught-up') break;
      events++;
      text += JSON.stringify({ s: item.event.streamName, t: item.event.type, d: item.event.data, m: item.event.metadata });
    }
  } finally {
    await subscription.close();
    await store.close();
  }
  return { text, events };
}

describe.each<Mode>(MODES)('erasure by crypto-shredding (%s mode)', (mode) => {
  let smtp: TestSmtpServer;
  let service: TestService;
  const tag = randomUUID().slice(0, 8);
  const person = {
    email: `ida.shredme.${tag}@example.net`,
    firstName: `Idalindra${tag}`,
    lastName: `Vergessenmann${tag}`,
    company: `Shredco Unique ${tag} GmbH`,
    ips: [`203.0.113.${Number.parseInt(tag.slice(0, 2), 16) % 200 + 20}`, '198.18.77.131'],
    agents: [`ShredBrowser/${tag}`, `ShredApp/${tag}.2`],
    deviceName: `Ida attic hub ${tag}`,
    deviceIp: '10.213.77.41',
    deviceIpLater: '10.213.77.42',
    metadata: `ida-floorplan-${tag}`,
    renamed: `Ida cellar hub ${tag}`,
  };
  const secrets = (): string[] => [
    person.email,
    person.firstName,
    person.lastName,
    person.company,
    ...person.ips,
    ...person.agents,
    person.deviceName,
    person.deviceIp,
    person.deviceIpLater,
    person.metadata,
    person.renamed,
  ];
  const other = { email: `quentin.keeps.${tag}@example.net`, firstName: `Quentin${tag}`, device: `Quentin hub ${tag}` };
  const syncId = 700_000 + Math.floor(Math.random() * 100_000);

  beforeAll(async () => {
    smtp = await startTestSmtpServer();
    service = await startTestService(mode, { SMTP_URL: smtp.url, TRUST_PROXY: 'loopback', RATE_LIMITS, ADMIN_EMAILS: other.email });
  }, 60_000);

  afterAll(async () => {
    await service?.stop();
    await smtp?.stop();
  });

  test('DELETE /users/me: the wrong password is 401, the right one erases', async () => {
    const account = await createAccount(service, smtp);
    const session = await login(service, account.email, account.password);
    expect(await api(service, 'DELETE', '/users/me', { token: session.accessToken, body: { password: 'not-the-password' } })).toMatchObject({
      status: 401,
      body: { message: 'Invalid email or password' },
    });
    expect((await api(service, 'DELETE', '/users/me', { token: session.accessToken, body: {} })).status).toBe(400);
    const live = await connect(service, session.accessToken);
    expect(await api(service, 'DELETE', '/users/me', { token: session.accessToken, body: { password: account.password } })).toMatchObject({ status: 200, body: { success: true } });
    // Their live socket is told and closed; a new handshake with the token is refused.
    expect((await live.next<TunnelError>('tunnel:error', (e) => e.code === 'ACCESS_REVOKED')).code).toBe('ACCESS_REVOKED');
    await live.next('disconnect');
    expect((await refusal(service, { token: session.accessToken })).message).toBe('unauthorized');
    expect(await api(service, 'GET', '/users/me', { token: session.accessToken })).toMatchObject({ status: 401, body: { message: 'Token has been revoked' } });
    expect((await api(service, 'POST', '/auth/login', { body: { email: account.email, password: account.password } })).status).toBe(401);
  }, 60_000);
  test('a person written through every path is erased, and nothing of theirs remains anywhere', async () => {
    // The person, from the CRM, with CRM fields; a password through the reset flow; two logins from two addresses.
    const synced = await api(service, 'POST', '/auth/sync-customer', {
      headers: { 'X-Internal-Api-Key': CRM_KEY },
      body: { id: syncId, first_name: person.firstName, last_name: person.lastName, email: person.email, company_name: person.company, user_type: 2, mrr: 42.5, contract_language: 'de', active: true },
    });
    expect(synced.status).toBe(201);
    const personId = (synced.body as { user: { id: string } }).user.id;
    const password = `pw-${tag}-Secret!`;
    const { requestResetToken } = await import('../support/accounts');
    const { token: resetToken } = await requestResetToken(service, smtp, person.email);
    expect((await api(service, 'POST', '/auth/password-reset/confirm', { body: { token: resetToken, password } })).status).toBe(200);
    const sessions: LoginBody[] = [];
    for (let i = 0; i < 2; i++) {
      const res = await api(service, 'POST', '/auth/login', {
        body: { email: person.email, password },
        headers: { 'X-Forwarded-For': person.ips[i] as string, 'User-Agent': person.agents[i] as string },
      });
      expect(res.status).toBe(201);
      sessions.push(res.body as LoginBody);
    }
    const refreshed = await api(service, 'POST', '/auth/refresh', {
      body: { refreshToken: sessions[0]?.refreshToken },
      headers: { 'X-Forwarded-For': person.ips[1] as string, 'User-Agent': person.agents[1] as string },
    });
    expect(refreshed.status).toBe(201);
    const token = (refreshed.body as { accessToken: string }).accessToken;

    // Another household: an admin (to audit), with a hub of their own that the person is linked to.
    const q = await createAccount(service, smtp, { email: other.email, firstName: other.firstName });
    const qToken = (await login(service, q.email, q.password)).accessToken;
    const qHub = randomUUID();
    expect((await api(service, 'POST', '/devices/register', { token: qToken, body: { uuid: qHub, deviceId: 'Q-1', name: other.device } })).status).toBe(201);
    expect((await api(service, 'POST', `/devices/${qHub}/link`, { token: qToken, body: { email: person.email, role: 'viewer' } })).status).toBe(201);

    // The person's own hub: registered, renamed, heartbeats with addresses and metadata; the other household linked to it.
    const hub = randomUUID();
    const registered = await api(service, 'POST', '/devices/register', {
      token,
      body: { uuid: hub, deviceId: 'IDA-1', name: person.deviceName, ipAddress: person.deviceIp, metadata: { plan: person.metadata } },
    });
    expect(registered.status).toBe(201);
    expect((await api(service, 'PUT', `/devices/${hub}`, { token, body: { name: person.renamed } })).status).toBe(200);
    expect((await api(service, 'POST', `/devices/${hub}/link`, { token, body: { email: q.email, role: 'viewer' } })).status).toBe(201);
    const hubToken = ((await api(service, 'POST', `/devices/auth/${hub}`, { token })).body as { token: string }).token;
    const beat = await api(service, 'POST', `/devices/heartbeat/${hub}`, { token: hubToken, body: { ipAddress: person.deviceIpLater, metadata: { plan: person.metadata, v: 2 } } });
    expect(beat.status).toBe(200);

    // The export, checked against what was written (before the erasure).
    const exported = await api(service, 'GET', '/users/me/export', { token });
    expect(exported.status).toBe(200);
    const doc = exported.body as {
      user: { id: string; email: string; firstName: string; lastName: string };
      crm: { companyName: string; mrr: string };
      profile: { language: string };
      devices: Array<{ device: { uuid: string; name: string; ipAddress: string; metadata: unknown }; role: string; linkedAt: string }>;
      sessions: Array<{ familyId: string; ip: string; userAgent: string; status: string }>;
      events: Array<{ stream: string; type: string; data: Record<string, unknown> }>;
    };
    expect(doc.user).toMatchObject({ id: personId, email: person.email, firstName: person.firstName, lastName: person.lastName });
    expect(doc.crm).toMatchObject({ companyName: person.company, mrr: '42.5' });
    expect(doc.profile.language).toBe('de');
    expect(doc.devices.map((d) => [d.device.uuid, d.role]).sort()).toEqual([[hub, 'owner'], [qHub, 'viewer']].sort());
    expect(doc.devices.find((d) => d.device.uuid === hub)?.device).toMatchObject({ name: person.renamed, ipAddress: person.deviceIpLater, metadata: { plan: person.metadata, v: 2 } });
    // Each session as last used: the first was refreshed from the second address.
    expect(doc.sessions.map((s) => [s.ip, s.userAgent, s.status])).toEqual([
      [person.ips[1], person.agents[1], 'active'],
      [person.ips[1], person.agents[1], 'active'],
    ]);
    expect(doc.events.some((e) => e.type === 'RefreshIssued' && e.data.ip === person.ips[0] && e.data.userAgent === person.agents[0])).toBe(true);
    expect(doc.events.find((e) => e.type === 'UserSynced')?.data).toMatchObject({ email: person.email, crm: { companyName: person.company } });
    expect(doc.events.some((e) => e.type === 'DeviceRegistered' && e.data.name === person.deviceName)).toBe(true);
    expect(doc.events.filter((e) => e.type === 'RefreshIssued').length).toBeGreaterThanOrEqual(3);
    // At most 5 exports an hour per user.
    for (let i = 0; i < 4; i++) expect((await api(service, 'GET', '/users/me/export', { token })).status).toBe(200);
    expect((await api(service, 'GET', '/users/me/export', { token })).status).toBe(429);

    // Erase, through the CRM.
    const erase = await api(service, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id: syncId } });
    expect(erase).toMatchObject({ status: 200, body: { erased: true, userId: personId } });

    // Every token refused at once; the old e-mail logs in nowhere; idempotent; an unknown id is 404.
    expect(await api(service, 'GET', '/devices', { token })).toMatchObject({ status: 401, body: { message: 'Token has been revoked' } });
    expect((await api(service, 'POST', '/auth/refresh', { body: { refreshToken: sessions[1]?.refreshToken } })).status).toBe(401);
    expect(await api(service, 'POST', '/auth/login', { body: { email: person.email, password } })).toMatchObject({ status: 401, body: { message: 'Invalid email or password' } });
    expect(await api(service, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id: syncId } })).toMatchObject({ status: 200, body: { erased: true, userId: personId } });
    expect(await api(service, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id: syncId + 1_000_000 } })).toMatchObject({ status: 404, body: { message: 'User not found' } });
    expect((await api(service, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': 'wrong' }, body: { id: syncId } })).status).toBe(401);

    // The other household: their hub stands, the person's link ended; the person's hub (they alone owned it) is gone.
    const qHubNow = await api(service, 'GET', `/devices/${qHub}`, { token: qToken });
    expect(qHubNow.status).toBe(200);
    expect((qHubNow.body as { users: Array<{ id: string }> }).users.map((u) => u.id)).toEqual([q.id]);
    expect((await api(service, 'GET', `/devices/${hub}`, { token: qToken })).status).toBe(404);

    // Auditors still see every event, the person's fields erased and ids kept (the admin reads the whole stream).
    const history = await api(service, 'GET', `/devices/${hub}/history`, { token: qToken });
    expect(history.status).toBe(200);
    const events = (history.body as { data: Array<{ type: string; data: Record<string, unknown>; actor: { type: string; id: string } }> }).data;
    expect(events.find((e) => e.type === 'DeviceRegistered')?.data).toMatchObject({ uuid: hub, name: ERASED, ipAddress: ERASED, metadata: ERASED, deviceId: 'IDA-1' });
    expect(events.find((e) => e.type === 'DeviceRegistered')?.actor).toEqual({ type: 'user', id: personId });
    expect(events.at(-1)).toMatchObject({ type: 'DeviceDeleted', actor: { type: 'system' } });
    // Each of their links ends (decisions §11), on the hub deleted with them too: their UserUnlinked, then the deletion, one append.
    expect(events.at(-2)).toMatchObject({ type: 'UserUnlinked', actor: { type: 'system' }, data: { userId: personId } });
    const qHistory = (await api(service, 'GET', `/devices/${qHub}/history`, { token: qToken })).body as { data: Array<{ type: string; data: Record<string, unknown> }> };
    expect(qHistory.data.filter((e) => e.type === 'UserUnlinked').map((e) => e.data.userId)).toEqual([personId]);
    expect(qHistory.data.find((e) => e.type === 'DeviceRegistered')?.data.name).toBe(other.device);

    // A rebuild from the log still works, and gives the other household what it had.
    const rebuilt = await api(service, 'POST', '/admin/read-models/rebuild', { token: qToken });
    expect(rebuilt.status).toBe(200);
    expect(((await api(service, 'GET', '/users/me', { token: qToken })).body as { firstName: string }).firstName).toBe(other.firstName);
    expect(((await api(service, 'GET', '/devices', { token: qToken })).body as { data: Array<{ uuid: string }> }).data.map((d) => d.uuid)).toEqual([qHub]);

    // The e-mail and the CRM id are free again: a later sync creates a new user.
    const again = await api(service, 'POST', '/auth/sync-customer', {
      headers: { 'X-Internal-Api-Key': CRM_KEY },
      body: { id: syncId, first_name: 'New', last_name: 'Person', email: person.email, active: true },
    });
    expect(again.status).toBe(201);
    expect((again.body as { user: { id: string } }).user.id).not.toBe(personId);
    // ...and erasing that one leaves nothing of the address either.
    expect((await api(service, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id: syncId } })).status).toBe(200);

    // The bytes.
    if (mode === 'distributed') {
      const esdb = await esdbDump(service.env.EVENTSTORE_URL as string);
      expect(esdb.events).toBeGreaterThan(20);
      expect(esdb.text).toContain(personId);
      expect(foundIn(esdb.text, secrets())).toEqual([]);
      const mongo = await mongoDump(service.env.MONGODB_URI as string);
      expect(mongo.text).toContain(other.email);
      expect(foundIn(mongo.text, secrets())).toEqual([]);
      const redis = await redisDump(service.env.REDIS_URL as string);
      expect(redis.length).toBeGreaterThan(0);
      expect(foundIn(redis, secrets())).toEqual([]);
      expect(foundIn(service.logs(), secrets())).toEqual([]);
    } else {
      // While the service runs (the harness removes DATA_DIR when it stops): the erasure wrote a new start snapshot.
      const dataDir = service.env.DATA_DIR as string;
      const logs = service.logs();
      const all = filesUnder(dataDir);
      expect(all.some((f) => f.endsWith('read-models.snapshot'))).toBe(true);
      const hits = all.flatMap((f) => foundIn(readFileSync(f), secrets()).map((s) => `${f}: ${s}`));
      expect(hits).toEqual([]);
      // The other household is still on disk (in the snapshot), so the scan looks where it should.
      expect(all.some((f) => foundIn(readFileSync(f), [other.email]).length > 0)).toBe(true);
      expect(foundIn(logs, secrets())).toEqual([]);
    }
  }, 120_000);

});
