import { randomUUID } from 'node:crypto';
import { AppClient, memorySessionStore, type AppTunnelEvent } from '@home-hub-cloud/app-client';
import { TIERS } from '../../src/ratelimit/limiter';
import { api, createUser, startTestService, type TestService } from '../support/harness';

/**
 * The README's way to use the app client: `const tunnel = cloud.tunnel(); await
 * tunnel.subscribe(deviceUuid)`. A `subscribe` called before the first connection is sent
 * twice: once by the connect handler, which subscribes everything in the set again, and once
 * by `subscribe` itself once the connection is there. Each costs a point of the user's
 * `tunnel:subscribe` tier (interface: 10 per 60 s), so an app that subscribes to 6 devices at
 * start is told `RATE_LIMITED` (retryAfter 60) for devices that are in fact subscribed, and
 * the client then holds every `send` back for 60 s.
 */

let service: TestService;

beforeAll(async () => {
  const limits = TIERS.filter((tier) => tier !== 'tunnelSubscribe').map((tier) => `${tier}=1000000/60`);
  // The interface's tier: 10 subscribes per 60 s.
  service = await startTestService('embedded', { RATE_LIMITS: [...limits, 'tunnelSubscribe=10/60'].join(',') });
}, 60_000);
afterAll(async () => {
  await service?.stop();
});

test('six subscribes made right after tunnel() are each sent once and all succeed', async () => {
  const owner = await createUser(service);
  const uuids: string[] = [];
  for (let i = 0; i < 6; i++) {
    const uuid = randomUUID();
    const res = await api(service, 'POST', '/devices/register', { token: owner.accessToken, body: { uuid, deviceId: `HUB-${i}`, name: `Hub ${i}` } });
    expect(res.status).toBe(201);
    uuids.push(uuid);
  }
  const client = new AppClient({ baseUrl: service.baseUrl, session: memorySessionStore({ accessToken: owner.accessToken, refreshToken: 'unused' }) });
  const tunnel = client.tunnel();
  const events: AppTunnelEvent[] = [];
  tunnel.on((e) => events.push(e));
  try {
    const acks = await Promise.all(uuids.map((uuid) => tunnel.subscribe(uuid)));
    expect(acks.map((ack) => ack.success)).toEqual(uuids.map(() => true));
    expect(events.filter((e) => e.type === 'refused')).toEqual([]);
    // Nothing holds the next message back.
    const started = Date.now();
    expect(await tunnel.send(uuids[0] as string, 'ping', {})).toEqual({ success: true, delivered: false });
    expect(Date.now() - started).toBeLessThan(5000);
  } finally {
    tunnel.close();
  }
}, 90_000);
