import { CLAIM_ABANDONED_AFTER_MS } from '../../src/commands/users';
import { allEvents } from '../support/accounts';
import { serviceForDescribe, shiftedClock, syncCustomer } from '../support/harness';
import { holdNextUserAppend } from '../support/user-appends';

/**
 * A claim judged abandoned by its age belongs to a sync that may only be late (a paused
 * process, a clock stepped forward, two processes whose clocks disagree). The takeover fences
 * the holder's stream first (`EmailClaimWithdrawn`), so the late sync's append fails its
 * expected revision, decides again, and finds the address taken: one address, one user
 * (interface.md: "email | string (unique)"), whatever the clocks say.
 */
describe('sync-customer: a late sync after its claim was taken over (embedded)', () => {
  const clock = shiftedClock();
  const running = serviceForDescribe('embedded', {}, { clock });

  const sync = (id: number, email: string) => syncCustomer(running(), id, email);
  const emailOf = (res: { body: unknown }): string | undefined => (res.body as { user?: { email?: string } }).user?.email;
  const userIdOf = (res: { body: unknown }): string | undefined => (res.body as { user?: { id?: string } }).user?.id;

  it('the late sync gets 409 and keeps its address; the customer who took the claim over has it, alone', async () => {
    const id = 760_000 + Math.floor(Math.random() * 50_000) * 4;
    const [addrA, addrB] = [`a-${id}@example.com`, `b-${id}@example.com`];
    const first = await sync(id, addrA);
    expect(first.status).toBe(201);
    const lateUser = userIdOf(first);

    // The customer's move to B: its claim is made, its append to the user's stream waits, far
    // longer than any sync takes (or the clock jumps): the claim looks abandoned.
    const held = holdNextUserAppend(running().eventStore);
    try {
      const move = sync(id, addrB);
      await held.atAppend;
      clock.advance(CLAIM_ABANDONED_AFTER_MS + 1_000);
      const other = await sync(id + 1, addrB);
      expect({ status: other.status, email: emailOf(other) }).toEqual({ status: 201, email: addrB });

      // The late append goes on: it was decided before the fence, so it fails and decides again.
      held.release();
      const moved = await move;
      expect(moved.status).toBe(409);
      expect(moved.body).toMatchObject({ success: false, code: 'CONFLICT', error: 'Email already exists with a different sync_id' });
    } finally {
      held.restore();
    }

    // Still one address, one user: the late customer kept A, B is the other customer's.
    expect(emailOf(await sync(id, addrA))).toBe(addrA);
    expect((await sync(id, addrB)).status).toBe(409);
    expect((await sync(id + 2, addrB)).status).toBe(409);

    // The fence is in the late user's stream, with ids only, by the sync that took over.
    const fences = (await allEvents(running())).filter((e) => e.type === 'EmailClaimWithdrawn' && e.streamName === `user-${lateUser}`);
    expect(fences).toHaveLength(1);
    expect(Object.keys(fences[0]?.data as object).sort()).toEqual(['takenBy', 'userId', 'withdrawnAt']);
    expect(JSON.stringify(fences[0]?.data)).not.toContain('@');
  }, 60_000);

  it('a holder whose stream moved since it was judged is not fenced, and keeps the claim', async () => {
    const id = 710_000 + Math.floor(Math.random() * 50_000) * 4;
    const [addrA, addrB] = [`a-${id}@example.com`, `b-${id}@example.com`];
    expect((await sync(id, addrA)).status).toBe(201);
    const fencesBefore = (await allEvents(running())).filter((e) => e.type === 'EmailClaimWithdrawn').length;
    const held = holdNextUserAppend(running().eventStore);
    try {
      const move = sync(id, addrB);
      await held.atAppend;
      // The late sync lands first: the address is the holder's, the other customer is refused.
      held.release();
      expect(emailOf(await move)).toBe(addrB);
      clock.advance(CLAIM_ABANDONED_AFTER_MS + 1_000);
      expect((await sync(id + 1, addrB)).status).toBe(409);
    } finally {
      held.restore();
    }
    expect((await allEvents(running())).filter((e) => e.type === 'EmailClaimWithdrawn')).toHaveLength(fencesBefore);
  }, 60_000);
});

// Across two processes (the late sync on one, the takeover on the other): test/review/attack-fence-distributed.test.ts.
