import { randomUUID } from 'node:crypto';
import { api, createUser, serviceForDescribe } from '../support/harness';

/**
 * interface.md: "Ids are UUID v4 strings", and UUIDs are case-insensitive on input (RFC 4122,
 * section 3). The device part of every `/devices/:id/...` path is accepted in upper case; the
 * user part of `DELETE /devices/:id/users/:userId` (decisions §4: "owner removes a link, or any
 * linked user removes their own ... 200 {success: true}") must name the same user in either
 * case. Today a viewer removing their own link with their id in upper case is told 403 `Only
 * the device owner can remove other users`, and the owner removing a linked user so is told
 * 404 `User is not linked to this device`.
 */
describe('DELETE /devices/:id/users/:userId with the user id in upper case (embedded)', () => {
  const serviceOf = serviceForDescribe('embedded');

  async function sharedDevice(): Promise<{ uuid: string; owner: Awaited<ReturnType<typeof createUser>>; viewer: Awaited<ReturnType<typeof createUser>> }> {
    const owner = await createUser(serviceOf());
    const viewer = await createUser(serviceOf());
    const uuid = randomUUID();
    const reg = await api(serviceOf(), 'POST', '/devices/register', { token: owner.accessToken, body: { uuid, deviceId: 'HUB', name: 'Hub' } });
    expect(reg.status).toBe(201);
    const link = await api(serviceOf(), 'POST', `/devices/${uuid}/link`, { token: owner.accessToken, body: { email: viewer.email, role: 'viewer' } });
    expect(link.status).toBe(201);
    return { uuid, owner, viewer };
  }

  it('a linked user removes their own link naming themselves in upper case', async () => {
    const { uuid, viewer } = await sharedDevice();
    const res = await api(serviceOf(), 'DELETE', `/devices/${uuid}/users/${viewer.id.toUpperCase()}`, { token: viewer.accessToken });
    expect({ status: res.status, body: res.body }).toEqual({ status: 200, body: { success: true } });
    const after = await api(serviceOf(), 'GET', `/devices/${uuid}`, { token: viewer.accessToken });
    expect(after.status).toBe(404);
  });

  it('the owner removes a linked user named in upper case', async () => {
    const { uuid, owner, viewer } = await sharedDevice();
    const res = await api(serviceOf(), 'DELETE', `/devices/${uuid}/users/${viewer.id.toUpperCase()}`, { token: owner.accessToken });
    expect({ status: res.status, body: res.body }).toEqual({ status: 200, body: { success: true } });
    const after = await api(serviceOf(), 'GET', `/devices/${uuid}`, { token: viewer.accessToken });
    expect(after.status).toBe(404);
  });
});
