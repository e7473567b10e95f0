import { CLAIM_ABANDONED_AFTER_MS } from '../../src/commands/users';
import { api, CRM_KEY, serviceForDescribe, shiftedClock, syncCustomer, type TestService } from '../support/harness';
import { failNextUserAppend, holdNextUserAppend } from '../support/user-appends';

/**
 * Outside attack (round 3) on "One address, one user" (README): a claim is left behind (taken at
 * once) only when the holder's stream has the sync's OWN `UserSynced` at the revision the claim
 * was made for; any other event there means the claim is judged by its time (in flight for 10
 * minutes, refused to others, then taken after a fence).
 *
 * Here another sync of the same customer (to another address) writes the `UserSynced` at that
 * revision: it is not the claim's own event, so the claim must stand for 10 minutes.
 * Contract: interface.md sync-customer, 409 `{success:false, error, code:'CONFLICT'}`.
 */
type Res = { status: number; body: unknown };
const userOf = (res: Res) => (res.body as { user?: { id?: string; email?: string; isActive?: boolean } }).user ?? {};
function expectConflict(res: Res): void {
  expect({ status: res.status, body: res.body }).toEqual({ status: 409, body: { success: false, error: expect.any(String) as unknown, code: 'CONFLICT' } });
}

describe('attack3: the UserSynced at the claim revision is another sync\'s (embedded)', () => {
  const clock = shiftedClock();
  const running = serviceForDescribe('embedded', {}, { clock });
  let next = 600_000 + Math.floor(Math.random() * 40_000) * 100;
  const ids = (n: number): number[] => Array.from({ length: n }, () => next++);
  const syncWith = (s: TestService, id: number, email: string, extra: Record<string, unknown> = {}) =>
    api(s, 'POST', '/auth/sync-customer', {
      headers: { 'X-Internal-Api-Key': CRM_KEY },
      body: { id, first_name: 'Ada', last_name: 'Lovelace', email, active: true, ...extra },
    });

  it('a failed move to b, then a successful move to c: b is refused to another customer within 10 minutes, taken after', async () => {
    const [x, w] = ids(2);
    const [a, b, c] = [`a-${x}@example.com`, `b-${x}@example.com`, `c-${x}@example.com`];
    expect((await syncCustomer(running(), x, a)).status).toBe(201);
    const restore = failNextUserAppend(running().eventStore);
    try {
      expect((await syncCustomer(running(), x, b)).status).toBeGreaterThanOrEqual(500); // claim of b for revision 1, never appended
    } finally {
      restore();
    }
    const moved = await syncCustomer(running(), x, c); // UserSynced(c) lands at revision 1
    expect({ status: moved.status, email: userOf(moved).email }).toEqual({ status: 200, email: c });
    clock.advance(60_000);
    // The event at the claim's revision is not the b sync's own: judged by time, in flight.
    expectConflict(await syncCustomer(running(), w, b));
    clock.advance(CLAIM_ABANDONED_AFTER_MS);
    const took = await syncCustomer(running(), w, b);
    expect({ status: took.status, email: userOf(took).email }).toEqual({ status: 201, email: b });
    expectConflict(await syncCustomer(running(), x, b));
  }, 60_000);

  it('a move to b that deactivates fails; a deactivation-only sync lands at its revision: b stays in flight, then is taken after a fence', async () => {
    const [x, w] = ids(2);
    const [a, b] = [`a-${x}@example.com`, `b-${x}@example.com`];
    expect((await syncCustomer(running(), x, a)).status).toBe(201);
    const restore = failNextUserAppend(running().eventStore);
    try {
      expect((await syncWith(running(), x, b, { active: false })).status).toBeGreaterThanOrEqual(500);
    } finally {
      restore();
    }
    const off = await syncWith(running(), x, a, { active: false }); // UserDeactivated at the claim's revision
    expect({ status: off.status, email: userOf(off).email, active: userOf(off).isActive }).toEqual({ status: 200, email: a, active: false });
    expectConflict(await syncCustomer(running(), w, b));
    clock.advance(CLAIM_ABANDONED_AFTER_MS + 60_000);
    expect((await syncCustomer(running(), w, b)).status).toBe(201);
    expectConflict(await syncWith(running(), x, b, { active: true }));
    const still = await syncWith(running(), x, a, { active: true });
    expect({ status: still.status, email: userOf(still).email, active: userOf(still).isActive }).toEqual({ status: 200, email: a, active: true });
  }, 60_000);

  it('a move to b that also deactivates lands: its old address is released (or taken at once), b is its own', async () => {
    const [x, w, v] = ids(3);
    const [a, b] = [`a-${x}@example.com`, `b-${x}@example.com`];
    expect((await syncCustomer(running(), x, a)).status).toBe(201);
    const held = holdNextUserAppend(running().eventStore);
    let moving: Promise<Res>;
    try {
      moving = syncWith(running(), x, b, { active: false });
      await held.atAppend;
      expectConflict(await syncCustomer(running(), w, b)); // in flight
      expectConflict(await syncCustomer(running(), w, a)); // x still has a
      held.release();
      const moved = await moving;
      expect({ status: moved.status, email: userOf(moved).email, active: userOf(moved).isActive }).toEqual({ status: 200, email: b, active: false });
    } finally {
      held.restore();
    }
    expect((await syncCustomer(running(), w, a)).status).toBe(201);
    expectConflict(await syncCustomer(running(), v, b));
    clock.advance(CLAIM_ABANDONED_AFTER_MS + 60_000);
    expectConflict(await syncCustomer(running(), v, b)); // deactivated, but b is x's
  }, 60_000);

  it('letter case: variants of a held address are refused; an in-flight move to an upper-case variant is refused to a lower-case asker', async () => {
    const [x, y, w, v] = ids(4);
    const a = `Case-${x}@Example.com`;
    const first = await syncCustomer(running(), x, a);
    expect({ status: first.status, email: userOf(first).email }).toEqual({ status: 201, email: a.toLowerCase() });
    expectConflict(await syncCustomer(running(), w, a.toLowerCase()));
    expectConflict(await syncCustomer(running(), w, ` ${a.toUpperCase()} `));
    expect((await syncCustomer(running(), y, `y-${y}@example.com`)).status).toBe(201);
    const b = `Move-${x}@EXAMPLE.com`;
    const held = holdNextUserAppend(running().eventStore);
    try {
      const moving = syncCustomer(running(), y, b);
      await held.atAppend;
      expectConflict(await syncCustomer(running(), w, b.toLowerCase()));
      held.release();
      expect(userOf(await moving).email).toBe(b.toLowerCase());
    } finally {
      held.restore();
    }
    expectConflict(await syncCustomer(running(), v, b.toUpperCase()));
    expect((await syncCustomer(running(), x, `elsewhere-${x}@example.com`)).status).toBe(200);
    expect((await syncCustomer(running(), v, a.toUpperCase())).status).toBe(201);
    expectConflict(await syncCustomer(running(), x, a));
  }, 60_000);
});
