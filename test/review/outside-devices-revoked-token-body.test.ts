import { randomUUID } from 'node:crypto';
import { api, createUser, serviceForDescribe } from '../support/harness';

/**
 * decisions §4: "Each issue increments the device's token generation `gen`; tokens of an older
 * generation, or of a deleted device, are refused with 401 `Token has been revoked`." The
 * refusal must not depend on the body the hub sends: a revoked hub whose heartbeat body does
 * not validate (say an `ipAddress` that is not a string, or metadata nested too deep) is still
 * told 401 `Token has been revoked`, not a 400 that a hub client would retry. (A heartbeat
 * with no token at all and the same body is a 401 already: only the revocation comes too late.)
 */
describe('revoked device token with a body that does not validate (embedded)', () => {
  const serviceOf = serviceForDescribe('embedded');

  const revoked = { statusCode: 401, message: 'Token has been revoked', error: 'Unauthorized' };
  const badBodies: unknown[] = [{ ipAddress: 5 }, { metadata: { a: { b: { c: { d: { e: { f: 1 } } } } } } }, { metadata: [1] }];

  async function deviceWithToken(): Promise<{ uuid: string; owner: Awaited<ReturnType<typeof createUser>>; token: string }> {
    const owner = await createUser(serviceOf());
    const uuid = randomUUID();
    const reg = await api(serviceOf(), 'POST', '/devices/register', { token: owner.accessToken, body: { uuid, deviceId: 'HUB', name: 'Hub' } });
    expect(reg.status).toBe(201);
    const auth = await api(serviceOf(), 'POST', `/devices/auth/${uuid}`, { token: owner.accessToken });
    expect(auth.status).toBe(201);
    return { uuid, owner, token: (auth.body as { token: string }).token };
  }

  it('a token of an older generation: 401 Token has been revoked whatever the body', async () => {
    const { uuid, owner, token } = await deviceWithToken();
    const newer = await api(serviceOf(), 'POST', `/devices/auth/${uuid}`, { token: owner.accessToken });
    expect(newer.status).toBe(201);
    const plain = await api(serviceOf(), 'POST', `/devices/heartbeat/${uuid}`, { token, body: {} });
    expect({ status: plain.status, body: plain.body }).toEqual({ status: 401, body: revoked });
    for (const body of badBodies) {
      const res = await api(serviceOf(), 'POST', `/devices/heartbeat/${uuid}`, { token, body });
      expect({ body, status: res.status, answer: res.body }).toEqual({ body, status: 401, answer: revoked });
    }
  });

  it('a token of a deleted device: 401 Token has been revoked whatever the body', async () => {
    const { uuid, owner, token } = await deviceWithToken();
    const del = await api(serviceOf(), 'DELETE', `/devices/${uuid}`, { token: owner.accessToken });
    expect(del.status).toBe(200);
    for (const body of badBodies) {
      const res = await api(serviceOf(), 'POST', `/devices/heartbeat/${uuid}`, { token, body });
      expect({ body, status: res.status, answer: res.body }).toEqual({ body, status: 401, answer: revoked });
    }
  });
});
