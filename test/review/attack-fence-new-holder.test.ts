import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CLAIM_ABANDONED_AFTER_MS } from '../../src/commands/users';
import { allEvents, login, requestResetToken } from '../support/accounts';
import { api, CRM_KEY, shiftedClock, startTestService, syncCustomer, type TestService } from '../support/harness';
import { startTestSmtpServer, type TestSmtpServer } from '../support/smtp';
import { failNextUserAppend } from '../support/user-appends';

/**
 * Outside attack on the fence of an abandoned e-mail claim (README "One address, one user"),
 * embedded mode, when the holder is a brand-new customer whose first sync stopped between its
 * claims and its append: its user stream is empty, and the fence creates it with nothing but
 * `EmailClaimWithdrawn`. The customer is then synced again, erased, the service restarted.
 *
 * Contract: interface.md sync-customer (409 `{success:false, error, code:'CONFLICT'}` when the
 * e-mail is held by another sync_id; 201 `created: true` for a new user), decisions §11
 * erase-customer (unknown id: 404 `User not found`; an erased customer's e-mail and CRM id are
 * free again), README: the fence holds ids only and does not change the user.
 */
type Res = { status: number; body: unknown };
const userOf = (res: Res) => (res.body as { user?: { id?: string; email?: string; sync_id?: number; isActive?: boolean } }).user ?? {};
const createdOf = (res: Res) => (res.body as { created?: boolean }).created;

function expectConflict(res: Res): void {
  expect(res.status).toBe(409);
  const body = res.body as Record<string, unknown>;
  expect(body.success).toBe(false);
  expect(typeof body.error).toBe('string');
  expect(body.code).toBe('CONFLICT');
}

const erase = (s: TestService, id: number) => api(s, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id } });

