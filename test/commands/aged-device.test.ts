import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createDeviceCommands, type DeviceCommands } from '../../src/commands/devices';
import { loadAggregate, newCommandContext, type Clock } from '../../src/commands/handler';
import { createPresenceCommands } from '../../src/commands/presence';
import { DEVICE_SNAPSHOT_EVERY, deviceSnapshotStream } from '../../src/commands/snapshots';
import { deviceDecider } from '../../src/domain/device';
import { deviceStream } from '../../src/domain/events';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import type { EventStore } from '../../src/infra/eventstore/port';
import { createMemoryReadStore } from '../../src/infra/readstore/memory';
import type { Watermark } from '../../src/projections/watermark';
import { createDeviceAccess } from '../../src/tunnel/access';
import { countingReads } from '../support/stream-reads';

/**
 * A hub that has dropped off and come back many times has a long device stream (every
 * `DeviceWentOnline` and `DeviceWentOffline`). The service's cold folds of it (a process that
 * just started: the first heartbeat, the tunnel's first handshake) read its newest snapshot
 * and the events after it, not its whole history.
 */

const WINDOW_S = 300;
const T0 = Date.parse('2026-11-28T08:00:00.000Z');
const OUTAGES = 120;
const noWait: Watermark = { advance: () => undefined, waitFor: async () => true, current: () => null, close: async () => undefined };

describe('an aged device (many outages) after a restart', () => {
  let dir: string;
  let store: EventStore;
  let now = T0;
  const clock: Clock = { now: () => new Date(now) };
  const devicesOn = (eventStore: EventStore): DeviceCommands =>
    createDeviceCommands({ eventStore, readStore: createMemoryReadStore(), watermark: noWait, clock, readYourWritesTimeoutMs: 1, maxDevicesPerUser: 100 });
  const uuid = randomUUID();

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'hhc-aged-device-'));
    store = await openEmbeddedEventStore(dir, { now: () => now });
    const devices = devicesOn(store);
    const presence = createPresenceCommands({ eventStore: store, clock, offlineAfterSeconds: WINDOW_S });
    const owner = newCommandContext({ type: 'user', id: 'owner-1' }, randomUUID());
    await devices.register({ uuid, deviceId: 'HUB-AGED', name: 'Hub' }, owner);
    await devices.issueToken(uuid, owner);
    // Each outage: a heartbeat brings the hub online, five minutes of silence take it offline.
    for (let i = 0; i < OUTAGES; i++) {
      now += 60_000;
      await devices.heartbeat(uuid, 1, {}, newCommandContext({ type: 'device', id: uuid }, randomUUID()));
      now += WINDOW_S * 1000;
      expect(await presence.expire(uuid)).toEqual({ kind: 'offline' });
    }
  }, 60_000);

  afterAll(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('its stream is long, and snapshots of it were written as it grew', async () => {
    const whole = await loadAggregate(store, deviceDecider.evolve, deviceDecider.initialState, deviceStream(uuid));
    expect(whole.revision).toBeGreaterThanOrEqual(BigInt(2 * OUTAGES));
    let snapshots = 0;
    for await (const _ of store.readStream(deviceSnapshotStream(uuid))) snapshots++;
    expect(snapshots).toBe(Math.floor(Number(whole.revision + 1n) / DEVICE_SNAPSHOT_EVERY));
  });

  test('the first heartbeat of a new process reads fewer than the snapshot interval of its events (the embedded log knows the stream is long), and brings it online', async () => {
    const { store: counted, read } = countingReads(store);
    now += 60_000;
    const answer = await devicesOn(counted).heartbeat(uuid, 1, {}, newCommandContext({ type: 'device', id: uuid }, randomUUID()));
    expect(answer.isOnline).toBe(true);
    expect(read.get(deviceStream(uuid)) ?? 0).toBeLessThan(DEVICE_SNAPSHOT_EVERY);
    const whole = await loadAggregate(store, deviceDecider.evolve, deviceDecider.initialState, deviceStream(uuid));
    expect(whole.state.status === 'active' && whole.state.isOnline).toBe(true);
  });

  test("the tunnel's first fold of it in a new process: the fold of the whole stream, from fewer than the interval's events", async () => {
    const { store: counted, read } = countingReads(store);
    const access = createDeviceAccess(counted, { maxEntries: 10, now: () => now });
    const folded = await access.fresh(uuid);
    const whole = await loadAggregate(store, deviceDecider.evolve, deviceDecider.initialState, deviceStream(uuid));
    expect(folded).toEqual(whole);
    expect(read.get(deviceStream(uuid)) ?? 0).toBeLessThan(DEVICE_SNAPSHOT_EVERY);
  });
});
