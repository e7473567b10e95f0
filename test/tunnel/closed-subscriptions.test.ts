import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createTokens } from '../../src/auth/tokens';
import { newCommandContext, toNewEvents } from '../../src/commands/handler';
import { deviceDecider, type DeviceCommand } from '../../src/domain/device';
import { deviceStream } from '../../src/domain/events';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import type { EventStore } from '../../src/infra/eventstore/port';
import { createLogger } from '../../src/logger';
import { createTunnel, type Tunnel } from '../../src/tunnel/tunnel';
import { startPrivateRedis, type PrivateRedis } from '../support/redis';
import { TEST_SECRETS } from '../support/server';
import { connect } from '../support/tunnel';

/**
 * Distributed mode (the Redis adapter): a socket that closes while its subscribe waits for
 * Redis (the rooms joined, `roomsReady`) leaves no subscription behind.
 */

const tokens = createTokens({
  jwtAccessSecret: TEST_SECRETS.JWT_ACCESS_SECRET,
  jwtRefreshSecret: TEST_SECRETS.JWT_REFRESH_SECRET,
  jwtDeviceSecret: TEST_SECRETS.JWT_DEVICE_SECRET,
});

let redis: PrivateRedis;
let dir: string;
let eventStore: EventStore;
let server: Server;
let tunnel: Tunnel;
let baseUrl: string;

beforeAll(async () => {
  redis = await startPrivateRedis();
  dir = mkdtempSync(join(tmpdir(), 'hhc-tunnel-'));
  eventStore = await openEmbeddedEventStore(dir);
  server = createServer((_req, res) => res.writeHead(404).end());
  tunnel = await createTunnel(server, { tokens, eventStore, logger: createLogger('silent'), redis: { url: redis.url } });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}, 30_000);

afterAll(async () => {
  await tunnel.close();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  await eventStore.close();
  await redis.stop();
  rmSync(dir, { recursive: true, force: true });
});

async function givenDevice(ownerId: string): Promise<string> {
  const uuid = randomUUID();
  const now = new Date().toISOString();
  const command: DeviceCommand = {
    type: 'RegisterDevice',
    data: { id: randomUUID(), uuid, deviceId: 'HUB', name: 'Hub', actorUserId: ownerId, linkId: randomUUID(), ownedDeviceCount: 0, maxDevicesPerUser: 10, now },
  };
  const events = deviceDecider.decide(command, deviceDecider.initialState());
  await eventStore.append(deviceStream(uuid), toNewEvents(events, newCommandContext({ type: 'user', id: ownerId }, randomUUID()), now), 'no_stream');
  return uuid;
}

test('150 rounds of connect, subscribe and close at once leave no subscription of a closed socket', async () => {
  const ownerId = randomUUID();
  const uuid = await givenDevice(ownerId);
  const token = tokens.signAccess({ sub: ownerId, email: `${ownerId}@example.com`, role: 'user' });
  for (let round = 0; round < 150; round++) {
    const app = await connect({ baseUrl }, token);
    app.socket.emit('tunnel:subscribe', { deviceUuid: uuid });
    // Closed at every point of the subscribe: before it arrives, while it reads, while it joins.
    if (round % 3 === 1) await new Promise((resolve) => setImmediate(resolve));
    if (round % 3 === 2) await new Promise((resolve) => setTimeout(resolve, round % 7));
    app.close();
  }
  // Every socket is gone from the server, and every subscribe has finished one way or the other.
  for (let i = 0; i < 200 && tunnel.stats().appSockets > 0; i++) await new Promise((resolve) => setTimeout(resolve, 25));
  const settle = await connect({ baseUrl }, token);
  await settle.socket.timeout(5000).emitWithAck('tunnel:subscribe', { deviceUuid: uuid });
  settle.close();
  for (let i = 0; i < 200 && tunnel.stats().appSockets > 0; i++) await new Promise((resolve) => setTimeout(resolve, 25));
  expect(tunnel.stats()).toMatchObject({ appSockets: 0, subscriptions: 0, subscribedSessions: 0 });
}, 60_000);
