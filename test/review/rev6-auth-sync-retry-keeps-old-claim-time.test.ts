import { CLAIM_ABANDONED_AFTER_MS } from '../../src/commands/users';
import { serviceForDescribe, shiftedClock, syncCustomer } from '../support/harness';
import { failNextUserAppend as failUserAppend, holdNextUserAppend as holdUserAppend, type HeldAppend } from '../support/user-appends';

/**
 * Outside review (round six) of POST /auth/sync-customer, embedded mode: the CRM retries a sync
 * that failed after its claim (the event store refused the user's append). The retry claims for
 * the same event (same basis) as the failed attempt, so nothing is appended to the reservation:
 * the claim keeps the `at` of the failed attempt. Once that is 10 minutes old, the retry's own
 * append, in flight, has no protection: another customer asking for the address meanwhile takes
 * it over, and the retry's append then gives the address to its customer as well.
 *
 * interface.md: "email | string (unique)"; "409 when the email already exists with a different
 * sync_id". decisions §3: "A new e-mail on a known `id` changes the user's e-mail unless another
 * user holds it (409)". README: a claim whose holder's stream has not reached its event is, for
 * 10 minutes after the claim, "taken for one in flight, and refused".
 */
describe('sync-customer: a retry of a failed sync, its claim older than 10 minutes (embedded)', () => {
  const clock = shiftedClock();
  const running = serviceForDescribe('embedded', {}, { clock });

  const sync = (id: number, email: string) => syncCustomer(running(), id, email);
  type Res = { status: number; body: unknown };
  const userOf = (res: Res): { id?: string; email?: string } => (res.body as { user?: { id?: string; email?: string } }).user ?? {};

  const failNextUserAppend = (): (() => void) => failUserAppend(running().eventStore);
  const holdNextUserAppend = (): HeldAppend => holdUserAppend(running().eventStore);

  /** Both finished: the customers that came out of them holding `email`. */
  const holders = (email: string, ...results: Res[]): string[] =>
    results.filter((r) => r.status < 300 && userOf(r).email === email).map((r) => userOf(r).id ?? '?');

  it('a known customer moved to a new address: the retry, in flight, and another customer both end up with it', async () => {
    const id = 700_000 + Math.floor(Math.random() * 50_000) * 4;
    const [addrA, addrB] = [`a-${id}@example.com`, `b-${id}@example.com`];
    expect((await sync(id, addrA)).status).toBe(201);

    // The CRM moves the customer to B; the user's append fails after the claim of B.
    const restore = failNextUserAppend();
    try {
      expect((await sync(id, addrB)).status).toBeGreaterThanOrEqual(500);
    } finally {
      restore();
    }

    // The CRM retries later (its retry queue, an outage of 10+ minutes).
    clock.advance(CLAIM_ABANDONED_AFTER_MS + 60_000);
    const hold = holdNextUserAppend();
    try {
      const retry = sync(id, addrB);
      await hold.atAppend; // the retry has made its claim (same basis: nothing new) and is appending
      const other = await sync(id + 1, addrB); // another customer, 1 ms into the retry's append
      hold.release();
      const retried = await retry;
      // One address, one user: the retry (claim in flight) gets B and the other customer 409,
      // or the other way round; never both.
      expect({ other: other.status, retry: retried.status, holders: holders(addrB, other, retried).length }).toEqual({
        other: 409,
        retry: 200,
        holders: 1,
      });
    } finally {
      hold.restore();
    }
  }, 60_000);

  it('a new customer whose first sync failed: the retry, in flight, and another customer both end up with the address', async () => {
    const id = 750_000 + Math.floor(Math.random() * 50_000) * 4;
    const addr = `n-${id}@example.com`;

    // First sync of a new customer: the CRM id and the address are claimed, the user's append fails.
    const restore = failNextUserAppend();
    try {
      expect((await sync(id, addr)).status).toBeGreaterThanOrEqual(500);
    } finally {
      restore();
    }

    clock.advance(CLAIM_ABANDONED_AFTER_MS + 60_000);
    const hold = holdNextUserAppend();
    try {
      const retry = sync(id, addr);
      await hold.atAppend;
      const other = await sync(id + 1, addr);
      hold.release();
      const retried = await retry;
      expect({ other: other.status, retry: retried.status, holders: holders(addr, other, retried).length }).toEqual({
        other: 409,
        retry: 201,
        holders: 1,
      });
    } finally {
      hold.restore();
    }
    // Whatever the order: afterwards, a sync of each customer with the address again leaves one holder.
    const again = [await sync(id, addr), await sync(id + 1, addr)];
    expect(holders(addr, ...again)).toHaveLength(1);
  }, 60_000);
});
