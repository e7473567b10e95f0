import { MODES, type Mode } from '../support/harness';
import { serviceForBlock, seams, streamTypes, userIdOf } from './takeover-support';

/**
 * Decisions §11: once `POST /auth/erase-customer` has answered 200, the person is erased for
 * good, "the e-mail and the CRM id are free again (a later sync creates a new user, 201)", and
 * nothing the service keeps holds their personal data in readable form; an unknown CRM id:
 * 404 `User not found`.
 *
 * The races are made deterministic by holding one call of the service's own event store until
 * the other request has got that far (test/review/takeover-support.ts).
 */

describe.each<Mode>(MODES)('erased addresses and CRM ids under review (%s mode)', (mode) => {
  const { service, crm } = serviceForBlock(mode, 3_000_000 + Math.floor(Math.random() * 1_000_000));

  test('a CRM re-sync that found the customer before the erasure and folds their stream after it does not bring the erased user back: the address is free and the customer erasable', async () => {
    const p = await crm().person('Racer');
    const seam = seams(service());
    try {
      // The re-sync has found the customer's (live) user and is about to read its stream.
      const held = seam.holdRead(`user-${p.userId}`);
      const resync = crm().sync(p.syncId, p.email, p.firstName);
      await held.reached;
      // Meanwhile the CRM erases the customer, to the end.
      expect(await crm().erase(p.syncId)).toMatchObject({ status: 200, body: { erased: true, userId: p.userId } });
      held.open();
      const resynced = await resync;

      const newcomer = await crm().sync(crm().nextId(), p.email, 'Newcomer');
      const erasedAgain = await crm().erase(p.syncId);
      expect({
        resyncedUser: userIdOf(resynced) === p.userId ? 'the erased user id' : 'another',
        erasedStreamEndsWith: (await streamTypes(service(), `user-${p.userId}`)).at(-1),
        newcomerWithTheAddress: newcomer.status,
        eraseCustomerAgain: erasedAgain.status,
      }).toEqual({
        resyncedUser: 'another',
        erasedStreamEndsWith: 'UserErased',
        newcomerWithTheAddress: 201,
        eraseCustomerAgain: 200,
      });
    } finally {
      seam.restore();
    }
  });

  test('a CRM re-sync landing after the erasure destroyed the keys and before UserErased leaves nothing of the person readable in their stream', async () => {
    const p = await crm().person('Sealed');
    const seam = seams(service());
    try {
      // The erasure has destroyed the person's data key and is about to append UserErased.
      const held = seam.holdAppend(`user-${p.userId}`, 'UserErased');
      const erasing = crm().erase(p.syncId);
      await held.reached;
      // The CRM's bulk sync sends the same customer record again.
      expect((await crm().sync(p.syncId, p.email, p.firstName)).status).toBeLessThan(500);
      held.open();
      expect(await erasing).toMatchObject({ status: 200, body: { erased: true, userId: p.userId } });

      const readable: string[] = [];
      for await (const recorded of service().eventStore.readStream(`user-${p.userId}`)) {
        const text = JSON.stringify(recorded.data);
        if (text.includes(p.email) || text.includes(p.firstName)) readable.push(recorded.type);
      }
      expect(readable).toEqual([]);
    } finally {
      seam.restore();
    }
  });

  test('erase-customer for a CRM id whose only sync was refused (409, the address taken) answers 404 User not found, not a user id that never existed', async () => {
    const owner = await crm().person('Owner');
    const refusedId = crm().nextId();
    expect((await crm().sync(refusedId, owner.email, 'Refused')).status).toBe(409);
    expect(await crm().erase(refusedId)).toMatchObject({ status: 404, body: { message: 'User not found' } });
  });

  test("erase-customer for an erased customer whose re-sync was refused (409) answers 200 with the erased person's user id", async () => {
    const p = await crm().erasedHolder();
    // A newcomer takes the address over; then the CRM re-syncs the erased customer with it.
    expect((await crm().sync(crm().nextId(), p.email, 'Newcomer')).status).toBe(201);
    expect((await crm().sync(p.syncId, p.email, p.firstName)).status).toBe(409);
    expect(await crm().erase(p.syncId)).toMatchObject({ status: 200, body: { erased: true, userId: p.userId } });
  });
});
