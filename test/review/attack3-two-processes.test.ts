import { CLAIM_ABANDONED_AFTER_MS } from '../../src/commands/users';
import { api, CRM_KEY, serviceForDescribe, shiftedClock, syncCustomer, type TestService } from '../support/harness';
import { holdNextUserAppend } from '../support/user-appends';

/**
 * Outside attack (round 3) on "One address, one user" (README), distributed mode, two API
 * processes: two syncs of one customer, one moving to b (held between its claim and its append)
 * and one moving to c (lands first, at the revision b's claim was made for). That `UserSynced`
 * is not the b sync's own, so b's claim is in flight (refused to others) for 10 minutes; the b
 * sync then decides again and takes b. Also: an erasure of the holder while their sync is held.
 * Contract: interface.md sync-customer (409 `{success:false, error, code:'CONFLICT'}`), decisions §3, §11.
 */
type Res = { status: number; body: unknown };
const userOf = (res: Res) => (res.body as { user?: { id?: string; email?: string } }).user ?? {};
function expectConflict(res: Res): void {
  expect({ status: res.status, body: res.body }).toEqual({ status: 409, body: { success: false, error: expect.any(String) as unknown, code: 'CONFLICT' } });
}
const erase = (s: TestService, id: number) => api(s, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id } });

describe('attack3: two syncs of one customer on two processes (distributed)', () => {
  const clock = shiftedClock();
  const running = serviceForDescribe('distributed', {}, { clock });
  let other: TestService | undefined;
  beforeAll(async () => {
    other = await running().startAnother();
  }, 60_000);
  afterAll(async () => {
    await other?.stop();
  });
  let next = 700_000 + Math.floor(Math.random() * 40_000) * 100;
  const ids = (n: number): number[] => Array.from({ length: n }, () => next++);

  it('b held on process 1, c lands on process 2: b refused to a later customer within 10 minutes; the b sync then ends with b', async () => {
    const [x, w] = ids(2);
    const [a, b, c] = [`a-${x}@example.com`, `b-${x}@example.com`, `c-${x}@example.com`];
    expect((await syncCustomer(running(), x, a)).status).toBe(201);
    const held = holdNextUserAppend(running().eventStore);
    let later: Res;
    let toB: Res;
    try {
      const movingB = syncCustomer(running(), x, b);
      await held.atAppend;
      const toC = await syncCustomer(other!, x, c);
      expect({ status: toC.status, email: userOf(toC).email }).toEqual({ status: 200, email: c });
      later = await syncCustomer(other!, w, b);
      held.release();
      toB = await movingB;
    } finally {
      held.restore();
    }
    expect({ later: later.status, toB: toB.status, email: userOf(toB).email }).toEqual({ later: 409, toB: 200, email: b });
  }, 60_000);

  it('whatever the outcome of that race, the address has one holder and c is not kept by nobody', async () => {
    const [x, w] = ids(2);
    const [a, b, c] = [`a-${x}@example.com`, `b-${x}@example.com`, `c-${x}@example.com`];
    expect((await syncCustomer(running(), x, a)).status).toBe(201);
    const held = holdNextUserAppend(running().eventStore);
    let toB: Res;
    let wB: Res;
    try {
      const movingB = syncCustomer(running(), x, b);
      await held.atAppend;
      expect((await syncCustomer(other!, x, c)).status).toBe(200);
      wB = await syncCustomer(other!, w, b);
      held.release();
      toB = await movingB;
    } finally {
      held.restore();
    }
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
