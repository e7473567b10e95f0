/**
 * From a user to a hub talking to an app, in one script (README: Quickstart).
 *   npx tsx examples/quickstart.ts <email> <password> [base URL, default http://localhost:3000]
 * Logs in, registers a hub, gets its device token, sends a heartbeat, then connects the hub
 * and the app to the tunnel and has them exchange a message. Uses only the public API and
 * the typed tunnel events.
 */
import { randomUUID } from 'node:crypto';
import { io, type Socket } from 'socket.io-client';
import type { AppToServerEvents, DeviceToServerEvents, MessageFromDevice, MessageToDevice, ServerToAppEvents, ServerToDeviceEvents } from '../src/tunnel/events';

const [email, password, base = 'http://localhost:3000'] = process.argv.slice(2);
if (email === undefined || password === undefined) {
  process.stderr.write('usage: npx tsx examples/quickstart.ts <email> <password> [base URL]\n');
  process.exit(2);
}

async function post<T>(path: string, body: unknown, token?: string): Promise<T> {
  const res = await fetch(`${base}/api/v1${path}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...(token !== undefined ? { Authorization: `Bearer ${token}` } : {}) },
    body: JSON.stringify(body),
  });
  if (!res.ok) throw new Error(`POST ${path}: ${res.status} ${await res.text()}`);
  return (await res.json()) as T;
}

function connected<S extends Socket>(socket: S): Promise<S> {
  return new Promise((resolve, reject) => {
    socket.once('connect', () => resolve(socket));
    socket.once('connect_error', reject);
  });
}

async function main(): Promise<void> {
  // 1. Log in: an access token (15 min) and a refresh token.
  const { accessToken } = await post<{ accessToken: string }>('/auth/login', { email, password });
  console.log('logged in');

  // 2. Register a hub: the caller becomes its owner.
  const uuid = randomUUID();
  await post('/devices/register', { uuid, deviceId: 'HUB-QUICKSTART', name: 'Living room hub' }, accessToken);
  console.log(`registered hub ${uuid}`);

  // 3. The hub's own token (24 h; the hub renews it with POST /devices/auth/:uuid/renew).
  const { token: deviceToken } = await post<{ token: string }>(`/devices/auth/${uuid}`, {}, accessToken);

  // 4. A heartbeat: the hub is online.
  const beat = await post<{ device: { isOnline: boolean } }>(`/devices/heartbeat/${uuid}`, { ipAddress: '192.168.1.20' }, deviceToken);
  console.log(`heartbeat: online=${beat.device.isOnline}`);

  // 5. The tunnel: the hub with its device token, the app with the user's access token.
  const options = { transports: ['websocket'], reconnection: false, forceNew: true };
  const hub: Socket<ServerToDeviceEvents, DeviceToServerEvents> = await connected(io(`${base}/tunnel`, { ...options, auth: { token: deviceToken } }));
  const app: Socket<ServerToAppEvents, AppToServerEvents> = await connected(io(`${base}/tunnel`, { ...options, auth: { token: accessToken } }));
  try {
    // The hub answers every command.
    hub.on('tunnel:message', (command: MessageToDevice) => {
      hub.emit('tunnel:message', { replyTo: command.id, type: `${command.type}.done`, payload: command.payload });
    });
    const subscribed = await app.timeout(5000).emitWithAck('tunnel:subscribe', { deviceUuid: uuid });
    console.log(`subscribed: ${JSON.stringify(subscribed)}`);
    const reply = new Promise<MessageFromDevice>((resolve) => app.once('tunnel:message', resolve));
    const ack = await app.timeout(5000).emitWithAck('tunnel:message', { deviceUuid: uuid, type: 'light.set', payload: { on: true } });
    console.log(`sent light.set: delivered=${ack.delivered}`);
    const answer = await reply;
    console.log(`hub replied: ${answer.type} ${JSON.stringify(answer.payload)}`);
  } finally {
    hub.disconnect();
    app.disconnect();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
