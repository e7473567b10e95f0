import type { EventStore } from '../../src/infra/eventstore/port';
import { startTestService, type TestService, syncCustomer } from '../support/harness';

/** Holds some of a process's appends back for a while (a slow round trip to the event store), chosen by `delayOf`. */
function slowAppends(store: EventStore, delayOf: (streamName: string, types: readonly string[]) => number): () => void {
  const original = store.append.bind(store);
  const mutable = store as { append: EventStore['append'] };
  mutable.append = async (streamName, events, expected) => {
    const ms = delayOf(streamName, events.map((event) => event.type));
    if (ms > 0) await new Promise((resolve) => setTimeout(resolve, ms));
    return original(streamName, events, expected);
  };
  return () => {
    mutable.append = original;
  };
}

/**
 * Outside review of POST /auth/sync-customer across two API processes (distributed mode): a
 * CRM whose two workers, each behind a different API process, sync one customer at once.
 *
 * interface.md: "email | string (unique)"; "409 when the email already exists with a
 * different sync_id". decisions.md §2: "one stream per e-mail address appended with
 * 'no stream' expected, so two concurrent syncs cannot create two users with one e-mail";
 * §3: "A new e-mail on a known `id` changes the user's e-mail unless another user holds it
 * (409)."
 *
 * Whatever the two concurrent syncs did, once customer X has been synced again with e0 and
 * answered 200 with e0, X holds e0: another customer asking for e0 must get 409, never 201.
 */
describe('sync-customer: one customer synced from two API processes at once (distributed mode)', () => {
  let a: TestService;
  let b: TestService;

  beforeAll(async () => {
    a = await startTestService('distributed');
    b = await a.startAnother();
  }, 90_000);
  afterAll(async () => {
    await b?.stop();
    await a?.stop();
  });

  let nextId = 800_000 + Math.floor(Math.random() * 100_000) * 10;
  const sync = (service: TestService, id: number, email: string, firstName = 'Ada') => syncCustomer(service, id, email, firstName);
  const emailOf = (res: { body: unknown }): string | undefined => (res.body as { user?: { email?: string } }).user?.email;

  it('an address the customer holds after two slow concurrent syncs on two processes stays reserved', async () => {
    const id = (nextId += 10);
    const e0 = `s0-${id}@example.com`;
    const e1 = `s1-${id}@example.com`;
    expect((await sync(a, id, e0)).status).toBe(201);

    // Round trips to the event store that take a few hundred milliseconds, as under load:
    // process a writes the user a little late and its release of the old address later still;
    // process b's writes of the user take 150 ms, then 500 ms.
    let bUserAppends = 0;
    const restoreA = slowAppends(a.eventStore, (stream, types) => (types.includes('ReservationReleased') ? 300 : stream.startsWith('user-') ? 50 : 0));
    const restoreB = slowAppends(b.eventStore, (stream) => (stream.startsWith('user-') ? (++bUserAppends === 1 ? 150 : 500) : 0));
    try {
      // Worker 1 (process a) moves the customer to e1; worker 2 (process b) syncs the record with e0 and a new first name.
      const one = sync(a, id, e1);
      await new Promise((resolve) => setTimeout(resolve, 5));
      const two = sync(b, id, e0, 'Augusta');
      const [resOne, resTwo] = await Promise.all([one, two]);
      expect([resOne.status, resTwo.status]).toEqual([200, 200]);
    } finally {
      restoreA();
      restoreB();
    }

    // The customer is synced with e0 again: it holds e0 (200, e0).
    const again = await sync(a, id, e0, 'Augusta');
    expect(again.status).toBe(200);
    expect(emailOf(again)).toBe(e0);

    // Another customer may not take e0 (it would be a second user with that address); e1 is nobody's.
    const otherE0 = await sync(b, id + 1, e0);
    const otherE1 = await sync(b, id + 2, e1);
    expect({ e0: otherE0.status, e1: otherE1.status }).toEqual({ e0: 409, e1: 201 });
  }, 60_000);
});