describe('attack: fence of a brand-new customer whose first sync stalled (embedded)', () => {
  const clock = shiftedClock();
  const dir = mkdtempSync(join(tmpdir(), 'hhc-attack-fence-'));
  let smtp: TestSmtpServer;
  let service: TestService;
  const start = async () => {
    service = await startTestService('embedded', { DATA_DIR: dir, SMTP_URL: smtp.url }, { clock });
  };
  beforeAll(async () => {
    smtp = await startTestSmtpServer();
    await start();
  }, 60_000);
  afterAll(async () => {
    await service?.stop();
    await smtp?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const base = 300_000 + Math.floor(Math.random() * 50_000) * 10;

  /** The first sync of `id` with `email` claims, then its append fails; the clock then moves past the claim's age. */
  async function stalledFirstSync(id: number, email: string): Promise<void> {
    const restore = failNextUserAppend(service.eventStore);
    try {
      expect((await syncCustomer(service, id, email)).status).toBeGreaterThanOrEqual(500);
    } finally {
      restore();
    }
    clock.advance(CLAIM_ABANDONED_AFTER_MS + 60_000);
  }

  async function fences(): Promise<Array<{ streamName: string; data: Record<string, unknown> }>> {
    return (await allEvents(service))
      .filter((e) => e.type === 'EmailClaimWithdrawn')
      .map((e) => ({ streamName: e.streamName, data: e.data as Record<string, unknown> }));
  }

  it('the takeover fences a stream that did not exist: the event holds ids only, and is alone in it', async () => {
    const [x, y] = [base, base + 1];
    const addr = `new-${x}@example.com`;
    await stalledFirstSync(x, addr);
    const taken = await syncCustomer(service, y, addr);
    expect({ status: taken.status, email: userOf(taken).email, created: createdOf(taken) }).toEqual({ status: 201, email: addr, created: true });

    const fenced = (await fences()).filter((f) => f.data.takenBy === userOf(taken).id);
    expect(fenced).toHaveLength(1);
    const fence = fenced[0]!;
    expect(Object.keys(fence.data).sort()).toEqual(['takenBy', 'userId', 'withdrawnAt']);
    expect(JSON.stringify(fence.data)).not.toContain(addr);
    expect(fence.streamName).toBe(`user-${String(fence.data.userId)}`);
    const stream = (await allEvents(service)).filter((e) => e.streamName === fence.streamName).map((e) => e.type);
    expect(stream).toEqual(['EmailClaimWithdrawn']);

    // The late customer asking again for the address: 409 in the contract's shape.
    expectConflict(await syncCustomer(service, x, addr));
    // A third customer: 409 too, the address is y's.
    expectConflict(await syncCustomer(service, base + 2, addr));
  }, 60_000);

  it('the fenced customer, synced again with another address, is created (201, created: true), logs in and exports', async () => {
    const [x, y] = [base + 3, base + 4];
    const [addr, other] = [`new-${x}@example.com`, `other-${x}@example.com`];
    await stalledFirstSync(x, addr);
    expect((await syncCustomer(service, y, addr)).status).toBe(201);

    const created = await syncCustomer(service, x, other);
    expect({ status: created.status, created: createdOf(created), email: userOf(created).email, sync_id: userOf(created).sync_id, active: userOf(created).isActive }).toEqual({
      status: 201,
      created: true,
      email: other,
      sync_id: x,
      active: true,
    });
    // Sending it again changes nothing: 200, created false, same user.
    const again = await syncCustomer(service, x, other);
    expect({ status: again.status, created: createdOf(again), id: userOf(again).id }).toEqual({ status: 200, created: false, id: userOf(created).id });
    // The address x now holds is x's: another customer 409.
    expectConflict(await syncCustomer(service, base + 5, other));

    // The user sets a password and logs in, reads /users/me and exports.
    const { token } = await requestResetToken(service, smtp, other);
    const password = 'Fenced-user-pw-123!';
    expect((await api(service, 'POST', '/auth/password-reset/confirm', { body: { token, password } })).status).toBe(200);
    const session = await login(service, other, password);
    expect(session.user.id).toBe(userOf(created).id);
    const me = await api(service, 'GET', '/users/me', { token: session.accessToken });
    expect({ status: me.status, email: (me.body as { email?: string }).email }).toEqual({ status: 200, email: other });
    const exported = await api(service, 'GET', '/users/me/export', { token: session.accessToken });
    expect(exported.status).toBe(200);
    const doc = exported.body as { user?: { email?: string }; events?: Array<{ type: string; data: unknown }> };
    expect(doc.user?.email).toBe(other);
    // The withdrawn claim's address never appears in x's export (it was never x's, and is y's now).
    expect(JSON.stringify(doc)).not.toContain(addr);
  }, 90_000);

  it('erasing a fenced customer that was never created: 404 User not found; its CRM id is then free (201)', async () => {
    const [x, y] = [base + 6, base + 7];
    const addr = `new-${x}@example.com`;
    await stalledFirstSync(x, addr);
    expect((await syncCustomer(service, y, addr)).status).toBe(201);

    const erased = await erase(service, x);
    expect({ status: erased.status, message: (erased.body as { message?: string }).message }).toEqual({ status: 404, message: 'User not found' });
    const created = await syncCustomer(service, x, `later-${x}@example.com`);
    expect({ status: created.status, created: createdOf(created) }).toEqual({ status: 201, created: true });
  }, 60_000);

  it('erasing the fenced customer after it was created, and the customer who took the address: both addresses free again', async () => {
    const [x, y] = [base + 8, base + 9];
    const [addr, other] = [`new-${x}@example.com`, `other-${x}@example.com`];
    await stalledFirstSync(x, addr);
    expect((await syncCustomer(service, y, addr)).status).toBe(201);
    expect((await syncCustomer(service, x, other)).status).toBe(201);

    expect((await erase(service, x)).status).toBe(200);
    expect((await erase(service, x)).status).toBe(200);
    // x's address is free: another customer takes it.
    expect((await syncCustomer(service, base + 10_000, other)).status).toBe(201);
    // y still holds addr.
    expectConflict(await syncCustomer(service, base + 10_001, addr));
    expect((await erase(service, y)).status).toBe(200);
    // Now addr is free: x (a new user) gets it.
    const back = await syncCustomer(service, x, addr);
    expect({ status: back.status, created: createdOf(back), email: userOf(back).email }).toEqual({ status: 201, created: true, email: addr });
  }, 60_000);

  it('after a restart on the same DATA_DIR: the fenced stream is read back, holders are unchanged, nobody gets a held address', async () => {
    const [x, y] = [base + 20, base + 21];
    const [addr, other] = [`new-${x}@example.com`, `other-${x}@example.com`];
    await stalledFirstSync(x, addr);
    const yUser = userOf(await syncCustomer(service, y, addr));
    // A second fenced customer, left never-created.
    const [x2, y2] = [base + 22, base + 23];
    const addr2 = `new-${x2}@example.com`;
    await stalledFirstSync(x2, addr2);
    expect((await syncCustomer(service, y2, addr2)).status).toBe(201);
    const xUser = userOf(await syncCustomer(service, x, other));

    await service.stop();
    await start();

    const yAgain = await syncCustomer(service, y, addr);
    expect({ status: yAgain.status, id: userOf(yAgain).id, created: createdOf(yAgain) }).toEqual({ status: 200, id: yUser.id, created: false });
    const xAgain = await syncCustomer(service, x, other);
    expect({ status: xAgain.status, id: userOf(xAgain).id, created: createdOf(xAgain) }).toEqual({ status: 200, id: xUser.id, created: false });
    expectConflict(await syncCustomer(service, x, addr));
    expectConflict(await syncCustomer(service, x2, addr2));
    expectConflict(await syncCustomer(service, base + 10_002, addr2));
    // The never-created x2 is still nobody: erase says so, and a sync with a free address creates it.
    expect((await erase(service, x2)).status).toBe(404);
    expect((await syncCustomer(service, x2, `other-${x2}@example.com`)).status).toBe(201);
    // /users/me of both works with a token signed by the service.
    for (const u of [xUser, yUser]) {
      const me = await api(service, 'GET', '/users/me', { token: service.tokens.signAccess({ sub: u.id ?? '', email: u.email ?? '', role: 'user' }) });
      expect({ status: me.status, email: (me.body as { email?: string }).email }).toEqual({ status: 200, email: u.email });
    }
  }, 120_000);
});
