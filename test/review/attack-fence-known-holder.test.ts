import { CLAIM_ABANDONED_AFTER_MS } from '../../src/commands/users';
import type { EventStore } from '../../src/infra/eventstore/port';
import { allEvents } from '../support/accounts';
import { api, CRM_KEY, serviceForDescribe, shiftedClock, syncCustomer, type TestService } from '../support/harness';
import { failNextUserAppend, holdNextUserAppend } from '../support/user-appends';

/**
 * Outside attack on the fence of an abandoned e-mail claim (README "One address, one user"),
 * embedded mode, holders that are known customers: letter case and spacing, two takeovers at
 * once, a late sync retried by the CRM, the store failing at the fence, deactivation, and a
 * fresh in-flight sync of the fenced customer.
 *
 * Contract: interface.md sync-customer ("email | string (unique)", 409 `{success:false, error,
 * code:'CONFLICT'}` when held by another sync_id); README: a claim whose holder's stream has not
 * reached its event is, for 10 minutes, "taken for one in flight, and refused"; the fence does
 * not change the user; one address is never held by two users.
 */
type Res = { status: number; body: unknown };
const userOf = (res: Res) => (res.body as { user?: { id?: string; email?: string; isActive?: boolean; firstName?: string } }).user ?? {};

function expectConflict(res: Res): void {
  expect({ status: res.status, body: res.body }).toEqual({
    status: 409,
    body: { success: false, error: expect.any(String) as unknown, code: 'CONFLICT' },
  });
}

const syncWith = (s: TestService, id: number, email: string, extra: Record<string, unknown> = {}) =>
  api(s, 'POST', '/auth/sync-customer', {
    headers: { 'X-Internal-Api-Key': CRM_KEY },
    body: { id, first_name: 'Ada', last_name: 'Lovelace', email, active: true, ...extra },
  });

