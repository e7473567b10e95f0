import { createHash, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { loadConfig } from '../../src/config';
import { createLogger } from '../../src/logger';
import { startService, type RunningService } from '../../src/service';
import { api, createUser, CRM_KEY, MODES, startTestService, type TestService } from '../support/harness';
import { TEST_SECRETS } from '../support/server';
import { startTestSmtpServer, type TestSmtpServer } from '../support/smtp';
import { allEvents, createAccount, login, requestResetToken, resetTokenIn } from '../support/accounts';

const INVALID_TOKEN = { statusCode: 400, message: 'Invalid or expired reset token', error: 'Bad Request' };
const REQUESTED = { message: 'If the address belongs to an account, a password reset e-mail has been sent' };
const DONE = { message: 'Password has been reset successfully' };

const settleBackground = () => new Promise((resolve) => setTimeout(resolve, 300));

describe.each(MODES)('password reset (%s mode)', (mode) => {
  let smtp: TestSmtpServer;
  let service: TestService;

  beforeAll(async () => {
    smtp = await startTestSmtpServer();
    service = await startTestService(mode, { SMTP_URL: smtp.url, MAIL_FROM: 'Home Hub <no-reply@hub.test>' });
  }, 60_000);

  afterAll(async () => {
    await service?.stop();
    await smtp?.stop();
  });

  test('request: 202 with the same body for a known and an unknown address; only the known one gets a mail', async () => {
    const user = await createUser(service);
    const unknown = `nobody.${randomUUID()}@example.com`;
    const forUnknown = await api(service, 'POST', '/auth/password-reset/request', { body: { email: unknown } });
    const forKnown = await api(service, 'POST', '/auth/password-reset/request', { body: { email: user.email.toUpperCase() } });
    expect([forUnknown.status, forKnown.status]).toEqual([202, 202]);
    expect(forUnknown.body).toEqual(REQUESTED);
    expect(forKnown.body).toEqual(REQUESTED);

    const mail = await smtp.waitForMail(user.email);
    expect(mail.from).toBe('no-reply@hub.test');
    expect(mail.subject).toBe('Reset your Home Hub password');
    const token = resetTokenIn(mail.text);
    expect(token.startsWith(`${user.id}.`)).toBe(true);
    await settleBackground();
    expect(smtp.mails().filter((m) => m.to.includes(unknown))).toEqual([]);

    // Only the token's hash is recorded.
    const requested = (await allEvents(service)).filter((e) => e.type === 'PasswordResetRequested' && e.streamName === `user-${user.id}`);
    expect(requested).toHaveLength(1);
    const data = requested[0]?.data as { resetTokenHash: string; requestedAt: string; expiresAt: string };
    expect(data.resetTokenHash).toBe(createHash('sha256').update(token).digest('hex'));
    expect(Date.parse(data.expiresAt) - Date.parse(data.requestedAt)).toBe(3600_000);
  });

  test('confirm: 200, the new password logs in, the token is spent', async () => {
    const user = await createUser(service);
    const { token } = await requestResetToken(service, smtp, user.email);
    const confirmed = await api(service, 'POST', '/auth/password-reset/confirm', { body: { token, password: 'first-password' } });
    expect(confirmed.status).toBe(200);
    expect(confirmed.body).toEqual(DONE);
    expect((await login(service, user.email, 'first-password')).user.id).toBe(user.id);

    const again = await api(service, 'POST', '/auth/password-reset/confirm', { body: { token, password: 'second-password' } });
    expect(again.status).toBe(400);
    expect(again.body).toEqual(INVALID_TOKEN);
    expect((await api(service, 'POST', '/auth/login', { body: { email: user.email, password: 'second-password' } })).status).toBe(401);

    // A second reset replaces the password: the old one stops working.
    const next = await requestResetToken(service, smtp, user.email);
    expect((await api(service, 'POST', '/auth/password-reset/confirm', { body: { token: next.token, password: 'second-password' } })).status).toBe(200);
    expect((await api(service, 'POST', '/auth/login', { body: { email: user.email, password: 'first-password' } })).status).toBe(401);
    expect((await api(service, 'POST', '/auth/login', { body: { email: user.email, password: 'second-password' } })).status).toBe(201);
  });

  test('confirm revokes every refresh-token family of the user', async () => {
    const account = await createAccount(service, smtp);
    const sessions = [await login(service, account.email, account.password), await login(service, account.email, account.password)];
    const { token } = await requestResetToken(service, smtp, account.email);
    expect((await api(service, 'POST', '/auth/password-reset/confirm', { body: { token, password: 'brand-new-password' } })).status).toBe(200);
    for (const session of sessions) {
      const res = await api(service, 'POST', '/auth/refresh', { body: { refreshToken: session.refreshToken } });
      expect(res.status).toBe(401);
      expect(res.body).toEqual({ statusCode: 401, message: 'Refresh token has been revoked', error: 'Unauthorized' });
    }
  });

  test('only the latest token counts; unknown, malformed and foreign tokens are refused', async () => {
    const user = await createUser(service);
    const first = await requestResetToken(service, smtp, user.email);
    const second = await requestResetToken(service, smtp, user.email);
    const other = await createUser(service);
    const forOther = await requestResetToken(service, smtp, other.email);
    const [, secret] = forOther.token.split('.') as [string, string];
    for (const token of [
      first.token,
      `${user.id}.${secret}`,
      `${randomUUID()}.${secret}`,
      'garbage',
      `${user.id}.`,
      `../${user.id}.${secret}`,
    ]) {
      const res = await api(service, 'POST', '/auth/password-reset/confirm', { body: { token, password: 'good-password' } });
      expect({ token, status: res.status, body: res.body }).toEqual({ token, status: 400, body: INVALID_TOKEN });
    }
    expect((await api(service, 'POST', '/auth/password-reset/confirm', { body: { token: second.token, password: 'good-password' } })).status).toBe(200);
  });

  test('validation: the password is 8 to 128 characters; bodies are checked', async () => {
    const user = await createUser(service);
    const { token } = await requestResetToken(service, smtp, user.email);
    const short = await api(service, 'POST', '/auth/password-reset/confirm', { body: { token, password: 'seven77' } });
    expect(short.status).toBe(400);
    expect(short.body).toMatchObject({
      statusCode: 400,
      error: 'Bad Request',
      message: ['password must be longer than or equal to 8 characters'],
      details: [{ field: 'password', message: 'password must be longer than or equal to 8 characters' }],
    });
    const long = await api(service, 'POST', '/auth/password-reset/confirm', { body: { token, password: 'x'.repeat(129) } });
    expect(long.status).toBe(400);
    expect((long.body as { message: string[] }).message).toEqual(['password must be shorter than or equal to 128 characters']);
    for (const body of [{ token }, { password: 'long-enough' }, { token: { $gt: '' }, password: 'long-enough' }, { token, password: 12345678 }]) {
      expect((await api(service, 'POST', '/auth/password-reset/confirm', { body })).status).toBe(400);
    }
    for (const body of [{}, { email: 'not-an-email' }, { email: { $gt: '' } }]) {
      const res = await api(service, 'POST', '/auth/password-reset/request', { body });
      expect(res.status).toBe(400);
      expect(Array.isArray((res.body as { message: unknown }).message)).toBe(true);
    }
    // Boundaries are accepted, and the token still works after refused attempts.
    expect((await api(service, 'POST', '/auth/password-reset/confirm', { body: { token, password: 'x'.repeat(128) } })).status).toBe(200);
    expect((await login(service, user.email, 'x'.repeat(128))).user.id).toBe(user.id);
  });

  test('an inactive account gets no mail', async () => {
    const syncId = 700_000 + Math.floor(Math.random() * 90_000);
    const email = `inactive.${syncId}@example.com`;
    const created = await api(service, 'POST', '/auth/sync-customer', {
      headers: { 'X-Internal-Api-Key': CRM_KEY },
      body: { id: syncId, first_name: 'In', last_name: 'Active', email, active: false },
    });
    expect(created.status).toBe(201);
    const res = await api(service, 'POST', '/auth/password-reset/request', { body: { email } });
    expect(res.status).toBe(202);
    expect(res.body).toEqual(REQUESTED);
    await settleBackground();
    expect(smtp.mails().filter((m) => m.to.includes(email))).toEqual([]);
  });

  test('a CRM e-mail change ends every pending reset token: the old mailbox cannot take the account', async () => {
    const syncId = 800_000 + Math.floor(Math.random() * 90_000);
    const oldEmail = `before.${syncId}@example.com`;
    const newEmail = `after.${syncId}@example.com`;
    const sync = (email: string) =>
      api(service, 'POST', '/auth/sync-customer', {
        headers: { 'X-Internal-Api-Key': CRM_KEY },
        body: { id: syncId, first_name: 'Mail', last_name: 'Box', email, active: true },
      });
    expect((await sync(oldEmail)).status).toBe(201);
    const { token } = await requestResetToken(service, smtp, oldEmail);
    expect((await sync(newEmail)).status).toBe(200);

    const confirm = await api(service, 'POST', '/auth/password-reset/confirm', { body: { token, password: 'taken-over-1' } });
    expect(confirm.status).toBe(400);
    expect(confirm.body).toEqual(INVALID_TOKEN);
    // The new address is not marked verified, and nobody logs in with that password.
    const userId = token.split('.')[0] ?? '';
    const stream = (await allEvents(service)).filter((e) => e.streamName === `user-${userId}`).map((e) => e.type);
    expect(stream).not.toContain('EmailVerified');
    expect(stream).not.toContain('PasswordChanged');
    expect((await api(service, 'POST', '/auth/login', { body: { email: newEmail, password: 'taken-over-1' } })).status).toBe(401);

    // A token asked for at the new address works.
    const fresh = await requestResetToken(service, smtp, newEmail);
    expect((await api(service, 'POST', '/auth/password-reset/confirm', { body: { token: fresh.token, password: 'rightful-owner-1' } })).status).toBe(200);
  });

  test('neither the reset tokens nor the passwords reach an event or the log', async () => {
    const tokens = smtp.mails().map((mail) => resetTokenIn(mail.text));
    expect(tokens.length).toBeGreaterThan(5);
    const events = JSON.stringify(await allEvents(service));
    const logs = service.logs();
    for (const secret of [...tokens, 'first-password', 'second-password', 'brand-new-password', 'good-password']) {
      expect(events.includes(secret)).toBe(false);
      expect(logs.includes(secret)).toBe(false);
    }
    expect(events).not.toMatch(/\$argon2/);
    expect(logs).not.toMatch(/\$argon2/);
  });
});

describe('password reset without SMTP_URL (embedded mode)', () => {
  let service: TestService;

  beforeAll(async () => {
    service = await startTestService('embedded');
  }, 30_000);

  afterAll(() => service?.stop());

  test('the mail is written to the log instead, naming the user by id and holding neither e-mail nor name; its token works', async () => {
    const user = await createUser(service, { firstName: 'Zebulon' });
    const res = await api(service, 'POST', '/auth/password-reset/request', { body: { email: user.email } });
    expect(res.status).toBe(202);
    const deadline = Date.now() + 5000;
    let line: { msg: string; mail: { to: string; subject: string; text: string } } | undefined;
    while (line === undefined && Date.now() < deadline) {
      line = service
        .logs()
        .split('\n')
        .filter((l) => l.includes('"mail"'))
        .map((l) => JSON.parse(l) as { msg: string; mail: { to: string; subject: string; text: string } })
        .find((l) => l.mail.to === `user ${user.id}`);
      if (line === undefined) await new Promise((r) => setTimeout(r, 20));
    }
    expect(line?.msg).toBe('SMTP_URL is not set: mail written to the log instead of sent');
    expect(line?.mail.subject).toBe('Reset your Home Hub password');
    const token = resetTokenIn(line?.mail.text ?? '');
    // Nothing of the person's in the log: an erasure would have nothing there to reach (decisions §11).
    expect(service.logs()).not.toContain(user.email);
    expect(service.logs()).not.toContain('Zebulon');
    expect((await api(service, 'POST', '/auth/password-reset/confirm', { body: { token, password: 'from-the-log' } })).status).toBe(200);
    expect((await login(service, user.email, 'from-the-log')).user.id).toBe(user.id);
  });
});

describe('password reset token expiry (embedded mode, a clock the test moves)', () => {
  let smtp: TestSmtpServer;
  let dataDir: string;
  let running: RunningService;
  let offsetMs = 0;
  const clock = { now: () => new Date(Date.now() + offsetMs) };
  const service = (): TestService => ({ baseUrl: `http://127.0.0.1:${running.port ?? 0}` }) as TestService;

  beforeAll(async () => {
    smtp = await startTestSmtpServer();
    dataDir = mkdtempSync(join(tmpdir(), 'hhc-reset-clock-'));
    const config = loadConfig({ ...TEST_SECRETS, PORT: '0', HOST: '127.0.0.1', DATA_DIR: dataDir, SMTP_URL: smtp.url, LOG_LEVEL: 'warn' });
    const sink = new Writable({ write: (_chunk, _encoding, done) => done() });
    running = await startService(config, createLogger(config.logLevel, sink), clock);
  }, 30_000);

  afterAll(async () => {
    await running?.stop();
    await smtp?.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  const syncUser = async (): Promise<string> => {
    const email = `clock.${randomUUID()}@example.com`;
    const res = await api(service(), 'POST', '/auth/sync-customer', {
      headers: { 'X-Internal-Api-Key': CRM_KEY },
      body: { id: 600_000 + Math.floor(Math.random() * 90_000), first_name: 'Clock', last_name: 'Work', email, active: true },
    });
    expect(res.status).toBe(201);
    return email;
  };

  const requestToken = async (email: string): Promise<string> => {
    expect((await api(service(), 'POST', '/auth/password-reset/request', { body: { email } })).status).toBe(202);
    return resetTokenIn((await smtp.waitForMail(email)).text);
  };

  test('a token is good for just under an hour, and refused from the hour on', async () => {
    offsetMs = 0;
    const late = await syncUser();
    const lateToken = await requestToken(late);
    const inTime = await syncUser();
    const inTimeToken = await requestToken(inTime);

    offsetMs = 60 * 60_000;
    const expired = await api(service(), 'POST', '/auth/password-reset/confirm', { body: { token: lateToken, password: 'too-late-now' } });
    expect(expired.status).toBe(400);
    expect(expired.body).toEqual(INVALID_TOKEN);

    offsetMs = 59 * 60_000;
    expect((await api(service(), 'POST', '/auth/password-reset/confirm', { body: { token: inTimeToken, password: 'just-in-time' } })).status).toBe(200);
  });
});
