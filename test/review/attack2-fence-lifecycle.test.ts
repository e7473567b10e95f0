import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CLAIM_ABANDONED_AFTER_MS } from '../../src/commands/users';
import { allEvents, login, requestResetToken } from '../support/accounts';
import { api, CRM_KEY, shiftedClock, startTestService, syncCustomer, type TestService } from '../support/harness';
import { startTestSmtpServer, type TestSmtpServer } from '../support/smtp';
import { failNextUserAppend, holdNextUserAppend } from '../support/user-appends';

/**
 * Outside attack (round 2) on the fence of abandoned e-mail claims (README "One address, one
 * user"): several fences in one stream, a fenced customer created, erased and synced again,
 * a fenced-then-created user erasing themselves and exporting, a deactivated holder fenced, and
 * a claim in flight whose holder's stream moves by an event of the user's own that is not the
 * sync's (a password-reset request) while the sync's append waits.
 *
 * Contract: interface.md sync-customer (409 `{success:false, error, code:'CONFLICT'}`; 201
 * `created: true` for a new user), decisions §11 (erase-customer 200 `{erased:true, userId}`,
 * unknown id 404 `User not found`; `DELETE /users/me` 200 `{success:true}`, a wrong password 401;
 * export 200), README: until 10 minutes after it was made, a claim whose holder's stream has not
 * reached its event "is taken for one in flight, and refused".
 */
type Res = { status: number; body: unknown };
const userOf = (res: Res) => (res.body as { user?: { id?: string; email?: string; isActive?: boolean } }).user ?? {};
const createdOf = (res: Res) => (res.body as { created?: boolean }).created;

function expectConflict(res: Res): void {
  expect({ status: res.status, body: res.body }).toEqual({
    status: 409,
    body: { success: false, error: expect.any(String) as unknown, code: 'CONFLICT' },
  });
}

