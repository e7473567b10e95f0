import { randomUUID } from 'node:crypto';
import { api, createUser, serviceForDescribe } from '../support/harness';

/**
 * decisions §4: "A user may own at most `MAX_DEVICES_PER_USER` (default 100) devices: beyond
 * that 409 `Device limit reached`." Registrations sent at the same time by one user must not
 * take them past the limit: with a limit of 3 and 12 registrations at once, at most 3 are
 * created and every other one is refused with the limit's 409.
 */
describe('device limit under concurrent registrations (embedded)', () => {
  const serviceOf = serviceForDescribe('embedded', { MAX_DEVICES_PER_USER: '3' });

  it('never lets one user own more than MAX_DEVICES_PER_USER devices', async () => {
    const user = await createUser(serviceOf());
    const answers = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        api(serviceOf(), 'POST', '/devices/register', {
          token: user.accessToken,
          body: { uuid: randomUUID(), deviceId: `HUB-${i}`, name: `Hub ${i}` },
        }),
      ),
    );
    const created = answers.filter((a) => a.status === 201);
    const refused = answers.filter((a) => a.status !== 201);
    for (const answer of refused) {
      expect(answer.status).toBe(409);
      expect(answer.body).toEqual({ statusCode: 409, message: 'Device limit reached', error: 'Conflict' });
    }
    const list = await api(serviceOf(), 'GET', '/devices?role=owner&limit=100', { token: user.accessToken });
    expect(list.status).toBe(200);
    const owned = (list.body as { meta: { total: number } }).meta.total;
    expect({ created: created.length, owned }).toEqual({ created: 3, owned: 3 });
  });
});
