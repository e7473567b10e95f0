import { MODES, shiftedClock, startTestService, type Mode, type TestService } from '../support/harness';
import { allEvents, createAccount, login, type Account } from '../support/accounts';
import { rawRequest, type RawResponse } from '../support/path-variants';
import { startTestSmtpServer, type TestSmtpServer } from '../support/smtp';

/**
 * Parallel refreshes never log a user out (decisions §3): of 8 refreshes of one token, each on
 * its own new connection (as separate app instances or a cold pool send them), one wins and
 * the others get 401 `Refresh token has been revoked` with the family kept, so the winner's
 * new token works. A rotated token presented again more than 5 s after its rotation is reuse:
 * the family is revoked.
 */

const REVOKED = { statusCode: 401, message: 'Refresh token has been revoked', error: 'Unauthorized' };

describe.each<Mode>(MODES)('refresh races (%s mode)', (mode) => {
  let smtp: TestSmtpServer;
  let service: TestService;
  let account: Account;
  const clock = shiftedClock();

  beforeAll(async () => {
    smtp = await startTestSmtpServer();
    service = await startTestService(mode, { SMTP_URL: smtp.url }, { clock });
    account = await createAccount(service, smtp);
  }, 60_000);
  afterAll(async () => {
    await service?.stop();
    await smtp?.stop();
  });

  /** A refresh on a connection of its own, opened for it (no keep-alive pool). */
  const refreshOnNewConnection = (target: TestService, refreshToken: string): Promise<RawResponse> =>
    rawRequest(target, 'POST', '/api/v1/auth/refresh', { body: { refreshToken } });

  const sessionEvents = async (refreshToken: string): Promise<string[]> => {
    const fam = service.tokens.verifyRefresh(refreshToken).fam;
    return (await allEvents(service)).filter((e) => e.streamName === `session-${fam}`).map((e) => e.type);
  };

  test('8 refreshes of one token, each on its own new connection: one 201, seven lost races, and the winner’s token works — every round', async () => {
    let token = (await login(service, account.email, account.password)).refreshToken;
    for (let round = 0; round < 5; round++) {
      const results = await Promise.all(Array.from({ length: 8 }, () => refreshOnNewConnection(service, token)));
      expect(results.map((r) => r.status).sort()).toEqual([201, 401, 401, 401, 401, 401, 401, 401]);
      for (const loser of results.filter((r) => r.status !== 201)) expect(loser.body).toEqual(REVOKED);
      token = (results.find((r) => r.status === 201)?.body as { refreshToken: string }).refreshToken;
      // The winner's new token works at once.
      const next = await refreshOnNewConnection(service, token);
      expect({ round, status: next.status }).toEqual({ round, status: 201 });
      token = (next.body as { refreshToken: string }).refreshToken;
    }
    expect(await sessionEvents(token)).not.toContain('RefreshReuseDetected');
  });

  test('a rotated token presented more than 5 s after its rotation is reuse: the family is revoked, the newest token with it', async () => {
    const first = (await login(service, account.email, account.password)).refreshToken;
    const rotated = await refreshOnNewConnection(service, first);
    expect(rotated.status).toBe(201);
    const newest = (rotated.body as { refreshToken: string }).refreshToken;
    clock.advance(5_001);
    const reuse = await refreshOnNewConnection(service, first);
    expect(reuse.status).toBe(401);
    expect(reuse.body).toEqual(REVOKED);
    const after = await refreshOnNewConnection(service, newest);
    expect(after.status).toBe(401);
    expect(after.body).toEqual(REVOKED);
    expect(await sessionEvents(first)).toEqual(['RefreshIssued', 'RefreshRotated', 'RefreshIssued', 'RefreshReuseDetected', 'RefreshRevoked']);
  });

  if (mode === 'distributed') {
    test('racers spread over two API processes: one winner, the family kept, the winner’s token works on either', async () => {
      const other = await service.startAnother();
      try {
        let token = (await login(service, account.email, account.password)).refreshToken;
        for (let round = 0; round < 4; round++) {
          const results = await Promise.all(Array.from({ length: 8 }, (_, i) => refreshOnNewConnection(i % 2 === 0 ? service : other, token)));
          expect(results.map((r) => r.status).sort()).toEqual([201, 401, 401, 401, 401, 401, 401, 401]);
          token = (results.find((r) => r.status === 201)?.body as { refreshToken: string }).refreshToken;
          const next = await refreshOnNewConnection(round % 2 === 0 ? other : service, token);
          expect({ round, status: next.status }).toEqual({ round, status: 201 });
          token = (next.body as { refreshToken: string }).refreshToken;
        }
        expect(await sessionEvents(token)).not.toContain('RefreshReuseDetected');
      } finally {
        await other.stop();
      }
    }, 60_000);
  }
});
