import { api, serviceForDescribe } from '../support/harness';

/**
 * interface.md, Limits: "Response headers on every response: ... and `X-Request-Id` (unique
 * request id)"; decisions §2: every event carries `requestId` (the `X-Request-Id` of the request
 * that caused it), and "Auditors rely on these." Today any client (no proxy is trusted: TRUST_PROXY
 * is unset) chooses the id by sending `X-Request-Id` itself, so two requests answer the same id
 * and a user can stamp the audit trail of their device with whatever id they like.
 */
describe('X-Request-Id is unique per request when no proxy is trusted (embedded)', () => {
  const serviceOf = serviceForDescribe('embedded');

  it('two requests sending the same X-Request-Id get different ids back', async () => {
    const headers = { 'X-Request-Id': 'chosen-by-the-client-0001' };
    const first = await api(serviceOf(), 'GET', '/health', { headers });
    const second = await api(serviceOf(), 'GET', '/health', { headers });
    expect(first.status).toBe(200);
    expect(second.status).toBe(200);
    const ids = [first.headers.get('x-request-id'), second.headers.get('x-request-id')];
    expect(ids[0]).toBeTruthy();
    expect(ids[1]).toBeTruthy();
    expect(ids[0]).not.toBe(ids[1]);
  });
});
