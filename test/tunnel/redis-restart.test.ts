import type { DeviceStatus, MessageAck, MessageFromDevice, MessageToDevice } from '../../src/tunnel/events';
import { createUser } from '../support/harness';
import { connect, deviceToken, registerHub, request } from '../support/tunnel';
import { twoProcesses } from '../support/two-processes';

/**
 * Two API processes on one Redis, and Redis restarts (empty: it keeps nothing on disk).
 * The processes run the api and projector roles only: what is under test is the tunnel's
 * recovery, not the presence expiry's.
 */

const { a, b, on } = twoProcesses({ env: { ROLES: 'api,projector' } });

test('the relay comes back by itself: device records written again, rooms subscribed again', async () => {
  const owner = await createUser(a());
  const hub = await registerHub(a(), owner);
  const token = await deviceToken(a(), hub, owner);
  const app = await on(a(), owner.accessToken);
  await request(app, 'tunnel:subscribe', { deviceUuid: hub.uuid });
  const device = await on(b(), token);
  await app.next<DeviceStatus>('device:status', (s) => s.tunnelConnected);

  const redis = a().redis;
  if (redis === null) throw new Error('the distributed harness exposes its Redis');
  await redis.restart();

  // Bounded: ioredis reconnects with a backoff, and what is relayed while Redis is away (or
  // before the rooms are subscribed again) is lost: send until one arrives.
  const deadline = Date.now() + 20_000;
  for (let attempt = 1; ; attempt++) {
    app.socket.emit('tunnel:message', { deviceUuid: hub.uuid, type: 'after-restart', payload: attempt });
    const arrived = await device.next<MessageToDevice>('tunnel:message', (m) => m.type === 'after-restart', 500).then(
      () => true,
      () => false,
    );
    if (arrived) break;
    if (Date.now() > deadline) throw new Error(`nothing relayed within 20 s of the restart (${attempt} attempts)`);
  }
  // The device's record in Redis is back (process B wrote it again on reconnecting): a process
  // started after the restart, which has heard nothing, finds the device through it.
  const c = await a().startAnother();
  try {
    const fromC = await connect(c, owner.accessToken);
    expect(await request<MessageAck>(fromC, 'tunnel:message', { deviceUuid: hub.uuid, type: 'via-c', payload: null })).toEqual({ success: true, delivered: true });
    expect((await device.next<MessageToDevice>('tunnel:message', (m) => m.type === 'via-c')).from).toEqual({ userId: owner.id });
    fromC.close();
  } finally {
    await c.stop();
  }
  device.socket.emit('tunnel:message', { type: 'back', payload: null });
  expect((await app.next<MessageFromDevice>('tunnel:message', (m) => m.type === 'back')).from).toBe('device');
}, 60_000);
