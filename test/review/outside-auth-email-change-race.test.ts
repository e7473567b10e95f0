import { serviceForDescribe, syncCustomer } from '../support/harness';

/**
 * Outside review of POST /auth/sync-customer: a CRM that syncs one customer from two workers
 * at once (a retry racing the original, two edits of one record) must leave the e-mail
 * addresses as sequential syncs would.
 *
 * interface.md: "email | string (unique)"; "409 when the email already exists with a
 * different sync_id". decisions.md §2: "one stream per e-mail address appended with
 * 'no stream' expected, so two concurrent syncs cannot create two users with one e-mail";
 * §3: "A new e-mail on a known `id` changes the user's e-mail unless another user holds it
 * (409)."
 */

interface SyncedUser {
  readonly id: string;
  readonly email: string;
}

describe('sync-customer: concurrent syncs of one customer and e-mail uniqueness (embedded mode)', () => {
  const serviceOf = serviceForDescribe('embedded');

  let nextId = 700_000 + Math.floor(Math.random() * 100_000) * 10;
  const sync = (id: number, email: string, firstName = 'Ada') => syncCustomer(serviceOf(), id, email, firstName);
  const userOf = (res: { body: unknown }): SyncedUser => (res.body as { user: SyncedUser }).user;

  it('an address the customer took and left again in concurrent syncs is free for another customer', async () => {
    const id = (nextId += 10);
    expect((await sync(id, `p0-${id}@example.com`)).status).toBe(201);

    // Two workers change the customer's address at once: one to p1, one to p2. Both answer 200.
    const [one, two] = await Promise.all([sync(id, `p1-${id}@example.com`), sync(id, `p2-${id}@example.com`)]);
    expect([one.status, two.status]).toEqual([200, 200]);

    // Then the customer's address is set back to p0: neither p1 nor p2 belongs to anyone.
    const back = await sync(id, `p0-${id}@example.com`);
    expect(back.status).toBe(200);
    expect(userOf(back).email).toBe(`p0-${id}@example.com`);

    // Another customer may take both addresses.
    const p1 = await sync(id + 1, `p1-${id}@example.com`);
    const p2 = await sync(id + 2, `p2-${id}@example.com`);
    expect({ p1: p1.status, p2: p2.status }).toEqual({ p1: 201, p2: 201 });
  });

  it('a sync keeping the address, racing a sync that changes it, never leaves two users with one e-mail', async () => {
    const duplicates: string[] = [];
    for (let attempt = 0; attempt < 40 && duplicates.length === 0; attempt++) {
      const id = (nextId += 10);
      const e0 = `w0-${id}@example.com`;
      const e1 = `w1-${id}@example.com`;
      expect((await sync(id, e0)).status).toBe(201);

      // Worker A moves the customer to e1; worker B, a moment later, syncs the record with e0 (and a new first name).
      const a = sync(id, e1);
      await new Promise((resolve) => setTimeout(resolve, attempt % 4));
      const b = sync(id, e0, 'Augusta');
      const [resA, resB] = await Promise.all([a, b]);
      expect([resA.status, resB.status]).toEqual([200, 200]);

      // Another customer asks for e0, then the first customer is synced with e0 again.
      const other = await sync(id + 1, e0);
      const again = await sync(id, e0, 'Augusta');
      // At most one of them may hold e0: if the other customer got it (201), the first one must be refused (409).
      if (other.status === 201 && again.status === 200 && userOf(again).email === e0 && userOf(other).email === e0) {
        duplicates.push(`${userOf(other).id} and ${userOf(again).id} both have ${e0} (attempt ${attempt})`);
      }
    }
    expect(duplicates).toEqual([]);
  }, 120_000);
});
