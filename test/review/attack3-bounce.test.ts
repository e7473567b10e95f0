import { CLAIM_ABANDONED_AFTER_MS } from '../../src/commands/users';
import { serviceForDescribe, shiftedClock, syncCustomer } from '../support/harness';
import { failNextUserAppend } from '../support/user-appends';

/**
 * Outside attack (round 3) on "One address, one user" (README): a customer moving a→b→a→b
 * quickly with the user append failing at various points. After it, the customer has one
 * address, nobody else can take it, and every other address is free (at the latest 10 minutes
 * after the last claim). Contract: interface.md sync-customer, decisions §3.
 */
type Res = { status: number; body: unknown };
const emailOf = (res: Res) => (res.body as { user?: { email?: string } }).user?.email;

describe('attack3: a→b→a→b with failing appends (embedded)', () => {
  const clock = shiftedClock();
  const running = serviceForDescribe('embedded', {}, { clock });
  let next = 800_000 + Math.floor(Math.random() * 40_000) * 100;
  const fresh = (): number => next++;

  const failing = async (id: number, email: string): Promise<number> => {
    const restore = failNextUserAppend(running().eventStore);
    try {
      return (await syncCustomer(running(), id, email)).status;
    } finally {
      restore();
    }
  };

  const patterns: ReadonlyArray<ReadonlyArray<boolean>> = [
    [false, true, false, true],
    [true, false, true, false],
    [false, false, true, true],
    [true, true, false, false],
    [false, true, true, false],
  ];

  it.each(patterns.map((p, i) => [i, p] as const))('pattern %i: one holder, the rest free', async (_i, fails) => {
    const x = fresh();
    const [a, b] = [`a-${x}@example.com`, `b-${x}@example.com`];
    expect((await syncCustomer(running(), x, a)).status).toBe(201);
    const steps = [b, a, b, a];
    let cur = a;
    for (const [k, to] of steps.entries()) {
      // A sync to the address x has appends nothing: it cannot fail there.
      if (fails[k] === true && to !== cur) expect(await failing(x, to)).toBeGreaterThanOrEqual(500);
      else {
        expect((await syncCustomer(running(), x, to)).status).toBe(200);
        cur = to;
      }
    }
    // What x has now: a sync that changes nothing names it.
    const mine = emailOf(await syncCustomer(running(), x, cur));
    expect(mine).toBe(cur);
    const theOther = mine === a ? b : a;
    // x's address: refused, now and later.
    expect((await syncCustomer(running(), fresh(), mine!)).status).toBe(409);
    clock.advance(CLAIM_ABANDONED_AFTER_MS + 60_000);
    expect((await syncCustomer(running(), fresh(), mine!)).status).toBe(409);
    // The other: free (10 minutes after its last claim at the latest).
    const w = fresh();
    const took = await syncCustomer(running(), w, theOther);
    expect({ status: took.status, email: emailOf(took) }).toEqual({ status: 201, email: theOther });
    expect((await syncCustomer(running(), x, theOther)).status).toBe(409);
  }, 60_000);
});
