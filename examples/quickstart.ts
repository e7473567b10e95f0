/**
 * From a user to a hub talking to an app, in one script (README: Quickstart), on the two
 * clients: `@home-hub-cloud/app-client` (clients/app) and `@home-hub-cloud/hub-client`
 * (clients/hub).
 *   npx tsx examples/quickstart.ts <email> <password> [base URL, default http://localhost:3000]
 * Logs in, registers a hub, gets its device token, starts the hub (heartbeats, token renewal,
 * the tunnel), then subscribes the app to the hub and has them exchange a message.
 */
import { randomUUID } from 'node:crypto';
import { AppClient } from '@home-hub-cloud/app-client';
import { HubClient, type HubEvent } from '@home-hub-cloud/hub-client';
import type { MessageFromDevice } from '@home-hub-cloud/tunnel-contract';

const [email, password, base = 'http://localhost:3000'] = process.argv.slice(2);
if (email === undefined || password === undefined) {
  process.stderr.write('usage: npx tsx examples/quickstart.ts <email> <password> [base URL]\n');
  process.exit(2);
}

function first(hub: HubClient, type: HubEvent['type']): Promise<HubEvent> {
  return new Promise((resolve, reject) => {
    const off = hub.on((event) => {
      if (event.type === type) {
        off();
        resolve(event);
      } else if (event.type === 'stopped') {
        off();
        reject(new Error(`the hub stopped: ${event.reason} (${event.message})`));
      }
    });
  });
}

async function main(): Promise<void> {
  // 1. Log in: the client keeps the session and refreshes it when needed.
  const cloud = new AppClient({ baseUrl: base as string });
  await cloud.login(email as string, password as string);
  console.log('logged in');

  // 2. Register a hub (typed from the service's OpenAPI document): the caller becomes its owner.
  const uuid = randomUUID();
  const registered = await cloud.api.POST('/devices/register', { body: { uuid, deviceId: 'HUB-QUICKSTART', name: 'Living room hub' } });
  if (registered.data === undefined) throw new Error(`register: ${registered.response.status} ${JSON.stringify(registered.error)}`);
  console.log(`registered hub ${uuid}`);

  // 3. The hub's own token (24 h), handed to the hub; the hub client renews it by itself.
  const issued = await cloud.api.POST('/devices/auth/{uuid}', { params: { path: { uuid } } });
  let deviceToken = issued.data?.token ?? '';

  // 4. The hub: heartbeats, renewal and the tunnel; it answers every command.
  const hub = new HubClient({ baseUrl: base as string, uuid, tokens: { load: () => deviceToken, save: (token) => void (deviceToken = token) } });
  hub.onMessage((command, reply) => void reply({ type: `${command.type}.done`, payload: command.payload }));
  const beat = first(hub, 'heartbeat');
  const connected = first(hub, 'connected');
  await hub.start();
  await beat;
  const device = await cloud.api.GET('/devices/{id}', { params: { path: { id: uuid } } });
  console.log(`heartbeat: online=${device.data?.isOnline}`);
  await connected;

  // 5. The app's side of the tunnel: subscribe, send a command, get the reply.
  const tunnel = cloud.tunnel();
  try {
    await tunnel.connected();
    const subscribed = await tunnel.subscribe(uuid);
    console.log(`subscribed: ${JSON.stringify(subscribed)}`);
    const reply = new Promise<MessageFromDevice>((resolve) => tunnel.onMessage(resolve));
    const ack = await tunnel.send(uuid, 'light.set', { on: true });
    console.log(`sent light.set: delivered=${ack.delivered}`);
    const answer = await reply;
    console.log(`hub replied: ${answer.type} ${JSON.stringify(answer.payload)}`);
  } finally {
    tunnel.close();
    hub.stop();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
