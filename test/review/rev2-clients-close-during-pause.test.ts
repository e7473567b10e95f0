import { randomUUID } from 'node:crypto';
import { AppClient, memorySessionStore } from '@home-hub-cloud/app-client';
import { TIERS } from '../../src/ratelimit/limiter';
import { api, createUser, startTestService, type TestService } from '../support/harness';

/**
 * `close()` while a `subscribe()` or a `send()` waits out a `RATE_LIMITED` pause. A call waiting
 * for a connection is rejected at once by `close()` ("Resolves at the next connection (rejects
 * when the tunnel is closed first)"), and `close()` cancels the client's own timers (reconnect,
 * the deferred resubscribe). A call waiting out a pause is not: its timer keeps running after
 * `close()` and the call settles only when the pause ends (up to retryAfter + 1 s: 61 s with the
 * interface's 10 subscribes per 60 s), then fails. Here the pauses last 20 s.
 */

let service: TestService;
const cleanups: (() => unknown)[] = [];
beforeAll(async () => {
  const limits = TIERS.filter((t) => t !== 'tunnelSubscribe' && t !== 'tunnelMessage').map((t) => `${t}=1000000/60`);
  service = await startTestService('embedded', { RATE_LIMITS: [...limits, 'tunnelSubscribe=1/20', 'tunnelMessage=1/20'].join(',') });
}, 60_000);
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});
afterAll(async () => {
  await service?.stop();
});

async function devices(count: number): Promise<{ token: string; uuids: string[] }> {
  const owner = await createUser(service);
  const uuids: string[] = [];
  for (let i = 0; i < count; i++) {
    const uuid = randomUUID();
    expect((await api(service, 'POST', '/devices/register', { token: owner.accessToken, body: { uuid, deviceId: `HUB-${i}`, name: `Hub ${i}` } })).status).toBe(201);
    uuids.push(uuid);
  }
  return { token: owner.accessToken, uuids };
}

function settledWithin<T>(promise: Promise<T>, ms: number): Promise<'settled' | 'pending'> {
  return Promise.race([
    promise.then(() => 'settled' as const, () => 'settled' as const),
    new Promise<'pending'>((resolve) => setTimeout(() => resolve('pending'), ms)),
  ]);
}

test('close() settles a subscribe() that waits out a subscribe pause', async () => {
  const { token, uuids } = await devices(3);
  const [a, b, c] = uuids as [string, string, string];
  const tunnel = new AppClient({ baseUrl: service.baseUrl, session: memorySessionStore({ accessToken: token, refreshToken: 'unused' }) }).tunnel();
  cleanups.push(() => tunnel.close());
  await tunnel.connected();
  expect(await tunnel.subscribe(a)).toMatchObject({ success: true });
  expect(await tunnel.subscribe(b)).toMatchObject({ success: false, error: { code: 'RATE_LIMITED' } });

  const waiting = tunnel.subscribe(c);
  waiting.catch(() => undefined);
  await new Promise((resolve) => setTimeout(resolve, 200));
  tunnel.close();
  expect(await settledWithin(waiting, 2000)).toBe('settled');
  await expect(waiting).rejects.toThrow('The tunnel is closed');
}, 60_000);

test('close() settles a send() that waits out a message pause', async () => {
  const { token, uuids } = await devices(1);
  const [a] = uuids as [string];
  const tunnel = new AppClient({ baseUrl: service.baseUrl, session: memorySessionStore({ accessToken: token, refreshToken: 'unused' }) }).tunnel();
  cleanups.push(() => tunnel.close());
  await tunnel.connected();
  expect(await tunnel.send(a, 'ping', {})).toEqual({ success: true, delivered: false });
  expect(await tunnel.send(a, 'ping', {})).toEqual({ success: false, delivered: false });

  const waiting = tunnel.send(a, 'ping', {});
  waiting.catch(() => undefined);
  await new Promise((resolve) => setTimeout(resolve, 200));
  tunnel.close();
  expect(await settledWithin(waiting, 2000)).toBe('settled');
}, 60_000);
