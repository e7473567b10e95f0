import { api, shiftedClock, startTestService, type TestService } from '../support/harness';
import { createAccount, login, type Account } from '../support/accounts';
import { startTestSmtpServer, type TestSmtpServer } from '../support/smtp';

/**
 * Outside review of refresh-token reuse (decisions §3): "Presenting a token that is already
 * `rotated` is reuse: the whole family is revoked (`RefreshReuseDetected`) and the answer is
 * 401 `Refresh token has been revoked`. [...] A rotated token presented again within 5 s of
 * its rotation is a lost race, not reuse". A token rotated long ago is reuse whatever else
 * happens in its family at that moment: when the thief's old token arrives while the app
 * refreshes its current one, the family must still end revoked (the app's new pair included).
 */

interface Pair {
  readonly accessToken: string;
  readonly refreshToken: string;
}

const REFRESH_REVOKED = { statusCode: 401, message: 'Refresh token has been revoked', error: 'Unauthorized' };

describe('refresh-token reuse racing a legitimate rotation in the same family (embedded mode)', () => {
  let smtp: TestSmtpServer;
  let service: TestService;
  let account: Account;
  const clock = shiftedClock();

  beforeAll(async () => {
    smtp = await startTestSmtpServer();
    service = await startTestService('embedded', { SMTP_URL: smtp.url }, { clock });
    account = await createAccount(service, smtp);
  }, 60_000);
  afterAll(async () => {
    await service?.stop();
    await smtp?.stop();
  });

  const refresh = (refreshToken: string) => api(service, 'POST', '/auth/refresh', { body: { refreshToken } });

  it('an old rotated token presented while the current one is refreshed revokes the family', async () => {
    const survivors: string[] = [];
    for (let attempt = 0; attempt < 24 && survivors.length === 0; attempt++) {
      const first = await login(service, account.email, account.password);
      const rotated = await refresh(first.refreshToken);
      expect(rotated.status).toBe(201);
      const current = rotated.body as Pair;
      // The first token was rotated well over 5 s ago: presenting it now is reuse, not a lost race.
      clock.advance(6_000);

      // The app refreshes its current token; the stolen first token arrives at about the same time.
      const legit = refresh(current.refreshToken);
      await new Promise((resolve) => setTimeout(resolve, attempt % 3));
      const stolen = refresh(first.refreshToken);
      const [legitRes, stolenRes] = await Promise.all([legit, stolen]);

      expect({ status: stolenRes.status, body: stolenRes.body }).toEqual({ status: 401, body: REFRESH_REVOKED });
      if (legitRes.status === 201) {
        // The app won its rotation, but the family was reused: the pair it just got must not work.
        const next = legitRes.body as Pair;
        const again = await refresh(next.refreshToken);
        const me = await api(service, 'GET', '/users/me', { token: next.accessToken });
        if (again.status !== 401 || me.status !== 401) {
          survivors.push(`attempt ${attempt}: after the reuse the new refresh token answered ${again.status}, its access token ${me.status}`);
        }
      } else {
        expect({ status: legitRes.status, body: legitRes.body }).toEqual({ status: 401, body: REFRESH_REVOKED });
      }
    }
    expect(survivors).toEqual([]);
  }, 120_000);
});