describe('attack2: fence lifecycle (embedded)', () => {
  const clock = shiftedClock();
  const dir = mkdtempSync(join(tmpdir(), 'hhc-attack2-fence-'));
  let smtp: TestSmtpServer;
  let service: TestService;
  beforeAll(async () => {
    smtp = await startTestSmtpServer();
    service = await startTestService('embedded', { DATA_DIR: dir, SMTP_URL: smtp.url }, { clock });
  }, 60_000);
  afterAll(async () => {
    await service?.stop();
    await smtp?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  let next = 500_000 + Math.floor(Math.random() * 40_000) * 100;
  const ids = (n: number): number[] => Array.from({ length: n }, () => next++);
  const sync = (id: number, email: string) => syncCustomer(service, id, email);
  const syncWith = (id: number, email: string, extra: Record<string, unknown>) =>
    api(service, 'POST', '/auth/sync-customer', {
      headers: { 'X-Internal-Api-Key': CRM_KEY },
      body: { id, first_name: 'Ada', last_name: 'Lovelace', email, active: true, ...extra },
    });
  const erase = (id: number) => api(service, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id } });

  /** A sync of `id` to `email` whose append to the user's stream fails after its claim. */
  async function failedSync(id: number, email: string, extra: Record<string, unknown> = {}): Promise<void> {
    const restore = failNextUserAppend(service.eventStore);
    try {
      expect((await syncWith(id, email, extra)).status).toBeGreaterThanOrEqual(500);
    } finally {
      restore();
    }
  }

  const streamTypes = async (userId: string): Promise<string[]> =>
    (await allEvents(service)).filter((e) => e.streamName === `user-${userId}`).map((e) => e.type);

  it('a claim in flight is not taken by a later customer because the holder asked for a password reset meanwhile', async () => {
    const [x, w] = ids(2);
    const [a, b] = [`a-${x}@example.com`, `b-${x}@example.com`];
    const first = await sync(x, a);
    expect(first.status).toBe(201);
    const held = holdNextUserAppend(service.eventStore);
    let other: Res;
    let moved: Res;
    try {
      const move = sync(x, b); // claims b, its append in flight
      await held.atAppend;
      // The person asks for a password reset at their current address: an event of theirs lands.
      await requestResetToken(service, smtp, a);
      // One second later, another customer asks for b: in flight, 409.
      other = await sync(w, b);
      held.release();
      moved = await move;
    } finally {
      held.restore();
    }
    expect({ w: other.status, x: moved.status, xEmail: userOf(moved).email }).toEqual({ w: 409, x: 200, xEmail: b });
  }, 60_000);

  it('the same after a fence took the revision the claim was made for: a later event of the user does not make it left behind', async () => {
    const [x, z, w] = ids(3);
    const [a, b, c] = [`a-${x}@example.com`, `b-${x}@example.com`, `c-${x}@example.com`];
    expect((await sync(x, a)).status).toBe(201);
    await failedSync(x, c); // an abandoned claim of c, for x's next revision
    clock.advance(CLAIM_ABANDONED_AFTER_MS + 60_000);
    const held = holdNextUserAppend(service.eventStore);
    let other: Res;
    let moved: Res;
    try {
      const move = sync(x, b); // a fresh claim of b, for the same next revision
      await held.atAppend;
      expect((await sync(z, c)).status).toBe(201); // fences x's stream at that revision
      await requestResetToken(service, smtp, a); // x's own event, after the fence
      other = await sync(w, b);
      held.release();
      moved = await move;
    } finally {
      held.restore();
    }
    expect({ w: other.status, x: moved.status, xEmail: userOf(moved).email }).toEqual({ w: 409, x: 200, xEmail: b });
  }, 60_000);

  it('two abandoned first syncs of one customer taken over in turn: two fences in one stream; nobody, then created, erased, and a new user', async () => {
    const [x, y, z] = ids(3);
    const [b, c, d, e] = [`b-${x}@example.com`, `c-${x}@example.com`, `d-${x}@example.com`, `e-${x}@example.com`];
    await failedSync(x, b);
    await failedSync(x, c);
    clock.advance(CLAIM_ABANDONED_AFTER_MS + 60_000);
    const tookB = await sync(y, b);
    const tookC = await sync(z, c);
    expect({ b: tookB.status, c: tookC.status }).toEqual({ b: 201, c: 201 });
    expectConflict(await sync(x, b));
    expectConflict(await sync(x, c));

    const erasedNobody = await erase(x);
    expect({ status: erasedNobody.status, message: (erasedNobody.body as { message?: string }).message }).toEqual({ status: 404, message: 'User not found' });

    const created = await sync(x, d);
    expect({ status: created.status, created: createdOf(created), email: userOf(created).email }).toEqual({ status: 201, created: true, email: d });
    const userId = userOf(created).id ?? '';
    const types = await streamTypes(userId);
    expect(types.filter((t) => t === 'EmailClaimWithdrawn').length).toBeLessThanOrEqual(2);
    expect(types.at(-1)).toBe('UserSynced');

    const erased = await erase(x);
    expect({ status: erased.status, body: erased.body }).toEqual({ status: 200, body: { erased: true, userId } });
    expect((await erase(x)).status).toBe(200);

    const again = await sync(x, e);
    expect({ status: again.status, created: createdOf(again), email: userOf(again).email }).toEqual({ status: 201, created: true, email: e });
    expect(userOf(again).id).not.toBe(userId);
    // d is free again (erased), b and c still the takers'.
    expect((await sync(ids(1)[0]!, d)).status).toBe(201);
    expectConflict(await sync(x, b));
    expectConflict(await sync(ids(1)[0]!, c));
    // The new user is the customer now: erase-customer names them.
    const erasedNew = await erase(x);
    expect({ status: erasedNew.status, body: erasedNew.body }).toEqual({ status: 200, body: { erased: true, userId: userOf(again).id } });
  }, 90_000);

  it('a fenced-then-created user exports, erases themselves (DELETE /users/me), and the customer synced again is a new user', async () => {
    const [x, y] = ids(2);
    const [b, own] = [`b-${x}@example.com`, `own-${x}@example.com`];
    await failedSync(x, b);
    clock.advance(CLAIM_ABANDONED_AFTER_MS + 60_000);
    const taker = await sync(y, b);
    expect(taker.status).toBe(201);
    const created = await sync(x, own);
    expect(created.status).toBe(201);
    const userId = userOf(created).id ?? '';

    const { token } = await requestResetToken(service, smtp, own);
    const password = 'Fenced-then-created-1!';
    expect((await api(service, 'POST', '/auth/password-reset/confirm', { body: { token, password } })).status).toBe(200);
    const session = await login(service, own, password);
    expect(session.user.id).toBe(userId);

    const exported = await api(service, 'GET', '/users/me/export', { token: session.accessToken });
    expect(exported.status).toBe(200);
    const doc = exported.body as { user?: { id?: string; email?: string }; events?: Array<{ stream: string; type: string }> };
    expect({ id: doc.user?.id, email: doc.user?.email }).toEqual({ id: userId, email: own });
    expect(JSON.stringify(doc)).not.toContain(b);

    const wrong = await api(service, 'DELETE', '/users/me', { token: session.accessToken, body: { password: 'not-it-Secret-1!' } });
    expect({ status: wrong.status, message: (wrong.body as { message?: string }).message }).toEqual({ status: 401, message: 'Invalid email or password' });
    const gone = await api(service, 'DELETE', '/users/me', { token: session.accessToken, body: { password } });
    expect({ status: gone.status, body: gone.body }).toEqual({ status: 200, body: { success: true } });
    expect((await api(service, 'GET', '/users/me', { token: session.accessToken })).status).toBe(401);

    const crmErase = await erase(x);
    expect({ status: crmErase.status, body: crmErase.body }).toEqual({ status: 200, body: { erased: true, userId } });
    const again = await sync(x, own);
    expect({ status: again.status, created: createdOf(again) }).toEqual({ status: 201, created: true });
    expect(userOf(again).id).not.toBe(userId);
    expectConflict(await sync(x, b));
  }, 90_000);

  it('a deactivated customer whose move failed is fenced: 409 for the taken address, their own address and state kept', async () => {
    const [x, y, z] = ids(3);
    const [a, b] = [`a-${x}@example.com`, `b-${x}@example.com`];
    const off = await syncWith(x, a, { active: false });
    expect({ status: off.status, active: userOf(off).isActive }).toEqual({ status: 201, active: false });
    const userId = userOf(off).id ?? '';
    await failedSync(x, b, { active: false });
    clock.advance(CLAIM_ABANDONED_AFTER_MS + 60_000);
    expect((await sync(y, b)).status).toBe(201);
    expect((await streamTypes(userId)).filter((t) => t === 'EmailClaimWithdrawn')).toHaveLength(1);
    expectConflict(await syncWith(x, b, { active: false }));
    expectConflict(await syncWith(x, b, { active: true }));
    const still = await syncWith(x, a, { active: false });
    expect({ status: still.status, active: userOf(still).isActive, email: userOf(still).email, id: userOf(still).id }).toEqual({
      status: 200,
      active: false,
      email: a,
      id: userId,
    });
    expectConflict(await sync(z, a));
    const erased = await erase(x);
    expect({ status: erased.status, body: erased.body }).toEqual({ status: 200, body: { erased: true, userId } });
    expect((await sync(z, a)).status).toBe(201);
  }, 60_000);
});
