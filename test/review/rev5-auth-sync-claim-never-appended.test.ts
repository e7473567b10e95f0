import { CLAIM_ABANDONED_AFTER_MS } from '../../src/commands/users';
import { serviceForDescribe, shiftedClock, syncCustomer } from '../support/harness';
import { failNextUserAppend as failUserAppend, holdNextUserAppend } from '../support/user-appends';

/**
 * Outside review (round five) of POST /auth/sync-customer, embedded mode: a sync that claimed
 * the customer's new address and then never made its append to the user's stream (the event
 * store refused that write: a process stopped there answers the same way, nothing after it done).
 *
 * interface.md: "email | string (unique)"; "409 when the email already exists with a different
 * sync_id". decisions §3: "A new e-mail on a known `id` changes the user's e-mail unless another
 * user holds it (409)": an address no user holds is free, so another customer synced with it is
 * created (201).
 */
describe('sync-customer: a claim whose sync never appended (embedded)', () => {
  const clock = shiftedClock();
  const running = serviceForDescribe('embedded', {}, { clock });

  const sync = (id: number, email: string) => syncCustomer(running(), id, email);
  const emailOf = (res: { body: unknown }): string | undefined => (res.body as { user?: { email?: string } }).user?.email;

  /** The next append to a user's stream fails (after every claim its sync made). */
  const failNextUserAppend = (): (() => void) => failUserAppend(running().eventStore);

  it('a claim in flight (its append not made yet) is not taken over: the sync that made it gets the address, the other customer 409', async () => {
    const id = 860_000 + Math.floor(Math.random() * 50_000) * 4;
    const [addrA, addrB] = [`a-${id}@example.com`, `b-${id}@example.com`];
    expect((await sync(id, addrA)).status).toBe(201);
    // The customer's move to B: its claim is made, its append to the user's stream waits.
    const held = holdNextUserAppend(running().eventStore);
    try {
      const move = sync(id, addrB);
      await held.atAppend;
      clock.advance(60_000);
      expect((await sync(id + 1, addrB)).status).toBe(409);
      held.release();
      const moved = await move;
      expect({ status: moved.status, email: emailOf(moved) }).toEqual({ status: 200, email: addrB });
      expect((await sync(id + 2, addrB)).status).toBe(409);
    } finally {
      held.restore();
    }
  }, 60_000);

  it('an address whose sync failed, the customer then synced with their own address again, is free', async () => {
    const id = 810_000 + Math.floor(Math.random() * 50_000) * 4;
    const [addrA, addrB] = [`a-${id}@example.com`, `b-${id}@example.com`];
    expect((await sync(id, addrA)).status).toBe(201);

    // The CRM moves the customer to B; the write of the user's event fails: the sync fails, the customer keeps A.
    const restore = failNextUserAppend();
    try {
      expect((await sync(id, addrB)).status).toBeGreaterThanOrEqual(500);
    } finally {
      restore();
    }

    // The CRM record is set back to A and sent again: the customer has A (nothing changes).
    const back = await sync(id, addrA);
    expect({ status: back.status, email: emailOf(back) }).toEqual({ status: 200, email: addrA });

    // B is nobody's. It was: 409 for good, B reserved for the customer, who never had it, until
    // something else was appended to their stream (a sync that changes nothing appends nothing).
    // Now a claim whose holder's stream has not reached its event is taken for one in flight
    // (refused: a sync may be between its claim and its append) until it is abandoned.
    clock.advance(CLAIM_ABANDONED_AFTER_MS + 1_000);
    const other = await sync(id + 1, addrB);
    expect(other.status).toBe(201);
    // And the customer, who kept A, keeps it: B is the other customer's.
    expect((await sync(id, addrB)).status).toBe(409);
    expect(emailOf(await sync(id, addrA))).toBe(addrA);
  }, 60_000);
});
