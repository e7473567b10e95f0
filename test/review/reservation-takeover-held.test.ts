import { randomUUID } from 'node:crypto';
import { api, CRM_KEY, MODES, type Mode } from '../support/harness';
import { customers, serviceForBlock, streamTypes, userIdOf } from './takeover-support';

/**
 * Decisions §11, after an erasure that stopped between `UserErased` and the release of the
 * person's e-mail (the release's append fails, as a kill -9 at that instant leaves it). What
 * must hold: the address goes to exactly one newcomer however it is spelled and however many
 * claim it at once (the erased person's own CRM id among them, on another process too); the
 * person stays erased; a live owner, an inactive one too, keeps their address; nothing of the
 * person in the log output; no 5xx for anything a client sends.
 */

describe.each<Mode>(MODES)('an address still held by an erased person (%s mode)', (mode) => {
  const { service, crm } = serviceForBlock(mode, 5_000_000 + Math.floor(Math.random() * 1_000_000));

  test('spelled in other cases and with spaces, claimed by several newcomers at once: exactly one gets it; the person stays erased and erasing them again answers 200', async () => {
    const p = await crm().erasedHolder();
    const variants = [p.email, p.email.toUpperCase(), `  ${p.email.replace('holder', 'HoLdEr')}  `, `\t${p.email}`];
    const answers = await Promise.all(variants.map((email) => crm().sync(crm().nextId(), email, 'Newcomer')));
    expect(answers.map((a) => a.status).sort()).toEqual([201, 409, 409, 409]);
    const winner = answers.find((a) => a.status === 201);
    expect((winner?.body as { user: { email: string } }).user.email).toBe(p.email);
    for (let i = 0; i < 2; i++) expect(await crm().erase(p.syncId)).toMatchObject({ status: 200, body: { erased: true, userId: p.userId } });
    expect(await api(service(), 'DELETE', '/users/me', { token: p.token, body: { password: 'whatever-it-was' } })).toMatchObject({ status: 401, body: { message: 'Token has been revoked' } });
    expect(await api(service(), 'GET', '/users/me', { token: p.token })).toMatchObject({ status: 401, body: { message: 'Token has been revoked' } });
    // The newcomer keeps it: neither the erased person's CRM id nor anyone else takes it from them.
    expect((await crm().sync(p.syncId, p.email, p.firstName)).status).toBe(409);
    expect((await crm().sync(crm().nextId(), p.email.toUpperCase(), 'Latecomer')).status).toBe(409);
    const again = await crm().sync(p.syncId, `other.${p.email}`, p.firstName);
    expect(again.status).toBe(201);
    expect(userIdOf(again)).not.toBe(p.userId);
    expect(await api(service(), 'POST', '/auth/login', { body: { email: p.email, password: 'whatever-it-was' } })).toMatchObject({ status: 401 });
    expect([p.email, p.firstName].filter((s) => service().logs().toLowerCase().includes(s.toLowerCase()))).toEqual([]);
  });

  test("the erased person's own CRM id re-synced at the same time as newcomers claim the address (distributed: on two processes): one user gets it, the erased one stays erased", async () => {
    const p = await crm().erasedHolder();
    const other = mode === 'distributed' ? await service().startAnother() : service();
    try {
      const otherCrm = customers(other, crm().nextId() + 500_000);
      const answers = await Promise.all([
        crm().sync(p.syncId, p.email, p.firstName),
        otherCrm.sync(p.syncId, p.email.toUpperCase(), p.firstName),
        crm().sync(crm().nextId(), p.email, 'Newcomer'),
        otherCrm.sync(crm().nextId(), ` ${p.email}`, 'Newcomer'),
      ]);
      expect(answers.filter((a) => a.status >= 500)).toEqual([]);
      const owners = new Set(answers.filter((a) => a.status === 200 || a.status === 201).map(userIdOf));
      expect(owners.size).toBe(1);
      expect(owners.has(p.userId)).toBe(false);
      expect((await streamTypes(service(), `user-${p.userId}`)).at(-1)).toBe('UserErased');
    } finally {
      if (other !== service()) await other.stop();
    }
  });

  test('an inactive live owner keeps their address; no answer is a 5xx for odd ids and bodies', async () => {
    const syncId = crm().nextId();
    const email = `inactive.${randomUUID().slice(0, 8)}@example.org`;
    expect((await crm().sync(syncId, email, 'Dormant', false)).status).toBe(201);
    expect((await crm().sync(crm().nextId(), email.toUpperCase(), 'Taker')).status).toBe(409);

    const headers = { 'X-Internal-Api-Key': CRM_KEY };
    const odd: Array<[string, unknown]> = [
      ['/auth/erase-customer', { id: Number.MAX_SAFE_INTEGER }],
      ['/auth/erase-customer', { id: 2 ** 60 }],
      ['/auth/erase-customer', { id: '12' }],
      ['/auth/erase-customer', { id: -1 }],
      ['/auth/erase-customer', {}],
      ['/auth/erase-customer', []],
      ['/auth/sync-customer', { id: Number.MAX_SAFE_INTEGER, first_name: 'Big', last_name: 'Id', email: `big.${syncId}@example.org`, active: true }],
      ['/auth/sync-customer', { id: 2 ** 60, first_name: 'Huge', last_name: 'Id', email: `huge.${syncId}@example.org`, active: true }],
      ['/auth/sync-customer', { id: crm().nextId(), first_name: 'Odd', last_name: 'Mail', email: `ODD.İ.${syncId}@EXAMPLE.ORG`, active: true }],
      ['/auth/sync-customer', { id: crm().nextId(), first_name: 'Odd', last_name: 'Mail', email: `odd.${syncId}@xn--exmple-cua.org`, active: true }],
    ];
    const statuses: string[] = [];
    for (const [path, body] of odd) statuses.push(`${path} ${JSON.stringify(body)} -> ${(await api(service(), 'POST', path, { headers, body })).status}`);
    const token = service().tokens.signAccess({ sub: randomUUID(), email: `ghost.${syncId}@example.org`, role: 'user' });
    for (const body of [undefined, {}, { password: 7 }, { password: 'x'.repeat(129) }, { password: 'not-the-one' }]) {
      const res = await api(service(), 'DELETE', '/users/me', { token, ...(body !== undefined ? { body } : {}) });
      statuses.push(`DELETE /users/me ${JSON.stringify(body)} -> ${res.status}`);
    }
    expect(statuses.filter((s) => / -> 5\d\d$/.test(s))).toEqual([]);
  });
});
