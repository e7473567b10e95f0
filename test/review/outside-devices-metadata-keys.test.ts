import { randomUUID } from 'node:crypto';
import { api, createUser, serviceForDescribe } from '../support/harness';

/**
 * interface.md: Device `metadata` is "object or null | Free-form device info"; register, PUT and
 * heartbeat take `metadata (object)`. decisions §4 bounds it only by size and depth: "`metadata`
 * at most 8 KiB serialized and 5 levels deep ... Beyond: 400". Keys such as `fw.version` or
 * `$schema` are ordinary JSON, well within those limits, and must be kept as sent. Today they are
 * refused with 400 `metadata keys must not start with $ or contain a dot`, a limit the contract
 * does not have, so a hub that reports `{"fw.version": "1.2.3"}` can neither register nor
 * heartbeat with it.
 */
describe('metadata keys with a dot or a leading $ (embedded)', () => {
  const serviceOf = serviceForDescribe('embedded');

  it('register, PUT and heartbeat keep a key with a dot', async () => {
    const owner = await createUser(serviceOf());
    const uuid = randomUUID();
    const reg = await api(serviceOf(), 'POST', '/devices/register', {
      token: owner.accessToken,
      body: { uuid, deviceId: 'HUB', name: 'Hub', metadata: { 'fw.version': '1.2.3' } },
    });
    expect({ status: reg.status, metadata: (reg.body as { metadata?: unknown }).metadata }).toEqual({ status: 201, metadata: { 'fw.version': '1.2.3' } });

    const put = await api(serviceOf(), 'PUT', `/devices/${uuid}`, { token: owner.accessToken, body: { metadata: { 'os.name': 'linux', build: { 'git.sha': 'abc' } } } });
    expect({ status: put.status, metadata: (put.body as { metadata?: unknown }).metadata }).toEqual({
      status: 200,
      metadata: { 'os.name': 'linux', build: { 'git.sha': 'abc' } },
    });

    const auth = await api(serviceOf(), 'POST', `/devices/auth/${uuid}`, { token: owner.accessToken });
    expect(auth.status).toBe(201);
    const beat = await api(serviceOf(), 'POST', `/devices/heartbeat/${uuid}`, { token: (auth.body as { token: string }).token, body: { metadata: { 'fw.version': '1.2.4' } } });
    expect(beat.status).toBe(200);
    const got = await api(serviceOf(), 'GET', `/devices/${uuid}`, { token: owner.accessToken });
    expect((got.body as { metadata?: unknown }).metadata).toEqual({ 'fw.version': '1.2.4' });
  });

  it('register keeps a key that starts with $', async () => {
    const owner = await createUser(serviceOf());
    const uuid = randomUUID();
    const metadata = { $schema: 'https://example.com/hub-info.json', model: 'HH-2' };
    const reg = await api(serviceOf(), 'POST', '/devices/register', { token: owner.accessToken, body: { uuid, deviceId: 'HUB', name: 'Hub', metadata } });
    expect({ status: reg.status, metadata: (reg.body as { metadata?: unknown }).metadata }).toEqual({ status: 201, metadata });
    const got = await api(serviceOf(), 'GET', `/devices/${uuid}`, { token: owner.accessToken });
    expect((got.body as { metadata?: unknown }).metadata).toEqual(metadata);
  });
});
