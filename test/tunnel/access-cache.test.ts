import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createTokens } from '../../src/auth/tokens';
import { handleCommand, newCommandContext, systemClock } from '../../src/commands/handler';
import { deviceDecider, type DeviceCommand } from '../../src/domain/device';
import { deviceStream } from '../../src/domain/events';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import { comparePositions, type EventStore, type GlobalPosition, type RecordedEvent, type SubscribeOptions, type Subscription } from '../../src/infra/eventstore/port';
import { createLogger } from '../../src/logger';
import type { MessageAck, SubscribeAck, TunnelError } from '../../src/tunnel/events';
import { createTunnel, type Tunnel } from '../../src/tunnel/tunnel';
import { createUser, api } from '../support/harness';
import { TEST_SECRETS } from '../support/server';
import { connect, deviceToken, linkUser, refusal, registerHub, request, unlinkUser, type Probe } from '../support/tunnel';
import { twoProcesses } from '../support/two-processes';

/**
 * The tunnel's device folds (src/tunnel/access.ts) never stay behind the live feed: an event
 * the feed hands over while a process reads a device for the first time is not lost when the
 * older read comes back (issue 25, point 8). Embedded, with a read held back until the event
 * was appended and handed over; distributed, with the unlink made on one process while the
 * other reads the device for the first time.
 */

const tokens = createTokens({
  jwtAccessSecret: TEST_SECRETS.JWT_ACCESS_SECRET,
  jwtRefreshSecret: TEST_SECRETS.JWT_REFRESH_SECRET,
  jwtDeviceSecret: TEST_SECRETS.JWT_DEVICE_SECRET,
});

/**
 * The event store of the rig. The next read of a held stream takes what the stream holds at
 * once, then hands it out only after `release`: a read that began before an append and ends
 * after it. `handedOver(position)` resolves once the tunnel's live feed has handled the event
 * at that position (it asks for the next item only after handling the previous one).
 */
interface HeldReads {
  readonly store: EventStore;
  hold(streamName: string): { started: Promise<void>; release: () => void };
  handedOver(position: GlobalPosition): Promise<void>;
}

function holdingReads(inner: EventStore): HeldReads {
  const holds = new Map<string, { started: () => void; released: Promise<void> }>();
  let handled: GlobalPosition | null = null;
  const waiters = new Set<() => void>();
  const subscribe = (options?: SubscribeOptions): Subscription => {
    const sub = inner.subscribe(options);
    return {
      close: () => sub.close(),
      async *[Symbol.asyncIterator]() {
        for await (const item of sub) {
          yield item;
          if (item.kind !== 'event') continue;
          if (handled === null || comparePositions(item.event.position, handled) > 0) handled = item.event.position;
          for (const wake of [...waiters]) wake();
        }
      },
    };
  };
  const store: EventStore = {
    append: (stream, events, expected) => inner.append(stream, events, expected),
    subscribe,
    setStreamMaxAge: (stream, seconds) => inner.setStreamMaxAge(stream, seconds),
    headPosition: () => inner.headPosition(),
    close: () => inner.close(),
    readStream(streamName, options) {
      const held = holds.get(streamName);
      if (held === undefined) return inner.readStream(streamName, options);
      holds.delete(streamName);
      return (async function* () {
        const taken: RecordedEvent[] = [];
        for await (const event of inner.readStream(streamName, options)) taken.push(event);
        held.started();
        await held.released;
        yield* taken;
      })();
    },
  };
  return {
    store,
    hold(streamName) {
      let started: () => void = () => undefined;
      let release: () => void = () => undefined;
      const startedP = new Promise<void>((resolve) => (started = resolve));
      const released = new Promise<void>((resolve) => (release = resolve));
      holds.set(streamName, { started, released });
      return { started: startedP, release };
    },
    handedOver: (position) =>
      new Promise<void>((resolve) => {
        const check = (): void => {
          if (handled === null || comparePositions(handled, position) < 0) return;
          waiters.delete(check);
          resolve();
        };
        waiters.add(check);
        check();
      }),
  };
}

interface Rig {
  readonly baseUrl: string;
  readonly store: EventStore;
  readonly reads: HeldReads;
  readonly tunnel: Tunnel;
  stop(): Promise<void>;
}