describe('attack: fence of a known customer (embedded)', () => {
  const clock = shiftedClock();
  const running = serviceForDescribe('embedded', {}, { clock });
  const sync = (id: number, email: string) => syncCustomer(running(), id, email);
  let next = 400_000 + Math.floor(Math.random() * 50_000) * 100;
  const ids = (n: number): number[] => Array.from({ length: n }, () => next++);

  /** Customer `id` at `from`, then a move to `to` whose append fails after its claim; the claim then ages past 10 minutes. */
  async function abandonedMove(id: number, from: string, to: string): Promise<string> {
    const first = await sync(id, from);
    expect(first.status).toBe(201);
    const restore = failNextUserAppend(running().eventStore);
    try {
      expect((await sync(id, to)).status).toBeGreaterThanOrEqual(500);
    } finally {
      restore();
    }
    clock.advance(CLAIM_ABANDONED_AFTER_MS + 60_000);
    return userOf(first).id ?? '';
  }

  it('letter case and spacing: the late customer, asking with another spelling, is refused; so is a third customer', async () => {
    const [x, y, z] = ids(3);
    const [a, b] = [`a-${x}@example.com`, `Move.${x}@Example.com`];
    await abandonedMove(x, a, b);
    const taken = await sync(y, b.toLowerCase());
    expect(taken.status).toBe(201);
    expectConflict(await sync(x, b.toUpperCase()));
    expectConflict(await sync(x, b));
    expectConflict(await sync(z, `MOVE.${x}@EXAMPLE.COM`));
    const spaced = await sync(z, `  move.${x}@example.com `);
    // Either refused as invalid (400) or as held (409): never given to a second user.
    expect([400, 409]).toContain(spaced.status);
  }, 60_000);

  it('a customer who only changes the case of their address keeps it: another customer is refused', async () => {
    const [x, z] = ids(2);
    const lower = `case-${x}@example.com`;
    expect((await sync(x, lower)).status).toBe(201);
    const recased = await sync(x, `Case-${x}@Example.com`);
    expect(recased.status).toBe(200);
    expectConflict(await sync(z, lower));
  }, 60_000);

  it('two takeovers of one abandoned claim at once: exactly one gets the address', async () => {
    const [x, y, z, w] = ids(4);
    const [a, b] = [`a-${x}@example.com`, `b-${x}@example.com`];
    await abandonedMove(x, a, b);
    const results = await Promise.all([sync(y, b), sync(z, b), sync(w, b)]);
    const statuses = results.map((r) => r.status).sort();
    expect(statuses).toEqual([201, 409, 409]);
    for (const r of results.filter((r) => r.status === 409)) expectConflict(r);
    // x is fenced once, not three times.
    const fences = (await allEvents(running())).filter((e) => e.type === 'EmailClaimWithdrawn' && (e.data as { userId?: string }).userId !== undefined && e.streamName.endsWith((e.data as { userId: string }).userId));
    const winner = userOf(results.find((r) => r.status === 201)!).id;
    expect(fences.filter((f) => (f.data as { takenBy: string }).takenBy === winner)).toHaveLength(1);
    expectConflict(await sync(x, b));
    // Each of the losers, sent again by the CRM: still 409.
    for (const id of [y, z, w]) {
      const again = await sync(id, b);
      if (userOf(again).id !== winner) expectConflict(again);
    }
  }, 60_000);

  it('a late sync (its append in flight for 10+ minutes) fails after the fence: 409, retried by the CRM 409 again, the user unchanged', async () => {
    const [x, y, z] = ids(3);
    const [a, b] = [`a-${x}@example.com`, `b-${x}@example.com`];
    const created = await sync(x, a);
    const userId = userOf(created).id ?? '';
    const held = holdNextUserAppend(running().eventStore);
    try {
      const late = syncWith(running(), x, b, { first_name: 'Late' });
      await held.atAppend;
      clock.advance(CLAIM_ABANDONED_AFTER_MS + 60_000);
      expect((await sync(y, b)).status).toBe(201);
      held.release();
      expectConflict(await late);
    } finally {
      held.restore();
    }
    expectConflict(await syncWith(running(), x, b, { first_name: 'Late' }));
    expectConflict(await sync(z, b));
    const me = await api(running(), 'GET', '/users/me', { token: running().tokens.signAccess({ sub: userId, email: a, role: 'user' }) });
    expect({ status: me.status, email: (me.body as { email?: string }).email, firstName: (me.body as { firstName?: string }).firstName }).toEqual({
      status: 200,
      email: a,
      firstName: 'Ada',
    });
    // The customer keeps a: another customer asking for it is refused.
    expectConflict(await sync(z, a));
  }, 60_000);

  it('the store fails at the fence append: 5xx to the taker, nobody holds b twice, the taker retried gets it, the holder then 409', async () => {
    const [x, y, z] = ids(3);
    const [a, b] = [`a-${x}@example.com`, `b-${x}@example.com`];
    await abandonedMove(x, a, b);
    const store = running().eventStore as { append: EventStore['append'] };
    const original = store.append.bind(running().eventStore);
    store.append = async (streamName, events, expected) => {
      if (events.some((e) => e.type === 'EmailClaimWithdrawn')) throw new Error('event store unavailable');
      return original(streamName, events, expected);
    };
    let failed: Res;
    try {
      failed = await sync(y, b);
    } finally {
      store.append = original;
    }
    expect(failed.status).toBeGreaterThanOrEqual(500);
    expect(failed.status).toBeLessThan(600);
    const again = await sync(y, b);
    expect(again.status).toBe(201);
    expectConflict(await sync(x, b));
    expectConflict(await sync(z, b));
  }, 60_000);

  it('the process stops right after the fence (the takeover claim never written): the address goes to one customer only', async () => {
    const [x, y, z] = ids(3);
    const [a, b] = [`a-${x}@example.com`, `b-${x}@example.com`];
    await abandonedMove(x, a, b);
    const store = running().eventStore as { append: EventStore['append'] };
    const original = store.append.bind(running().eventStore);
    let fenced = false;
    store.append = async (streamName, events, expected) => {
      if (fenced && streamName.startsWith('reservation-email-')) throw new Error('process stopped here');
      const result = await original(streamName, events, expected);
      if (events.some((e) => e.type === 'EmailClaimWithdrawn')) fenced = true;
      return result;
    };
    let failed: Res;
    try {
      failed = await sync(y, b);
    } finally {
      store.append = original;
    }
    expect(failed.status).toBeGreaterThanOrEqual(500);
    // The CRM sends both again, in either order; one of them holds b, the other is refused, and a third customer too.
    const xAgain = await sync(x, b);
    const yAgain = await sync(y, b);
    const holders = [xAgain, yAgain].filter((r) => r.status < 300 && userOf(r).email === b);
    expect(holders).toHaveLength(1);
    for (const r of [xAgain, yAgain].filter((r) => r.status >= 300)) expectConflict(r);
    expectConflict(await sync(z, b));
  }, 60_000);

  it('the fenced customer is deactivated by the CRM (active: false, their own address): 200, inactive; with the taken address: 409', async () => {
    const [x, y] = ids(2);
    const [a, b] = [`a-${x}@example.com`, `b-${x}@example.com`];
    await abandonedMove(x, a, b);
    expect((await sync(y, b)).status).toBe(201);
    expectConflict(await syncWith(running(), x, b, { active: false }));
    const off = await syncWith(running(), x, a, { active: false });
    expect({ status: off.status, active: userOf(off).isActive, email: userOf(off).email }).toEqual({ status: 200, active: false, email: a });
    const on = await syncWith(running(), x, a, { active: true });
    expect({ status: on.status, active: userOf(on).isActive }).toEqual({ status: 200, active: true });
  }, 60_000);

  it('a fresh sync of the fenced customer, in flight while the fence lands, is not robbed of its new address by a later customer', async () => {
    const [x, y, z] = ids(3);
    const [a, b, c] = [`a-${x}@example.com`, `b-${x}@example.com`, `c-${x}@example.com`];
    await abandonedMove(x, a, b); // x's move to b failed 11 minutes ago; its claim of b is abandoned
    // The CRM now moves x to c: the claim of c is fresh, its append to x's stream in flight.
    const held = holdNextUserAppend(running().eventStore);
    try {
      const move = sync(x, c);
      await held.atAppend;
      // Meanwhile y takes the abandoned b (fencing x's stream) ...
      expect((await sync(y, b)).status).toBe(201);
      // ... and z, one second later, asks for c, which x's sync claimed a second ago: in flight, refused.
      const other = await sync(z, c);
      held.release();
      const moved = await move;
      expect({ z: other.status, x: moved.status, xEmail: userOf(moved).email }).toEqual({ z: 409, x: 200, xEmail: c });
    } finally {
      held.restore();
    }
  }, 60_000);

  it('the same for a brand-new customer: its first sync failed, its second (fresh, in flight) is not robbed by a later customer', async () => {
    const [x, y, z] = ids(3);
    const [b, c] = [`b-${x}@example.com`, `c-${x}@example.com`];
    const restore = failNextUserAppend(running().eventStore);
    try {
      expect((await sync(x, b)).status).toBeGreaterThanOrEqual(500);
    } finally {
      restore();
    }
    clock.advance(CLAIM_ABANDONED_AFTER_MS + 60_000);
    const held = holdNextUserAppend(running().eventStore);
    try {
      const create = sync(x, c);
      await held.atAppend;
      expect((await sync(y, b)).status).toBe(201);
      const other = await sync(z, c);
      held.release();
      const created = await create;
      expect({ z: other.status, x: created.status, xEmail: userOf(created).email }).toEqual({ z: 409, x: 201, xEmail: c });
    } finally {
      held.restore();
    }
  }, 60_000);
});
