import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createDeviceCommands, type DeviceCommands } from '../../src/commands/devices';
import { newCommandContext, type Clock } from '../../src/commands/handler';
import { createPresenceCommands, EXPIRY_ACTOR, type PresenceCommands } from '../../src/commands/presence';
import { UnauthorizedError } from '../../src/domain/errors';
import { deviceStream, heartbeatStream } from '../../src/domain/events';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import type { EventStore, RecordedEvent } from '../../src/infra/eventstore/port';
import { createMemoryReadStore } from '../../src/infra/readstore/memory';
import type { Watermark } from '../../src/projections/watermark';

/**
 * The expiry use case on a manual clock, against the real embedded log: deadline math, and
 * the races between an expiry job and a heartbeat, forced into each order with gates.
 */

const WINDOW_S = 300;
const T0 = Date.parse('2026-11-21T12:00:00.000Z');
const at = (seconds: number): string => new Date(T0 + seconds * 1000).toISOString();

const noWait: Watermark = { advance: () => undefined, waitFor: async () => true, current: () => null, close: async () => undefined };

/** An event store whose next append to a matching stream waits until released. */
function gated(store: EventStore): { store: EventStore; hold: (prefix: string) => { reached: Promise<void>; release: () => void } } {
  const holds: Array<{ prefix: string; reached: () => void; released: Promise<void> }> = [];
  return {
    store: {
      async append(streamName, events, expected) {
        const i = holds.findIndex((h) => streamName.startsWith(h.prefix));
        if (i >= 0) {
          const [h] = holds.splice(i, 1);
          h?.reached();
          await h?.released;
        }
        return store.append(streamName, events, expected);
      },
      readStream: (streamName, options) => store.readStream(streamName, options),
      subscribe: (options) => store.subscribe(options),
      setStreamMaxAge: (streamName, seconds) => store.setStreamMaxAge(streamName, seconds),
      headPosition: () => store.headPosition(),
      close: () => store.close(),
    },
    hold(prefix) {
      let reached: () => void = () => undefined;
      let release: () => void = () => undefined;
      const reachedP = new Promise<void>((resolve) => (reached = resolve));
      const released = new Promise<void>((resolve) => (release = resolve));
      holds.push({ prefix, reached, released });
      return { reached: reachedP, release };
    },
  };
}

