import { randomUUID } from 'node:crypto';
import jwt from 'jsonwebtoken';
import { api, createUser, CRM_KEY, MODES, shiftedClock, startTestService, type TestService } from '../support/harness';
import { TEST_SECRETS } from '../support/server';
import { startTestSmtpServer, type TestSmtpServer } from '../support/smtp';
import { allEvents, createAccount, login, requestResetToken, type Account, type LoginBody } from '../support/accounts';

const UNAUTHORIZED = (message: string) => ({ statusCode: 401, message, error: 'Unauthorized' });
const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] as number;
}

/** A JWT signed with `secret` and any header and claims, for tokens the service must refuse. */
function forge(claims: Record<string, unknown>, secret: string, algorithm: jwt.Algorithm = 'HS256'): string {
  return jwt.sign(claims, secret, { algorithm });
}

function unsigned(claims: Record<string, unknown>): string {
  const part = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url');
  return `${part({ alg: 'none', typ: 'JWT' })}.${part(claims)}.`;
}

describe.each(MODES)('authentication and sessions (%s mode)', (mode) => {
  let smtp: TestSmtpServer;
  let service: TestService;
  let alice: Account;
  const issued: string[] = [];
  // Moved on past the refresh race window where a test presents a rotated token as a thief would.
  const clock = shiftedClock();

  const loginAs = async (account: Account): Promise<LoginBody> => {
    const body = await login(service, account.email, account.password);
    issued.push(body.accessToken, body.refreshToken);
    return body;
  };
  const refresh = async (refreshToken: string) => {
    const res = await api(service, 'POST', '/auth/refresh', { body: { refreshToken } });
    if (res.status === 201) {
      const body = res.body as { accessToken: string; refreshToken: string };
      issued.push(body.accessToken, body.refreshToken);
    }
    return res;
  };
  const sync = (account: { id: string; email: string }, syncId: number, active: boolean) =>
    api(service, 'POST', '/auth/sync-customer', {
      headers: { 'X-Internal-Api-Key': CRM_KEY },
      body: { id: syncId, first_name: 'Test', last_name: 'User', email: account.email, active },
    });

  beforeAll(async () => {
    smtp = await startTestSmtpServer();
    service = await startTestService(mode, { SMTP_URL: smtp.url, ADMIN_EMAILS: 'boss@example.com' }, { clock });
    alice = await createAccount(service, smtp, { firstName: 'Alice', lastName: 'Liddell' });
  }, 60_000);

  afterAll(async () => {
    await service?.stop();
    await smtp?.stop();
  });

  describe('POST /auth/login', () => {
    test('201 with a token pair, expiresIn 900 and the user summary', async () => {
      const res = await api(service, 'POST', '/auth/login', { body: { email: alice.email, password: alice.password } });
      expect(res.status).toBe(201);
      const body = res.body as LoginBody;
      issued.push(body.accessToken, body.refreshToken);
      expect(body).toEqual({
        accessToken: expect.any(String),
        refreshToken: expect.any(String),
        expiresIn: 900,
        user: { id: alice.id, email: alice.email, firstName: 'Alice', lastName: 'Liddell', role: 'user' },
      });
      const access = service.tokens.verifyAccess(body.accessToken);
      const refreshClaims = service.tokens.verifyRefresh(body.refreshToken);
      expect(access).toMatchObject({ sub: alice.id, role: 'user', type: 'access' });
      // The token carries the e-mail; what a verification answers (and remembers) does not (decisions §11).
      expect(jwt.decode(body.accessToken)).toMatchObject({ sub: alice.id, email: alice.email, role: 'user', type: 'access' });
      expect(access).not.toHaveProperty('email');
      expect(access.exp - access.iat).toBe(900);
      expect(refreshClaims).toMatchObject({ sub: alice.id, type: 'refresh', fam: access.fam });
      expect(refreshClaims.exp - refreshClaims.iat).toBe(30 * 24 * 3600);
    });

    test('the e-mail is matched case-insensitively and each login opens a new family', async () => {
      const first = await login(service, alice.email.toUpperCase(), alice.password);
      const second = await loginAs(alice);
      issued.push(first.accessToken, first.refreshToken);
      expect(service.tokens.verifyRefresh(first.refreshToken).fam).not.toBe(service.tokens.verifyRefresh(second.refreshToken).fam);
    });

    test('a user listed in ADMIN_EMAILS gets role admin, in the summary and the token', async () => {
      const boss = await createAccount(service, smtp, { email: 'boss@example.com' });
      const body = await loginAs(boss);
      expect(body.user.role).toBe('admin');
      expect(service.tokens.verifyAccess(body.accessToken).role).toBe('admin');
    });

    test('a wrong password, an unknown e-mail and a user without a password of their own: 401 Invalid email or password', async () => {
      const synced = await createUser(service);
      for (const body of [
        { email: alice.email, password: 'not-the-password' },
        { email: `nobody.${randomUUID()}@example.com`, password: alice.password },
        { email: synced.email, password: 'whatever-it-was' },
      ]) {
        const res = await api(service, 'POST', '/auth/login', { body });
        expect(res.status).toBe(401);
        expect(res.body).toEqual(UNAUTHORIZED('Invalid email or password'));
      }
    });

    test('an unknown e-mail costs about what a wrong password costs', async () => {
      const unknown: number[] = [];
      const wrong: number[] = [];
      const time = async (email: string): Promise<number> => {
        const started = performance.now();
        const res = await api(service, 'POST', '/auth/login', { body: { email, password: 'not-the-password' } });
        expect(res.status).toBe(401);
        return performance.now() - started;
      };
      for (let i = 0; i < 7; i++) {
        unknown.push(await time(`ghost.${i}.${randomUUID()}@example.com`));
        wrong.push(await time(alice.email));
      }
      const ratio = median(unknown) / median(wrong);
      // A hash takes milliseconds (about 10 on these machines, less on a faster Node); skipping it
      // would make unknown addresses far faster.
      expect(median(wrong)).toBeGreaterThan(3);
      expect(ratio).toBeGreaterThan(0.5);
      expect(ratio).toBeLessThan(2);
    });

    test('validation: 400 with a message array and details', async () => {
      const res = await api(service, 'POST', '/auth/login', { body: { email: 'not-an-email' } });
      expect(res.status).toBe(400);
      const body = res.body as { statusCode: number; error: string; message: string[]; details: Array<{ field: string; message: string }> };
      expect(body.statusCode).toBe(400);
      expect(body.error).toBe('Bad Request');
      expect(body.message).toEqual(expect.arrayContaining(['email must be an email', 'password should not be empty']));
      expect(body.details).toEqual(expect.arrayContaining([{ field: 'email', message: 'email must be an email' }]));

      for (const bad of [
        { email: { $gt: '' }, password: 'x' },
        { email: alice.email, password: { $ne: null } },
        { email: alice.email, password: '' },
        { email: [alice.email], password: alice.password },
        'just a string',
      ]) {
        expect((await api(service, 'POST', '/auth/login', { body: bad })).status).toBe(400);
      }
    });
  });

  describe('CRM deactivation', () => {
    let carol: Account;
    let syncId: number;

    beforeAll(async () => {
      syncId = 800_000 + Math.floor(Math.random() * 90_000);
      const created = await api(service, 'POST', '/auth/sync-customer', {
        headers: { 'X-Internal-Api-Key': CRM_KEY },
        body: { id: syncId, first_name: 'Carol', last_name: 'Danvers', email: `carol.${syncId}@example.com`, active: true },
      });
      expect(created.status).toBe(201);
      const email = `carol.${syncId}@example.com`;
      const { token } = await requestResetToken(service, smtp, email);
      const password = 'carol-password-1';
      expect((await api(service, 'POST', '/auth/password-reset/confirm', { body: { token, password } })).status).toBe(200);
      carol = { id: (created.body as { user: { id: string } }).user.id, email, password };
    });

    test('deactivation: login 403, existing refresh tokens refused; reactivation: login works again', async () => {
      const before = await loginAs(carol);
      const other = await loginAs(carol);

      expect((await sync(carol, syncId, false)).status).toBe(200);
      const refused = await api(service, 'POST', '/auth/login', { body: { email: carol.email, password: carol.password } });
      expect(refused.status).toBe(403);
      expect(refused.body).toEqual({ statusCode: 403, message: 'Account is inactive', error: 'Forbidden' });
      // Only the right password learns that the account is inactive; a wrong one gets the usual 401.
      const guessed = await api(service, 'POST', '/auth/login', { body: { email: carol.email, password: 'wrong-password' } });
      expect(guessed.status).toBe(401);
      expect(guessed.body).toEqual(UNAUTHORIZED('Invalid email or password'));
      for (const token of [before.refreshToken, other.refreshToken]) {
        const res = await refresh(token);
        expect(res.status).toBe(401);
        expect(res.body).toEqual(UNAUTHORIZED('Refresh token has been revoked'));
      }

      expect((await sync(carol, syncId, true)).status).toBe(200);
      const again = await loginAs(carol);
      expect(again.user.id).toBe(carol.id);
      expect((await refresh(again.refreshToken)).status).toBe(201);
      // Families revoked by the deactivation stay revoked.
      expect((await refresh(before.refreshToken)).status).toBe(401);

      const events = await allEvents(service);
      const revoked = events.filter((e) => e.type === 'RefreshRevoked' && (e.data as { userId: string }).userId === carol.id);
      expect(revoked.map((e) => (e.data as { reason: string }).reason)).toEqual(['deactivated', 'deactivated']);
    });
  });

  describe('POST /auth/refresh', () => {
    test('rotation: 201 with a new pair and no user; the new access token works', async () => {
      const session = await loginAs(alice);
      const res = await refresh(session.refreshToken);
      expect(res.status).toBe(201);
      const body = res.body as { accessToken: string; refreshToken: string; expiresIn: number };
      expect(body).toEqual({ accessToken: expect.any(String), refreshToken: expect.any(String), expiresIn: 900 });
      expect(body.refreshToken).not.toBe(session.refreshToken);
      const oldClaims = service.tokens.verifyRefresh(session.refreshToken);
      const newClaims = service.tokens.verifyRefresh(body.refreshToken);
      expect(newClaims.fam).toBe(oldClaims.fam);
      expect(newClaims.jti).not.toBe(oldClaims.jti);
      expect(service.tokens.verifyAccess(body.accessToken)).toMatchObject({ sub: alice.id, fam: oldClaims.fam });
      expect(jwt.decode(body.accessToken)).toMatchObject({ sub: alice.id, email: alice.email, fam: oldClaims.fam });
      expect((await api(service, 'GET', '/users/me', { token: body.accessToken })).status).toBe(200);
      // And the chain goes on.
      expect((await refresh(body.refreshToken)).status).toBe(201);
    });

    test('a rotated token presented again more than 5 s after its rotation revokes the whole family, the newest token included', async () => {
      const session = await loginAs(alice);
      const second = (await refresh(session.refreshToken)).body as { refreshToken: string };
      const third = (await refresh(second.refreshToken)).body as { refreshToken: string };

      // More than 5 s after its rotation: reuse, not a lost race (decisions §3).
      clock.advance(5_001);
      const reuse = await refresh(session.refreshToken);
      expect(reuse.status).toBe(401);
      expect(reuse.body).toEqual(UNAUTHORIZED('Refresh token has been revoked'));
      const newest = await refresh(third.refreshToken);
      expect(newest.status).toBe(401);
      expect(newest.body).toEqual(UNAUTHORIZED('Refresh token has been revoked'));

      const fam = service.tokens.verifyRefresh(session.refreshToken).fam;
      const types = (await allEvents(service)).filter((e) => e.streamName === `session-${fam}`).map((e) => e.type);
      expect(types).toEqual([
        'RefreshIssued',
        'RefreshRotated',
        'RefreshIssued',
        'RefreshRotated',
        'RefreshIssued',
        'RefreshReuseDetected',
        'RefreshRevoked',
      ]);
    });

    test('concurrent refreshes with one token: exactly one 201, and the winner keeps its family', async () => {
      const session = await loginAs(alice);
      let token = session.refreshToken;
      for (let round = 0; round < 8; round++) {
        const racers = 2 + (round % 2);
        // Concurrent as the service sees it: every racer's request on the wire before any is
        // answered. One connection per racer is opened first (the client keeps them alive), so
        // a racer never waits for a connection while a loaded machine answers the winner;
        // one sent after the winner's answer could be reuse, as far as any server can tell.
        await Promise.all(Array.from({ length: racers }, () => fetch(`${service.baseUrl}/api/v1/health`).then((r) => r.arrayBuffer())));
        const results = await Promise.all(Array.from({ length: racers }, () => refresh(token)));
        expect(results.map((r) => r.status).sort()).toEqual([201, ...Array<number>(racers - 1).fill(401)]);
        for (const loser of results.filter((r) => r.status !== 201)) expect(loser.body).toEqual(UNAUTHORIZED('Refresh token has been revoked'));
        // The winner's token carries the family on: no loser was taken for a thief.
        token = (results.find((r) => r.status === 201)?.body as { refreshToken: string }).refreshToken;
      }
      expect((await refresh(token)).status).toBe(201);
      const fam = service.tokens.verifyRefresh(token).fam;
      const types = (await allEvents(service)).filter((e) => e.streamName === `session-${fam}`).map((e) => e.type);
      expect(types).not.toContain('RefreshReuseDetected');
    });

    test('an expired refresh token: 401 Refresh token has expired', async () => {
      const session = await loginAs(alice);
      const claims = service.tokens.verifyRefresh(session.refreshToken);
      const now = Math.floor(Date.now() / 1000);
      const expired = forge(
        { sub: claims.sub, fam: claims.fam, jti: claims.jti, type: 'refresh', iat: now - 31 * 24 * 3600, exp: now - 10 },
        TEST_SECRETS.JWT_REFRESH_SECRET,
      );
      const res = await refresh(expired);
      expect(res.status).toBe(401);
      expect(res.body).toEqual(UNAUTHORIZED('Refresh token has expired'));
    });

    test('what is not a refresh token of ours: 401 Invalid refresh token', async () => {
      const session = await loginAs(alice);
      const claims = service.tokens.verifyRefresh(session.refreshToken);
      const now = Math.floor(Date.now() / 1000);
      for (const token of [
        session.accessToken,
        service.tokens.signDevice({ sub: randomUUID(), deviceUuid: randomUUID(), gen: 1 }),
        'not.a.jwt',
        unsigned({ sub: claims.sub, fam: claims.fam, jti: claims.jti, type: 'refresh', iat: now, exp: now + 60 }),
        forge({ sub: claims.sub, fam: claims.fam, jti: claims.jti, type: 'refresh' }, TEST_SECRETS.JWT_REFRESH_SECRET, 'HS512'),
        forge({ sub: claims.sub, fam: claims.fam, jti: claims.jti, type: 'refresh' }, TEST_SECRETS.JWT_ACCESS_SECRET),
        // A token of ours naming a family that does not exist.
        service.tokens.signRefresh({ sub: claims.sub, fam: randomUUID() }).token,
      ]) {
        const res = await refresh(token);
        expect({ token, status: res.status, body: res.body }).toEqual({ token, status: 401, body: UNAUTHORIZED('Invalid refresh token') });
      }
      // The family itself was not touched.
      expect((await refresh(session.refreshToken)).status).toBe(201);
    });

    test('validation: 400 for a missing or non-string refreshToken', async () => {
      for (const body of [{}, { refreshToken: '' }, { refreshToken: { $gt: '' } }, { refreshToken: 42 }]) {
        const res = await api(service, 'POST', '/auth/refresh', { body });
        expect(res.status).toBe(400);
        expect(Array.isArray((res.body as { message: unknown }).message)).toBe(true);
      }
    });
  });

  describe('POST /auth/logout', () => {
    test('200, revokes this session only; the access token keeps working until it expires', async () => {
      const session = await loginAs(alice);
      const elsewhere = await loginAs(alice);
      const res = await api(service, 'POST', '/auth/logout', { token: session.accessToken });
      expect(res.status).toBe(200);
      expect(res.body).toEqual({ message: 'Logged out successfully' });

      const after = await refresh(session.refreshToken);
      expect(after.status).toBe(401);
      expect(after.body).toEqual(UNAUTHORIZED('Refresh token has been revoked'));
      expect((await api(service, 'GET', '/users/me', { token: session.accessToken })).status).toBe(200);
      expect((await refresh(elsewhere.refreshToken)).status).toBe(201);
      // Logging out twice is harmless.
      expect((await api(service, 'POST', '/auth/logout', { token: session.accessToken })).status).toBe(200);
    });

    test('an access token naming no family logs out every session of the user', async () => {
      const dave = await createAccount(service, smtp);
      const sessions = [await loginAs(dave), await loginAs(dave)];
      const familyless = service.tokens.signAccess({ sub: dave.id, email: dave.email, role: 'user' });
      expect((await api(service, 'POST', '/auth/logout', { token: familyless })).status).toBe(200);
      for (const session of sessions) expect((await refresh(session.refreshToken)).status).toBe(401);
    });

    test('needs an access token', async () => {
      const res = await api(service, 'POST', '/auth/logout');
      expect(res.status).toBe(401);
      expect(res.body).toEqual(UNAUTHORIZED('Unauthorized'));
    });
  });

  describe('GET /users/me and access tokens', () => {
    test('the User resource of the interface', async () => {
      const session = await loginAs(alice);
      const res = await api(service, 'GET', '/users/me', { token: session.accessToken });
      expect(res.status).toBe(200);
      expect(res.body).toEqual({
        id: alice.id,
        email: alice.email,
        firstName: 'Alice',
        lastName: 'Liddell',
        role: 'user',
        isActive: true,
        // Confirming a reset proved the mailbox.
        isEmailVerified: true,
        profile: { avatar: null, timezone: 'UTC', language: 'en' },
        devices: [],
        createdAt: expect.stringMatching(ISO),
        updatedAt: expect.stringMatching(ISO),
      });
    });

    test('lists the devices the user is linked to', async () => {
      const session = await loginAs(alice);
      const uuid = randomUUID();
      const registered = await api(service, 'POST', '/devices/register', {
        token: session.accessToken,
        body: { uuid, deviceId: 'hub-1', name: 'Living room' },
      });
      expect(registered.status).toBe(201);
      const me = (await api(service, 'GET', '/users/me', { token: session.accessToken })).body as { devices: unknown[] };
      expect(me.devices).toEqual([{ id: (registered.body as { id: string }).id, name: 'Living room', role: 'owner', isOnline: false }]);
    });

    test('refused tokens: 401 with the message of decisions §7', async () => {
      const session = await loginAs(alice);
      const now = Math.floor(Date.now() / 1000);
      const claims = { sub: alice.id, email: alice.email, role: 'user', type: 'access' };
      const [header, payload, signature] = session.accessToken.split('.') as [string, string, string];
      const tampered = `${header}.${Buffer.from(JSON.stringify({ ...claims, role: 'admin', iat: now, exp: now + 900 })).toString('base64url')}.${signature}`;
      const cases: Array<[string, string | undefined, Record<string, string> | undefined, string]> = [
        ['no header', undefined, undefined, 'Unauthorized'],
        ['not bearer', undefined, { Authorization: `Basic ${Buffer.from('a:b').toString('base64')}` }, 'Unauthorized'],
        ['empty bearer', undefined, { Authorization: 'Bearer ' }, 'Unauthorized'],
        ['not a jwt', undefined, { Authorization: 'Bearer abc' }, 'Unauthorized'],
        ['a refresh token', session.refreshToken, undefined, 'Invalid token'],
        ['a device token', service.tokens.signDevice({ sub: randomUUID(), deviceUuid: randomUUID(), gen: 1 }), undefined, 'Invalid token'],
        ['alg none', unsigned({ ...claims, iat: now, exp: now + 900 }), undefined, 'Invalid token'],
        ['HS512 with the right secret', forge(claims, TEST_SECRETS.JWT_ACCESS_SECRET, 'HS512'), undefined, 'Invalid token'],
        ['signed with another secret', forge(claims, TEST_SECRETS.JWT_DEVICE_SECRET), undefined, 'Invalid token'],
        ['tampered claims', tampered, undefined, 'Invalid token'],
        ['no type claim', forge({ sub: alice.id, email: alice.email, role: 'user' }, TEST_SECRETS.JWT_ACCESS_SECRET), undefined, 'Invalid token'],
        ['expired', forge({ ...claims, iat: now - 1000, exp: now - 100 }, TEST_SECRETS.JWT_ACCESS_SECRET), undefined, 'Token has expired'],
      ];
      expect(payload.length).toBeGreaterThan(0);
      for (const [name, token, headers, message] of cases) {
        const res = await api(service, 'GET', '/users/me', { ...(token !== undefined ? { token } : {}), ...(headers !== undefined ? { headers } : {}) });
        expect({ name, status: res.status, body: res.body }).toEqual({ name, status: 401, body: UNAUTHORIZED(message) });
      }
    });
    test('the scheme name is case-insensitive: bearer and BEARER are Bearer', async () => {
      const session = await loginAs(alice);
      for (const scheme of ['bearer', 'BEARER', 'beARer', 'Bearer  ']) {
        const res = await api(service, 'GET', '/users/me', { headers: { Authorization: `${scheme} ${session.accessToken}` } });
        expect({ scheme, status: res.status }).toEqual({ scheme, status: 200 });
      }
      const glued = await api(service, 'GET', '/users/me', { headers: { Authorization: `Bearer${session.accessToken}` } });
      expect(glued.status).toBe(401);
    });
  });

  test('no password, hash, refresh, access or reset token is in any event or in the log', async () => {
    const passwords = [alice.password, 'carol-password-1'];
    const secrets = [...passwords, ...issued];
    const resetTokens = smtp.mails().map((mail) => /^([0-9a-f-]{36}\.[A-Za-z0-9_-]{43})$/m.exec(mail.text)?.[1] ?? '');
    expect(resetTokens.length).toBeGreaterThan(3);
    expect(issued.length).toBeGreaterThan(20);

    const events = JSON.stringify(await allEvents(service));
    const logs = service.logs();
    for (const secret of [...secrets, ...resetTokens]) {
      expect(secret.length).toBeGreaterThan(8);
      expect(events.includes(secret)).toBe(false);
      expect(logs.includes(secret)).toBe(false);
    }
    for (const text of [events, logs]) {
      expect(text).not.toMatch(/\$argon2/);
      expect(text).not.toMatch(/"password"/i);
    }
    // What the events do carry: token ids and hashes, which cannot be turned back.
    expect(events).toMatch(/"resetTokenHash":"[0-9a-f]{64}"/);
    expect(events).toMatch(/"jti":"[0-9a-f-]{36}"/);
  });
});
