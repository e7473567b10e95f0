import type { EventStore, NewEvent } from '../../src/infra/eventstore/port';
import { startTestService, type TestService, syncCustomer } from '../support/harness';

/**
 * Outside review (round three) of POST /auth/sync-customer across two API processes (distributed).
 *
 * interface.md: "email | string (unique)"; "409 when the email already exists with a different
 * sync_id". decisions.md §2: reservation streams exist "so two concurrent syncs cannot create two
 * users with one e-mail"; §3: "A new e-mail on a known `id` changes the user's e-mail unless
 * another user holds it (409)."
 *
 * The steps are made deterministic by holding back, in one process, the answer of an append the
 * event store has already made (a slow round trip): nothing else is changed.
 */

interface Gate {
  readonly wait: Promise<void>;
  readonly open: () => void;
  reached: Promise<void>;
}
function gate(): Gate & { arrive: () => void } {
  let open: () => void = () => undefined;
  let arrive: () => void = () => undefined;
  const wait = new Promise<void>((resolve) => (open = resolve));
  const reached = new Promise<void>((resolve) => (arrive = resolve));
  return { wait, open, reached, arrive };
}

/** The answer of the first append chosen by `pick` is held (after the store made it) until the gate opens. */
function holdAnswer(store: EventStore, pick: (streamName: string, events: readonly NewEvent[]) => boolean, g: ReturnType<typeof gate>): () => void {
  const original = store.append.bind(store);
  const mutable = store as { append: EventStore['append'] };
  let used = false;
  mutable.append = async (streamName, events, expected) => {
    const result = await original(streamName, events, expected);
    if (!used && pick(streamName, events)) {
      used = true;
      g.arrive();
      await g.wait;
    }
    return result;
  };
  return () => {
    mutable.append = original;
  };
}

describe('sync-customer: the check after the append, across two API processes (distributed)', () => {
  let a: TestService;
  let b: TestService;
  beforeAll(async () => {
    a = await startTestService('distributed');
    b = await a.startAnother();
  }, 120_000);
  afterAll(async () => {
    await b?.stop();
    await a?.stop();
  });

  let nextId = 900_000 + Math.floor(Math.random() * 50_000) * 10;
  const sync = (service: TestService, id: number, email: string) => syncCustomer(service, id, email);
  const emailOf = (res: { body: unknown }): string | undefined => (res.body as { user?: { email?: string } }).user?.email;

  it('an address the customer has left is not reserved again for them by a sync whose check reads its own, older, result', async () => {
    const id = (nextId += 10);
    const [x, addrA, addrB] = [`x-${id}@example.com`, `a-${id}@example.com`, `b-${id}@example.com`];
    expect((await sync(a, id, x)).status).toBe(201);

    // Process b moves the customer to B; its append is made, its answer comes back late.
    const g = gate();
    const restore = holdAnswer(b.eventStore, (stream) => stream.startsWith('user-'), g);
    try {
      const toB = sync(b, id, addrB);
      await g.reached;
      // Meanwhile process a moves the customer to A (it releases B, which the customer left).
      const toA = await sync(a, id, addrA);
      expect({ status: toA.status, email: emailOf(toA) }).toEqual({ status: 200, email: addrA });
      g.open();
      expect((await toB).status).toBe(200);
    } finally {
      g.open();
      restore();
    }

    // The customer has A (a sync with A changes nothing and answers A).
    const again = await sync(a, id, addrA);
    expect({ status: again.status, email: emailOf(again) }).toEqual({ status: 200, email: addrA });
    // B is nobody's: another customer may take it. Actual: 409, B stays reserved for a user who no longer has it.
    const other = await sync(a, id + 1, addrB);
    expect(other.status).toBe(201);
  }, 60_000);

  it('never puts one address on two users: the release and the claim again of a sync are not one step', async () => {
    const id = (nextId += 10);
    const [addrA, addrB] = [`a-${id}@example.com`, `b-${id}@example.com`];
    expect((await sync(a, id, addrA)).status).toBe(201);

    // Process b moves the customer from A to B; its user append's answer is held.
    const g1 = gate();
    const restore1 = holdAnswer(b.eventStore, (stream) => stream.startsWith('user-'), g1);
    // Its release of A is made, and its answer held too.
    const g2 = gate();
    const restore2 = holdAnswer(b.eventStore, (_stream, events) => events.some((e) => e.type === 'ReservationReleased'), g2);
    try {
      const toB = sync(b, id, addrB);
      await g1.reached;
      // A CRM edit on process a sets the customer back to A (A is still reserved for them).
      const toA = await sync(a, id, addrA);
      expect({ status: toA.status, email: emailOf(toA) }).toEqual({ status: 200, email: addrA });
      g1.open();
      // b has released A, which the customer has again (held there), or, the release being
      // refused for coming after a later claim, b is done.
      await Promise.race([g2.reached, toB]);
      // Another customer asks for A in that moment.
      const other = await sync(a, id + 1, addrA);
      g2.open();
      await toB;
      const again = await sync(a, id, addrA);
      // Actual: other 201 with A, and the customer still has A: two users with one address.
      expect({ other: other.status, customer: again.status, customerEmail: emailOf(again) }).toEqual({ other: 409, customer: 200, customerEmail: addrA });
    } finally {
      g1.open();
      g2.open();
      restore2();
      restore1();
    }
  }, 60_000);
});