describe('presence expiry (manual clock, embedded log)', () => {
  let dir: string;
  let store: EventStore;
  let now: number;
  const clock: Clock = { now: () => new Date(now) };
  let devices: DeviceCommands;
  let presence: PresenceCommands;
  let uuid: string;
  const owner = { type: 'user' as const, id: 'owner-1' };

  const devicesOn = (eventStore: EventStore): DeviceCommands =>
    createDeviceCommands({ eventStore, readStore: createMemoryReadStore(), watermark: noWait, clock, readYourWritesTimeoutMs: 1, maxDevicesPerUser: 100 });
  const presenceOn = (eventStore: EventStore): PresenceCommands => createPresenceCommands({ eventStore, clock, offlineAfterSeconds: WINDOW_S });
  const heartbeatAt = (seconds: number, on: DeviceCommands = devices) => {
    now = T0 + seconds * 1000;
    return on.heartbeat(uuid, 1, {}, newCommandContext({ type: 'device', id: uuid }, randomUUID()));
  };
  const events = async (stream: string): Promise<RecordedEvent[]> => {
    const out: RecordedEvent[] = [];
    for await (const e of store.readStream(stream)) out.push(e);
    return out;
  };
  const presenceEvents = async (): Promise<Array<{ type: string; data: unknown }>> =>
    (await events(deviceStream(uuid))).filter((e) => e.type === 'DeviceWentOnline' || e.type === 'DeviceWentOffline').map((e) => ({ type: e.type, data: e.data }));

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'hhc-presence-'));
    store = await openEmbeddedEventStore(dir, { now: () => now });
    now = T0 - 60_000;
    devices = devicesOn(store);
    presence = presenceOn(store);
    uuid = randomUUID();
    const ctx = newCommandContext(owner, randomUUID());
    await devices.register({ uuid, deviceId: 'HUB-1', name: 'Hub' }, ctx);
    await devices.issueToken(uuid, ctx);
  });

  afterEach(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('before the deadline the job answers the deadline; from it on, DeviceWentOffline after the last heartbeat', async () => {
    await heartbeatAt(0);
    now = T0 + (WINDOW_S * 1000 - 1);
    expect(await presence.expire(uuid)).toEqual({ kind: 'alive', nextCheckAt: T0 + WINDOW_S * 1000 });
    expect(await presenceEvents()).toEqual([{ type: 'DeviceWentOnline', data: { uuid, lastSeenAt: at(0) } }]);

    now = T0 + WINDOW_S * 1000;
    expect(await presence.expire(uuid)).toEqual({ kind: 'offline' });
    const offline = (await events(deviceStream(uuid))).at(-1);
    expect(offline).toMatchObject({
      type: 'DeviceWentOffline',
      data: { uuid, reason: 'heartbeat-timeout', lastSeenAt: at(0), wentOfflineAt: at(WINDOW_S) },
      metadata: { actor: EXPIRY_ACTOR },
    });
    // The job of an offline device ends, and appends nothing more.
    expect(await presence.expire(uuid)).toEqual({ kind: 'not-online' });
    expect(await presenceEvents()).toHaveLength(2);
  });

  test('every heartbeat moves the deadline; the job re-delays to the newest without touching the device stream', async () => {
    await heartbeatAt(0);
    await heartbeatAt(45);
    await heartbeatAt(90);
    const before = (await events(deviceStream(uuid))).length;
    now = T0 + WINDOW_S * 1000;
    expect(await presence.expire(uuid)).toEqual({ kind: 'alive', nextCheckAt: T0 + (90 + WINDOW_S) * 1000 });
    expect(await events(deviceStream(uuid))).toHaveLength(before);
    expect(await events(heartbeatStream(uuid))).toHaveLength(3);
  });

  test('a heartbeat that lands while the job decides: the job sees it after its append and brings the device back', async () => {
    await heartbeatAt(0);
    const gate = gated(store);
    const job = presenceOn(gate.store);
    const held = gate.hold('device-');
    now = T0 + WINDOW_S * 1000;
    const expiring = job.expire(uuid); // read the heartbeat stream (silent since 0), decided offline, waits to append
    await held.reached;
    const answer = await heartbeatAt(WINDOW_S + 0.001); // the API sees an online device: no transition
    expect(answer).toMatchObject({ isOnline: true, lastSeenAt: at(WINDOW_S + 0.001) });
    held.release();

    expect(await expiring).toEqual({ kind: 'alive', nextCheckAt: T0 + (2 * WINDOW_S + 0.001) * 1000 });
    expect(await presenceEvents()).toEqual([
      { type: 'DeviceWentOnline', data: { uuid, lastSeenAt: at(0) } },
      { type: 'DeviceWentOffline', data: { uuid, reason: 'heartbeat-timeout', lastSeenAt: at(0), wentOfflineAt: at(WINDOW_S) } },
      { type: 'DeviceWentOnline', data: { uuid, lastSeenAt: at(WINDOW_S + 0.001) } },
    ]);
  });

  test('a job that runs whole between a heartbeat\'s token check and its append: the heartbeat brings the device back', async () => {
    await heartbeatAt(0);
    const gate = gated(store);
    const api = devicesOn(gate.store);
    const held = gate.hold('heartbeat-');
    const beating = heartbeatAt(WINDOW_S + 0.001, api); // read the device (online), waits to append its heartbeat
    await held.reached;
    expect(await presence.expire(uuid)).toEqual({ kind: 'offline' }); // saw no newer heartbeat
    held.release();

    expect(await beating).toMatchObject({ isOnline: true, lastSeenAt: at(WINDOW_S + 0.001) });
    expect((await presenceEvents()).map((e) => e.type)).toEqual(['DeviceWentOnline', 'DeviceWentOffline', 'DeviceWentOnline']);
    expect((await presenceEvents()).at(-1)?.data).toEqual({ uuid, lastSeenAt: at(WINDOW_S + 0.001) });
    now = T0 + (WINDOW_S + 1) * 1000;
    expect(await presence.expire(uuid)).toEqual({ kind: 'alive', nextCheckAt: T0 + (2 * WINDOW_S + 0.001) * 1000 });
  });

  test('two workers firing the same job at once append one DeviceWentOffline (expected revision)', async () => {
    await heartbeatAt(0);
    const gate = gated(store);
    const [a, b] = [presenceOn(gate.store), presenceOn(gate.store)];
    const [heldA, heldB] = [gate.hold('device-'), gate.hold('device-')];
    now = T0 + WINDOW_S * 1000;
    const runs = [a.expire(uuid), b.expire(uuid)];
    await Promise.all([heldA.reached, heldB.reached]);
    heldA.release();
    heldB.release();
    const outcomes = (await Promise.all(runs)).map((o) => o.kind).sort();
    expect(outcomes).toEqual(['not-online', 'offline']);
    expect((await presenceEvents()).map((e) => e.type)).toEqual(['DeviceWentOnline', 'DeviceWentOffline']);
  });

  test('a heartbeat with a revoked token is refused before anything is recorded', async () => {
    await heartbeatAt(0);
    now = T0 + 1000;
    await expect(devices.heartbeat(uuid, 0, {}, newCommandContext({ type: 'device', id: uuid }, randomUUID()))).rejects.toBeInstanceOf(UnauthorizedError);
    expect(await events(heartbeatStream(uuid))).toHaveLength(1);
  });

  test('the job of a deleted or unknown device ends without appending', async () => {
    await heartbeatAt(0);
    now = T0 + 10_000;
    await devices.remove(uuid, newCommandContext(owner, randomUUID()));
    now = T0 + WINDOW_S * 1000;
    expect(await presence.expire(uuid)).toEqual({ kind: 'not-online' });
    expect(await presence.expire(randomUUID())).toEqual({ kind: 'not-online' });
    expect((await events(deviceStream(uuid))).at(-1)?.type).toBe('DeviceDeleted');
  });
});
