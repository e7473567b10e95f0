import { randomUUID } from 'node:crypto';
import type { TunnelError } from '../../src/tunnel/events';
import { api, CRM_KEY, MODES, startTestService, type Mode, type TestService } from '../support/harness';
import { startTestSmtpServer, type TestSmtpServer } from '../support/smtp';
import { login, requestResetToken } from '../support/accounts';
import { connect, refusal, type Probe } from '../support/tunnel';
import { twoProcesses } from '../support/two-processes';

/**
 * Access that ends with the account (decisions §3): once the CRM syncs `active: false`, every
 * access token issued before is refused (401 `Token has been revoked`) on HTTP and on the
 * tunnel, live sockets get ACCESS_REVOKED and are closed; after `active: true` the user logs
 * in again and the new tokens work. Profile defaults (timezone UTC, language en) ride along.
 */

const REVOKED = { statusCode: 401, message: 'Token has been revoked', error: 'Unauthorized' };
let nextSyncId = 500_000 + Math.floor(Math.random() * 100_000);

interface Customer {
  readonly syncId: number;
  readonly id: string;
  readonly email: string;
  readonly password: string;
}

async function sync(service: TestService, customer: { syncId: number; email: string }, active: boolean, extra: Record<string, unknown> = {}) {
  return api(service, 'POST', '/auth/sync-customer', {
    headers: { 'X-Internal-Api-Key': CRM_KEY },
    body: { id: customer.syncId, first_name: 'Ada', last_name: 'Lovelace', email: customer.email, active, ...extra },
  });
}

/** A CRM customer who set a password through the reset mail, as a real user does. */
async function customer(service: TestService, smtp: TestSmtpServer, extra: Record<string, unknown> = {}): Promise<Customer> {
  const syncId = nextSyncId++;
  const email = `customer.${syncId}@example.com`;
  const res = await sync(service, { syncId, email }, true, extra);
  expect(res.status).toBe(201);
  const id = (res.body as { user: { id: string } }).user.id;
  const { token } = await requestResetToken(service, smtp, email);
  const password = `pw-${syncId}-Secret!`;
  expect((await api(service, 'POST', '/auth/password-reset/confirm', { body: { token, password } })).status).toBe(200);
  return { syncId, id, email, password };
}

