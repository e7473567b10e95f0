import { CLAIM_ABANDONED_AFTER_MS } from '../../src/commands/users';
import { api, CRM_KEY, serviceForDescribe, shiftedClock, syncCustomer, type TestService } from '../support/harness';
import { failNextUserAppend, holdNextUserAppend } from '../support/user-appends';

/**
 * Outside attack on the fence of an abandoned e-mail claim, distributed mode, two API
 * processes on one clock (the test's): the late sync on one process, the takeover on the other.
 * Contract as in attack-fence-known-holder.test.ts.
 */
type Res = { status: number; body: unknown };
const userOf = (res: Res) => (res.body as { user?: { id?: string; email?: string } }).user ?? {};
function expectConflict(res: Res): void {
  expect({ status: res.status, body: res.body }).toEqual({ status: 409, body: { success: false, error: expect.any(String) as unknown, code: 'CONFLICT' } });
}
const erase = (s: TestService, id: number) => api(s, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id } });

describe('attack: fence across two processes (distributed)', () => {
  const clock = shiftedClock();
  const running = serviceForDescribe('distributed', {}, { clock });
  let b: TestService | undefined;
  beforeAll(async () => {
    b = await running().startAnother();
  }, 60_000);
  afterAll(async () => {
    await b?.stop();
  });
  let next = 500_000 + Math.floor(Math.random() * 50_000) * 100;
  const ids = (n: number): number[] => Array.from({ length: n }, () => next++);

  it('a late sync on process a, the takeover on process b: 409 to the late one, the retry on b 409 too, one holder', async () => {
    const [x, y, z] = ids(3);
    const [addrA, addrB] = [`a-${x}@example.com`, `b-${x}@example.com`];
    expect((await syncCustomer(running(), x, addrA)).status).toBe(201);
    const held = holdNextUserAppend(running().eventStore);
    try {
      const late = syncCustomer(running(), x, addrB);
      await held.atAppend;
      clock.advance(CLAIM_ABANDONED_AFTER_MS + 60_000);
      expect((await syncCustomer(b!, y, addrB)).status).toBe(201);
      held.release();
      expectConflict(await late);
    } finally {
      held.restore();
    }
    expectConflict(await syncCustomer(b!, x, addrB));
    expectConflict(await syncCustomer(running(), z, addrB));
    expectConflict(await syncCustomer(b!, z, addrA));
  }, 60_000);

  it('a brand-new customer fenced through process b: erase on a answers 404 (never created), a later sync with a free address creates it', async () => {
    const [x, y] = ids(2);
    const addr = `n-${x}@example.com`;
    const restore = failNextUserAppend(running().eventStore);
    try {
      expect((await syncCustomer(running(), x, addr)).status).toBeGreaterThanOrEqual(500);
    } finally {
      restore();
    }
    clock.advance(CLAIM_ABANDONED_AFTER_MS + 60_000);
    expect((await syncCustomer(b!, y, addr)).status).toBe(201);
    expectConflict(await syncCustomer(running(), x, addr));
    expect((await erase(running(), x)).status).toBe(404);
    const created = await syncCustomer(b!, x, `other-${x}@example.com`);
    expect({ status: created.status, email: userOf(created).email }).toEqual({ status: 201, email: `other-${x}@example.com` });
  }, 60_000);

  it('two takeovers racing on the two processes: exactly one gets the address', async () => {
    const [x, y, z] = ids(3);
    const [addrA, addrB] = [`a-${x}@example.com`, `b-${x}@example.com`];
    expect((await syncCustomer(running(), x, addrA)).status).toBe(201);
    const restore = failNextUserAppend(running().eventStore);
    try {
      expect((await syncCustomer(running(), x, addrB)).status).toBeGreaterThanOrEqual(500);
    } finally {
      restore();
    }
    clock.advance(CLAIM_ABANDONED_AFTER_MS + 60_000);
    const results = await Promise.all([syncCustomer(running(), y, addrB), syncCustomer(b!, z, addrB)]);
    expect(results.map((r) => r.status).sort()).toEqual([201, 409]);
    expectConflict(results.find((r) => r.status === 409)!);
    expectConflict(await syncCustomer(b!, x, addrB));
  }, 60_000);
});
