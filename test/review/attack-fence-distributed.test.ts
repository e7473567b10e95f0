import { CLAIM_ABANDONED_AFTER_MS } from '../../src/commands/users';
import { api, CRM_KEY, serviceForDescribe, shiftedClock, syncCustomer, type TestService } from '../support/harness';
import { failNextUserAppend, holdNextUserAppend } from '../support/user-appends';

/**
 * Outside attack on the fence of an abandoned e-mail claim, distributed mode, two API
 * processes on one clock (the test's): the late sync on one process, the takeover on the other.
 * Contract as in attack-fence-known-holder.test.ts.
 *
 * Round 3 (in the same describe, to share the two processes): two syncs of one customer, one
 * moving to b (held between its claim and its append) and one moving to c (lands first, at the
 * revision b's claim was made for). That `UserSynced` is not the b sync's own, so b's claim is
 * in flight (refused to others) for 10 minutes; the b sync then decides again and takes b.
 * Also: an erasure of the holder while their sync is held.
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
  // The same second process, under the name round 3's tests give it.
  let other: TestService | undefined;
  beforeAll(async () => {
    b = await running().startAnother();
    other = b;
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

  // Round 3: two syncs of one customer on the two processes.
  /**
   * The race both round-3 tests run: x (at a) moves to b on process 1, held between its claim and
   * its append; meanwhile x moves to c on process 2, then w asks for b there; then b's move lands.
   */
  async function raceBAgainstC(x: number, w: number): Promise<{ a: string; b: string; c: string; toC: Res; later: Res; toB: Res }> {
    const [a, b, c] = [`a-${x}@example.com`, `b-${x}@example.com`, `c-${x}@example.com`];
    expect((await syncCustomer(running(), x, a)).status).toBe(201);
    const held = holdNextUserAppend(running().eventStore);
    try {
      const movingB = syncCustomer(running(), x, b);
      await held.atAppend;
      const toC = await syncCustomer(other!, x, c);
      const later = await syncCustomer(other!, w, b);
      held.release();
      return { a, b, c, toC, later, toB: await movingB };
    } finally {
      held.restore();
    }
  }

  it('b held on process 1, c lands on process 2: b refused to a later customer within 10 minutes; the b sync then ends with b', async () => {
    const [x, w] = ids(2);
    const { c, toC, later, toB, b } = await raceBAgainstC(x!, w!);
    expect({ status: toC.status, email: userOf(toC).email }).toEqual({ status: 200, email: c });
    expect({ later: later.status, toB: toB.status, email: userOf(toB).email }).toEqual({ later: 409, toB: 200, email: b });
  }, 60_000);

  it('whatever the outcome of that race, the address has one holder and c is not kept by nobody', async () => {
    const [x, w] = ids(2);
    const { a, b, c, toC, later: wB, toB } = await raceBAgainstC(x!, w!);
    expect(toC.status).toBe(200);
    const xNow = await syncCustomer(other!, x, toB.status === 200 ? b : c);
    expect(xNow.status).toBe(200);
    const xEmail = userOf(xNow).email;
    // One holder of b: exactly one of x and w.
    const holders = [xEmail === b, wB.status === 201].filter(Boolean).length;
    expect(holders).toBe(1);
    clock.advance(CLAIM_ABANDONED_AFTER_MS + 60_000);
    // Every address nobody has is free for another customer (after 10 minutes at the latest).
    const free = [a, b, c].filter((e) => e !== xEmail && !(e === b && wB.status === 201));
    const taken: Record<string, number> = {};
    for (const addr of free) taken[addr] = (await syncCustomer(running(), ids(1)[0]!, addr)).status;
    expect(taken).toEqual(Object.fromEntries(free.map((e) => [e, 201])));
  }, 60_000);

  it('the holder erased while their move is held on process 1: the address is free at once, the held sync is refused, one holder', async () => {
    const [x, w, v] = ids(3);
    const [a, b] = [`a-${x}@example.com`, `b-${x}@example.com`];
    const first = await syncCustomer(running(), x, a);
    expect(first.status).toBe(201);
    const held = holdNextUserAppend(running().eventStore);
    let late: Res;
    try {
      const moving = syncCustomer(running(), x, b);
      await held.atAppend;
      const erased = await erase(other!, x);
      expect({ status: erased.status, body: erased.body }).toEqual({ status: 200, body: { erased: true, userId: userOf(first).id } });
      // The customer synced again from process 2: a new user, who takes b from the erased one.
      const again = await syncCustomer(other!, x, b);
      expect({ status: again.status, email: userOf(again).email }).toEqual({ status: 201, email: b });
      expect(userOf(again).id).not.toBe(userOf(first).id);
      held.release();
      late = await moving;
    } finally {
      held.restore();
    }
    expect(late.status).not.toBe(200);
    expect(late.status).toBeLessThan(500);
    expectConflict(await syncCustomer(running(), w, b));
    expect((await syncCustomer(running(), v, a)).status).toBe(201);
    const still = await syncCustomer(running(), x, b);
    expect({ status: still.status, email: userOf(still).email }).toEqual({ status: 200, email: b });
  }, 60_000);
});
