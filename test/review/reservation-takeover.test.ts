import { MongoClient } from 'mongodb';
import { CREDENTIALS_COLLECTION } from '../../src/infra/credentials/mongo';
import { USERS_COLLECTION, type UserDoc } from '../../src/projections/users';
import { api, MODES, type Mode } from '../support/harness';
import { customers, serviceForBlock, seams, streamTypes, userIdOf } from './takeover-support';

/**
 * Decisions §11: once `POST /auth/erase-customer` has answered 200, the person is erased for
 * good, "the e-mail and the CRM id are free again (a later sync creates a new user, 201)", and
 * nothing the service keeps holds their personal data in readable form; an unknown CRM id:
 * 404 `User not found`.
 *
 * The races are made deterministic by holding one call of the service's own event store until
 * the other request has got that far (test/review/takeover-support.ts).
 */

describe.each<Mode>(MODES)('a CRM re-sync racing the erasure of the same customer, and erase-customer after a refused sync (%s mode)', (mode) => {
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

  test('a CRM re-sync that found the customer before the erasure and folds their stream between UserErased and the release of the address leaves no two live users with one address', async () => {
    const p = await crm().person('Twin');
    const seam = seams(service());
    try {
      const resyncHeld = seam.holdRead(`user-${p.userId}`);
      const resync = crm().sync(p.syncId, p.email, `${p.firstName}x`);
      await resyncHeld.reached;
      // The erasure has appended UserErased and is about to release the address.
      const releaseHeld = seam.holdAppend('reservation-email-', 'ReservationReleased');
      const erasing = crm().erase(p.syncId);
      await releaseHeld.reached;
      resyncHeld.open();
      const resynced = await resync;
      releaseHeld.open();
      expect(await erasing).toMatchObject({ status: 200, body: { erased: true, userId: p.userId } });
      const newcomer = await crm().sync(crm().nextId(), p.email, 'Newcomer');

      const holders = await service().readStore.collection<UserDoc>(USERS_COLLECTION).find({ where: { email: p.email } });
      expect(resynced.status).toBeLessThan(500);
      expect({
        newcomer: newcomer.status,
        erasedStreamEndsWith: (await streamTypes(service(), `user-${p.userId}`)).at(-1),
        liveUsersWithTheAddress: holders.length,
      }).toEqual({ newcomer: 201, erasedStreamEndsWith: 'UserErased', liveUsersWithTheAddress: 1 });
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

/**
 * A kept but damaged data key answers 503 for that person's reads only; everyone else's
 * requests answer (README "Personal data", test/api/key-encryption-key.test.ts). The check
 * "is the owner erased?" reads only the type of the owner's last event, never opening it, so it
 * does not depend on their key.
 */
describe('a newcomer claiming the address of a live owner whose data key is damaged (distributed mode)', () => {
  const { service, crm } = serviceForBlock('distributed', 4_000_000 + Math.floor(Math.random() * 1_000_000));

  test('is refused with 409 (the address is taken), not a 503 about somebody else', async () => {
    const owner = await crm().person('Damaged');
    const client = await MongoClient.connect(service().env.MONGODB_URI ?? '');
    try {
      const keys = client.db().collection<{ _id: string; wrapped: string }>(CREDENTIALS_COLLECTION);
      const kept = await keys.findOne({ _id: `key:user:${owner.userId}` });
      const wrapped = kept?.wrapped ?? '';
      await keys.updateOne({ _id: `key:user:${owner.userId}` }, { $set: { wrapped: `${wrapped.slice(0, 20)}${wrapped[20] === 'A' ? 'B' : 'A'}${wrapped.slice(21)}` } });
    } finally {
      await client.close();
    }
    // Another API process: it has not cached the owner's key.
    const fresh = await service().startAnother();
    try {
      expect((await api(fresh, 'GET', '/users/me/export', { token: owner.token })).status).toBe(503);
      const newcomer = await customers(fresh, crm().nextId() + 700_000).sync(crm().nextId(), owner.email, 'Newcomer');
      expect(newcomer).toMatchObject({ status: 409, body: { success: false, code: 'CONFLICT' } });
    } finally {
      await fresh.stop();
    }
  });
});
