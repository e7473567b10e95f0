import { randomUUID } from 'node:crypto';
import { api, createUser, serviceForDescribe } from '../support/harness';

/**
 * decisions §4: device tokens "of an older generation, or of a deleted device, are refused with
 * 401 `Token has been revoked`", and renew is "Refused like a heartbeat (401 revoked/expired, 403
 * other uuid)". The heartbeat route now refuses a revoked token with 401 before it validates the
 * body ("a hub stops on 401 and would only retry a 400"), but only for a body that parsed: a body
 * that is not JSON, or not sent as application/json, is still answered 400 / 415 before the
 * token is looked at, so a revoked hub with such a body is told to fix its request and keeps
 * retrying instead of being told it is revoked.
 */
describe('heartbeat with a revoked device token and a body that does not parse (embedded)', () => {
  const serviceOf = serviceForDescribe('embedded');

  async function heartbeat(uuid: string, token: string, body: string, contentType: string): Promise<{ status: number; body: unknown }> {
    const res = await fetch(`${serviceOf().baseUrl}/api/v1/devices/heartbeat/${uuid}`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${token}`, 'Content-Type': contentType },
      body,
    });
    return { status: res.status, body: JSON.parse(await res.text()) as unknown };
  }

  it('is 401 Token has been revoked, as for a body that parsed but did not validate', async () => {
    const owner = await createUser(serviceOf());
    const uuid = randomUUID();
    expect((await api(serviceOf(), 'POST', '/devices/register', { token: owner.accessToken, body: { uuid, deviceId: 'HUB', name: 'Hub' } })).status).toBe(201);
    const first = (await api(serviceOf(), 'POST', `/devices/auth/${uuid}`, { token: owner.accessToken })).body as { token: string };
    expect((await api(serviceOf(), 'POST', `/devices/auth/${uuid}`, { token: owner.accessToken })).status).toBe(201); // `first` is now an older generation
    const revoked = { statusCode: 401, message: 'Token has been revoked', error: 'Unauthorized' };

    // Held: a body that parsed but does not validate.
    expect(await heartbeat(uuid, first.token, '{"metadata":"x"}', 'application/json')).toEqual({ status: 401, body: revoked });
    // Today 400 `Malformed JSON in request body` and 415 `Content-Type must be application/json`.
    expect(await heartbeat(uuid, first.token, '{"metadata":', 'application/json')).toEqual({ status: 401, body: revoked });
    expect(await heartbeat(uuid, first.token, '{}', 'text/plain')).toEqual({ status: 401, body: revoked });
    // A body over the 64 KiB limit too; renewal likewise.
    expect(await heartbeat(uuid, first.token, JSON.stringify({ metadata: { blob: 'x'.repeat(70 * 1024) } }), 'application/json')).toEqual({ status: 401, body: revoked });
    const renew = await fetch(`${serviceOf().baseUrl}/api/v1/devices/auth/${uuid}/renew`, { method: 'POST', headers: { Authorization: `Bearer ${first.token}`, 'Content-Type': 'application/json' }, body: '{"x":' });
    expect({ status: renew.status, body: JSON.parse(await renew.text()) as unknown }).toEqual({ status: 401, body: revoked });

    // The current token with the same bodies: the body's own answer, as before.
    const current = (await api(serviceOf(), 'POST', `/devices/auth/${uuid}`, { token: owner.accessToken })).body as { token: string };
    expect((await heartbeat(uuid, current.token, '{"metadata":', 'application/json')).status).toBe(400);
    expect(await heartbeat(uuid, current.token, '{}', 'text/plain')).toEqual({ status: 415, body: { statusCode: 415, message: 'Content-Type must be application/json', error: 'Unsupported Media Type' } });
    expect((await heartbeat(uuid, current.token, JSON.stringify({ metadata: { blob: 'x'.repeat(70 * 1024) } }), 'application/json')).status).toBe(413);
  });
});