async function until<T>(probe: () => Promise<T>, done: (value: T) => boolean, timeoutMs = 5000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (done(value) || Date.now() > deadline) return value;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

const registerBody = () => ({ uuid: randomUUID(), deviceId: 'HUB', name: 'Hub' });

describe.each<Mode>(MODES)('access ends with the account (%s mode)', (mode) => {
  let smtp: TestSmtpServer;
  let service: TestService;
  const sockets: Probe[] = [];

  beforeAll(async () => {
    smtp = await startTestSmtpServer();
    service = await startTestService(mode, { SMTP_URL: smtp.url });
  }, 60_000);
  afterEach(() => {
    for (const p of sockets.splice(0)) p.close();
  });
  afterAll(async () => {
    await service?.stop();
    await smtp?.stop();
  });

  test('profile: timezone UTC and language en by default, the CRM contract language when given; never null', async () => {
    const plain = await customer(service, smtp);
    const session = await login(service, plain.email, plain.password);
    const me = await api(service, 'GET', '/users/me', { token: session.accessToken });
    expect((me.body as { profile: unknown }).profile).toEqual({ avatar: null, timezone: 'UTC', language: 'en' });

    const german = await customer(service, smtp, { contract_language: 'de' });
    const theirs = await login(service, german.email, german.password);
    expect(((await api(service, 'GET', '/users/me', { token: theirs.accessToken })).body as { profile: unknown }).profile).toEqual({
      avatar: null,
      timezone: 'UTC',
      language: 'de',
    });
    // A contract language that arrives later fills the default in.
    expect((await sync(service, plain, true, { contract_language: 'fr' })).status).toBe(200);
    expect(((await api(service, 'GET', '/users/me', { token: session.accessToken })).body as { profile: { language: string } }).profile.language).toBe('fr');

    // A blank contract language gives no language: the default stays, and a later real one still fills it in.
    const blank = await customer(service, smtp, { contract_language: '   ' });
    const blanks = await login(service, blank.email, blank.password);
    const languageOf = async (token: string): Promise<string> =>
      ((await api(service, 'GET', '/users/me', { token })).body as { profile: { language: string } }).profile.language;
    expect(await languageOf(blanks.accessToken)).toBe('en');
    expect((await sync(service, blank, true, { contract_language: ' it ' })).status).toBe(200);
    expect(await languageOf(blanks.accessToken)).toBe('it');
  });

  test('deactivation revokes every earlier access token on HTTP and on the tunnel; reactivation needs a new login', async () => {
    const user = await customer(service, smtp);
    const before = await login(service, user.email, user.password);
    expect((await api(service, 'GET', '/users/me', { token: before.accessToken })).status).toBe(200);
    const live = await connect(service, before.accessToken);
    sockets.push(live);

    expect((await sync(service, user, false)).status).toBe(200);

    const me = await api(service, 'GET', '/users/me', { token: before.accessToken });
    expect({ status: me.status, body: me.body }).toEqual({ status: 401, body: REVOKED });
    const register = await api(service, 'POST', '/devices/register', { token: before.accessToken, body: registerBody() });
    expect({ status: register.status, body: register.body }).toEqual({ status: 401, body: REVOKED });
    expect((await api(service, 'GET', '/devices', { token: before.accessToken })).status).toBe(401);
    expect((await api(service, 'POST', '/auth/login', { body: { email: user.email, password: user.password } })).status).toBe(403);

    const error = await live.next<TunnelError>('tunnel:error', (e) => e.code === 'ACCESS_REVOKED');
    expect(error.message).toEqual(expect.any(String));
    await live.next('disconnect');
    expect((await refusal(service, { token: before.accessToken })).message).toBe('unauthorized');

    // Reactivated: the old token stays refused, a fresh login works at once (even within the same second).
    expect((await sync(service, user, true)).status).toBe(200);
    const after = await login(service, user.email, user.password);
    expect((await api(service, 'GET', '/users/me', { token: after.accessToken })).status).toBe(200);
    expect((await api(service, 'POST', '/devices/register', { token: after.accessToken, body: registerBody() })).status).toBe(201);
    sockets.push(await connect(service, after.accessToken));
    const old = await api(service, 'GET', '/users/me', { token: before.accessToken });
    expect({ status: old.status, body: old.body }).toEqual({ status: 401, body: REVOKED });
    expect((await refusal(service, { token: before.accessToken })).message).toBe('unauthorized');
  });

  test('another user is not affected', async () => {
    const [leaving, staying] = await Promise.all([customer(service, smtp), customer(service, smtp)]);
    const [a, b] = await Promise.all([login(service, leaving.email, leaving.password), login(service, staying.email, staying.password)]);
    const theirs = await connect(service, b.accessToken);
    sockets.push(theirs);
    expect((await sync(service, leaving, false)).status).toBe(200);
    expect((await api(service, 'GET', '/users/me', { token: a.accessToken })).status).toBe(401);
    expect((await api(service, 'GET', '/users/me', { token: b.accessToken })).status).toBe(200);
    expect(theirs.socket.connected).toBe(true);
    expect(theirs.all('tunnel:error')).toEqual([]);
  });
});

describe('access ends with the account on every process (distributed mode, two API processes)', () => {
  let smtp: TestSmtpServer;

  // The mail server starts before the processes (they are given its address) and stops after them.
  beforeAll(async () => {
    smtp = await startTestSmtpServer();
  });
  const { a, b, on } = twoProcesses({ env: () => ({ SMTP_URL: smtp.url }) });
  afterAll(async () => {
    await smtp?.stop();
  });

  test('the CRM deactivates through one process; the other refuses the tokens and closes the sockets it holds', async () => {
    const user = await customer(a(), smtp);
    const session = await login(a(), user.email, user.password);
    const onB = await on(b(), session.accessToken);
    expect((await api(b(), 'GET', '/users/me', { token: session.accessToken })).status).toBe(200);

    expect((await sync(a(), user, false)).status).toBe(200);

    // Served from the read model, which already has the deactivation (read-your-writes).
    const me = await api(b(), 'GET', '/users/me', { token: session.accessToken });
    expect({ status: me.status, body: me.body }).toEqual({ status: 401, body: REVOKED });
    // Every other route: this process's own feed of deactivations.
    const register = await until(
      () => api(b(), 'POST', '/devices/register', { token: session.accessToken, body: registerBody() }),
      (res) => res.status === 401,
      2000,
    );
    expect({ status: register.status, body: register.body }).toEqual({ status: 401, body: REVOKED });
    expect((await onB.next<TunnelError>('tunnel:error', (e) => e.code === 'ACCESS_REVOKED')).code).toBe('ACCESS_REVOKED');
    await onB.next('disconnect');
    expect((await refusal(b(), { token: session.accessToken })).message).toBe('unauthorized');

    expect((await sync(a(), user, true)).status).toBe(200);
    const again = await login(b(), user.email, user.password);
    expect((await api(a(), 'GET', '/users/me', { token: again.accessToken })).status).toBe(200);
    expect((await api(b(), 'GET', '/users/me', { token: again.accessToken })).status).toBe(200);
  });
});