async function rig(): Promise<Rig> {
  const dir = mkdtempSync(join(tmpdir(), 'hhc-access-cache-'));
  const store = await openEmbeddedEventStore(dir);
  const reads = holdingReads(store);
  const server: Server = createServer((_req, res) => res.writeHead(404).end());
  const tunnel = await createTunnel(server, { tokens, eventStore: reads.store, logger: createLogger('silent') });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    store,
    reads,
    tunnel,
    stop: async () => {
      await tunnel.close();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Runs a device command; resolves with the position of what it appended. */
async function command(store: EventStore, uuid: string, actor: string, cmd: DeviceCommand): Promise<GlobalPosition> {
  const result = await handleCommand(store, deviceDecider, deviceStream(uuid), cmd, newCommandContext({ type: 'user', id: actor }, randomUUID()), systemClock);
  if (result.position === null) throw new Error(`${cmd.type} appended nothing`);
  return result.position;
}

/** A device owned by `ownerId` with `editorId` linked as editor; its token of generation 0. */
async function givenHousehold(store: EventStore, ownerId: string, editorId: string): Promise<{ uuid: string; token: string }> {
  const uuid = randomUUID();
  const id = randomUUID();
  const now = new Date().toISOString();
  await command(store, uuid, ownerId, {
    type: 'RegisterDevice',
    data: { id, uuid, deviceId: 'HUB', name: 'Hub', actorUserId: ownerId, linkId: randomUUID(), ownedDeviceCount: 0, maxDevicesPerUser: 10, now },
  });
  await command(store, uuid, ownerId, { type: 'LinkUser', data: { uuid, actorUserId: ownerId, targetUserId: editorId, role: 'editor', linkId: randomUUID(), now } });
  return { uuid, token: tokens.signDevice({ sub: id, deviceUuid: uuid, gen: 0 }) };
}

const userToken = (userId: string): string => tokens.signAccess({ sub: userId, email: `${userId}@example.com`, role: 'user' });

const open: Probe[] = [];
afterEach(() => {
  for (const p of open.splice(0)) p.close();
});
async function on(target: { baseUrl: string }, token: string): Promise<Probe> {
  const p = await connect(target, token);
  open.push(p);
  return p;
}

describe('tunnel device folds follow the live feed (embedded, a first read held back)', () => {
  let r: Rig;
  beforeAll(async () => {
    r = await rig();
  });
  afterAll(async () => {
    await r.stop();
  });

  it('an editor unlinked while the device is read for the first time keeps no subscription and sends nothing', async () => {
    const owner = randomUUID();
    const editor = randomUUID();
    const { uuid, token: hubToken } = await givenHousehold(r.store, owner, editor);
    const app = await on(r, userToken(editor));

    const held = r.reads.hold(deviceStream(uuid));
    const ack = request<SubscribeAck>(app, 'tunnel:subscribe', { deviceUuid: uuid });
    await held.started;
    // The unlink lands while the first read of the device is in flight, and the feed hands it over.
    await r.reads.handedOver(await command(r.store, uuid, owner, { type: 'UnlinkUser', data: { uuid, actorUserId: owner, targetUserId: editor, now: new Date().toISOString() } }));
    held.release();

    // The unlink was handed over before the read came back: the subscription is refused.
    expect(await ack).toEqual({ success: false, error: expect.objectContaining({ code: 'NOT_FOUND' }) });

    // The hub is connected: a command from the former editor is refused, not delivered.
    const hub = await on(r, hubToken);
    const sent = await request<MessageAck>(app, 'tunnel:message', { deviceUuid: uuid, type: 'cmd', payload: { on: true } });
    expect(sent).toEqual({ success: false, delivered: false });
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(hub.all('tunnel:message')).toEqual([]);
  });

  it('a device deleted during its own handshake is not left connected', async () => {
    const owner = randomUUID();
    const { uuid, token } = await givenHousehold(r.store, owner, randomUUID());
    const held = r.reads.hold(deviceStream(uuid));
    const attempt = connect(r, token).then(
      (p) => {
        open.push(p);
        return p;
      },
      (error: unknown) => (error instanceof Error ? error : new Error(String(error))),
    );
    await held.started;
    await r.reads.handedOver(await command(r.store, uuid, owner, { type: 'DeleteDevice', data: { uuid, actorUserId: owner, now: new Date().toISOString() } }));
    held.release();

    const outcome = await attempt;
    if (outcome instanceof Error) {
      expect(outcome.message).toBe('unauthorized');
      return;
    }
    // Connected for a moment at most: revoked and closed.
    await outcome.next('disconnect');
    expect(outcome.socket.connected).toBe(false);
  });

  it('a new token generation during the handshake of a socket with the old one refuses it', async () => {
    const owner = randomUUID();
    const { uuid, token } = await givenHousehold(r.store, owner, randomUUID());
    const held = r.reads.hold(deviceStream(uuid));
    const attempt = refusal(r, { token });
    await held.started;
    await r.reads.handedOver(await command(r.store, uuid, owner, { type: 'IssueDeviceToken', data: { uuid, actorUserId: owner, now: new Date().toISOString() } }));
    held.release();
    expect((await attempt).message).toBe('unauthorized');
  });
});

describe('tunnel device folds follow the live feed (distributed, two API processes)', () => {
  const { a, b, on: onProcess } = twoProcesses({ closeSockets: 'afterEach' });

  it('an editor unlinked on one process while the other reads the device for the first time loses access there', async () => {
    // The subscribe leaves 0 to 15 ms after the unlink: the window in which B's first read races A's append.
    for (let round = 0; round < 16; round++) {
      const [owner, editor] = await Promise.all([createUser(a()), createUser(a())]);
      const hub = await registerHub(a(), owner);
      await linkUser(a(), hub, owner, editor, 'editor');
      const hubToken = await deviceToken(a(), hub, owner);
      const device = await onProcess(a(), hubToken);
      const app = await onProcess(b(), editor.accessToken);

      // B reads the device for the first time while A unlinks the editor.
      const unlinked = unlinkUser(a(), hub, owner, editor.id);
      await new Promise((resolve) => setTimeout(resolve, round));
      const [answer] = await Promise.all([request<SubscribeAck>(app, 'tunnel:subscribe', { deviceUuid: hub.uuid }), unlinked]);
      // Whatever the order, once the unlink has answered B refuses the editor.
      const deadline = Date.now() + 5000;
      let sent: MessageAck = { success: true, delivered: true };
      while (Date.now() < deadline) {
        sent = await request<MessageAck>(app, 'tunnel:message', { deviceUuid: hub.uuid, type: 'cmd', payload: { round } });
        if (!sent.success) break;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      expect(sent).toEqual({ success: false, delivered: false });
      if (answer.success) await app.next<TunnelError>('tunnel:error', (e) => e.code === 'ACCESS_REVOKED');
      const again = await request<SubscribeAck>(app, 'tunnel:subscribe', { deviceUuid: hub.uuid });
      expect(again.success).toBe(false);
      const got = await api(b(), 'GET', `/devices/${hub.uuid}`, { token: editor.accessToken });
      expect(got.status).toBe(404);
      device.close();
    }
  }, 180_000);
});
