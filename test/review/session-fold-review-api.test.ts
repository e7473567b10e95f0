import { api, MODES, shiftedClock, startTestService, type Mode, type TestService } from '../support/harness';
import { allEvents, createAccount, login, requestResetToken, type Account } from '../support/accounts';
import { startTestSmtpServer, type TestSmtpServer } from '../support/smtp';

/**
 * Review, through the HTTP API: a refresh-token family rotated a few hundred times (its fold
 * now made in batches) behaves as a new one for everything decisions §3 asks of a family:
 * concurrent refreshes with one token (one wins, the others get 401 `Refresh token has been
 * revoked`, the family lives on), logout (its family only), reuse after the race window (the
 * family and its access tokens revoked, other families not), a password change (every family
 * and every earlier access token revoked).
 */

const REFRESH_REVOKED = { statusCode: 401, message: 'Refresh token has been revoked', error: 'Unauthorized' };
const ACCESS_REVOKED = { statusCode: 401, message: 'Token has been revoked', error: 'Unauthorized' };
const AGED = 200;

interface Pair {
  readonly accessToken: string;
  readonly refreshToken: string;
}

/** A family: its first (rotated) refresh token and its newest pair. */
interface Family {
  readonly first: string;
  latest: Pair;
}

describe.each<Mode>(MODES)('refresh-token families young and aged (%s mode)', (mode) => {
  let smtp: TestSmtpServer;
  let service: TestService;
  const clock = shiftedClock();

  beforeAll(async () => {
    smtp = await startTestSmtpServer();
    service = await startTestService(mode, { SMTP_URL: smtp.url }, { clock });
  }, 60_000);
  afterAll(async () => {
    await service?.stop();
    await smtp?.stop();
  });

  const refresh = (refreshToken: string) => api(service, 'POST', '/auth/refresh', { body: { refreshToken } });
  const me = async (accessToken: string) => {
    const res = await api(service, 'GET', '/users/me', { token: accessToken });
    return { status: res.status, body: res.status === 200 ? 'ok' : res.body };
  };
  const familyEvents = async (refreshToken: string): Promise<string[]> => {
    const fam = service.tokens.verifyRefresh(refreshToken).fam;
    return (await allEvents(service)).filter((e) => e.streamName === `session-${fam}`).map((e) => e.type);
  };

  /** A login, then `rotations` refreshes one after another. */
  const family = async (account: Account, rotations: number): Promise<Family> => {
    const session = await login(service, account.email, account.password);
    let latest: Pair = session;
    for (let i = 0; i < rotations; i++) {
      const res = await refresh(latest.refreshToken);
      if (res.status !== 201) throw new Error(`rotation ${i} answered ${res.status}: ${JSON.stringify(res.body)}`);
      latest = res.body as Pair;
    }
    return { first: session.refreshToken, latest };
  };

  test.each([0, AGED])('a family rotated %i times: races, logout, reuse and a password change', async (age) => {
    const account = await createAccount(service, smtp);
    const [a, b, c] = await Promise.all([family(account, age), family(account, age), family(account, age)]);
    expect(await familyEvents(a.latest.refreshToken)).toHaveLength(1 + 2 * age);

    // Concurrent refreshes of one token: one wins, the others lost a race; the family lives on.
    for (let round = 0; round < 3; round++) {
      const results = await Promise.all(Array.from({ length: 4 }, () => refresh(a.latest.refreshToken)));
      expect({ round, statuses: results.map((r) => r.status).sort() }).toEqual({ round, statuses: [201, 401, 401, 401] });
      for (const loser of results.filter((r) => r.status !== 201)) expect(loser.body).toEqual(REFRESH_REVOKED);
      a.latest = results.find((r) => r.status === 201)?.body as Pair;
    }
    const next = await refresh(a.latest.refreshToken);
    expect(next.status).toBe(201);
    a.latest = next.body as Pair;
    expect(await familyEvents(a.latest.refreshToken)).not.toContain('RefreshReuseDetected');
    expect(await me(a.latest.accessToken)).toEqual({ status: 200, body: 'ok' });

    // Logout ends the family of its access token, only that one.
    expect((await api(service, 'POST', '/auth/logout', { token: b.latest.accessToken })).status).toBe(200);
    expect((await refresh(b.latest.refreshToken)).body).toEqual(REFRESH_REVOKED);
    expect((await refresh(b.first)).body).toEqual(REFRESH_REVOKED);
    expect((await familyEvents(b.first)).slice(-1)).toEqual(['RefreshRevoked']);
    const aLives = await refresh(a.latest.refreshToken);
    expect(aLives.status).toBe(201);
    a.latest = aLives.body as Pair;

    // The first token, presented again long after its rotation: reuse, the family and its access tokens revoked.
    clock.advance(5_001);
    const reuse = await refresh(a.first);
    expect({ status: reuse.status, body: reuse.body }).toEqual({ status: 401, body: REFRESH_REVOKED });
    expect((await refresh(a.latest.refreshToken)).body).toEqual(REFRESH_REVOKED);
    expect(await me(a.latest.accessToken)).toEqual({ status: 401, body: ACCESS_REVOKED });
    expect((await familyEvents(a.first)).slice(-2)).toEqual(['RefreshReuseDetected', 'RefreshRevoked']);
    // Another family of the same user is not touched.
    expect(await me(c.latest.accessToken)).toEqual({ status: 200, body: 'ok' });
    const cLives = await refresh(c.latest.refreshToken);
    expect(cLives.status).toBe(201);
    c.latest = cLives.body as Pair;

    // A password change revokes every family and every access token issued before it.
    const { token } = await requestResetToken(service, smtp, account.email);
    expect((await api(service, 'POST', '/auth/password-reset/confirm', { body: { token, password: `${account.password}-new` } })).status).toBe(200);
    expect((await refresh(c.latest.refreshToken)).body).toEqual(REFRESH_REVOKED);
    expect(await me(c.latest.accessToken)).toEqual({ status: 401, body: ACCESS_REVOKED });
    expect((await familyEvents(c.first)).slice(-1)).toEqual(['RefreshRevoked']);
    expect(await familyEvents(c.first)).not.toContain('RefreshReuseDetected');
  }, 120_000);
});
