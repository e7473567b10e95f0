import { randomUUID } from 'node:crypto';
import { handleCommand, loadAggregate, newCommandContext, type FoldedStream } from '../../src/commands/handler';
import {
  createDeviceSnapshots,
  DEVICE_SNAPSHOT_EVENT,
  DEVICE_SNAPSHOT_FORMAT,
  DEVICE_SNAPSHOT_PREFIX,
  deviceSnapshotStream,
  passedSnapshotPoint,
} from '../../src/commands/snapshots';
import { DomainError } from '../../src/domain/errors';
import { deviceDecider, type DeviceCommand, type DeviceState } from '../../src/domain/device';
import { deviceStream, STREAM_PREFIXES } from '../../src/domain/events';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import type { EventStore, RecordedEvent } from '../../src/infra/eventstore/port';
import { ERASED } from '../../src/privacy/personal-fields';
import { createPrivateEventStore } from '../../src/privacy/event-store';
import { instrumentEventStore } from '../../src/infra/eventstore/instrumented';
import { Histogram } from 'prom-client';
import { deviceSubject } from '../../src/privacy/keyring';
import { mulberry32 } from '../support/prng';
import { manualClock } from '../support/manual-clock';
import { countingReads, wrapStore } from '../support/stream-reads';
import { privateEventStoreEachTest } from '../support/private-event-store';

/**
 * Device snapshots (src/commands/snapshots.ts): a fold that starts from the newest snapshot of
 * a device stream and reads the events after it is the fold of the whole stream, for every
 * command the device decider knows; it reads fewer than twice `every` events however long the
 * stream is, and a stream shorter than `every` is read in one call, as without snapshots.
 */

const fixture = privateEventStoreEachTest('hhc-snapshots-', (dir) => openEmbeddedEventStore(dir));

const T0 = Date.parse('2026-11-28T08:00:00.000Z');

const fullFold = (store: EventStore, uuid: string): Promise<{ state: DeviceState; revision: bigint }> =>
  loadAggregate(store, deviceDecider.evolve, deviceDecider.initialState, deviceStream(uuid));

const snapshotFold = (store: EventStore, uuid: string, every: number): Promise<{ state: DeviceState; revision: bigint }> =>
  loadAggregate(store, deviceDecider.evolve, deviceDecider.initialState, deviceStream(uuid), undefined, createDeviceSnapshots(store, every));

/** A random device command (most of them valid, some refused by the decider: a refusal appends nothing). */
function randomCommand(random: () => number, uuid: string, users: readonly string[], clock: ReturnType<typeof manualClock>, lastBeat: Map<string, string>): DeviceCommand {
  const now = clock.advance(1 + Math.floor(random() * 400));
  const user = users[Math.floor(random() * users.length)] ?? '';
  const other = users[Math.floor(random() * users.length)] ?? '';
  const pick = random();
  if (pick < 0.06) {
    return {
      type: 'RegisterDevice',
      data: { id: randomUUID(), uuid, deviceId: `HUB-${uuid.slice(0, 4)}`, name: `Hub ${Math.floor(random() * 100)}`, ipAddress: '10.0.0.1', metadata: { room: 'hall' }, actorUserId: user, linkId: randomUUID(), ownedDeviceCount: 0, maxDevicesPerUser: 100, now },
    };
  }
  if (pick < 0.14) return { type: 'LinkUser', data: { uuid, actorUserId: user, targetUserId: other, role: random() < 0.5 ? 'editor' : 'viewer', linkId: randomUUID(), now } };
  if (pick < 0.18) return { type: 'UnlinkUser', data: { uuid, actorUserId: user, targetUserId: other, now } };
  if (pick < 0.24) return { type: 'UpdateDevice', data: { uuid, actorUserId: user, changes: { name: `Renamed ${Math.floor(random() * 1000)}` }, now } };
  if (pick < 0.28) return { type: 'IssueDeviceToken', data: { uuid, actorUserId: user, now } };
  if (pick < 0.3) return { type: 'DeleteDevice', data: { uuid, actorUserId: user, now } };
  if (pick < 0.62) {
    lastBeat.set(uuid, now);
    const beat: DeviceCommand = { type: 'RecordHeartbeat', data: { uuid, tokenGen: Math.floor(random() * 3), now } };
    return random() < 0.3 ? { ...beat, data: { ...beat.data, ipAddress: `10.0.0.${Math.floor(random() * 4)}` } } : beat;
  }
  if (pick < 0.92) return { type: 'MarkOffline', data: { uuid, lastHeartbeatAt: lastBeat.get(uuid) ?? null, offlineAfterSeconds: 300, now } };
  return { type: 'ConfirmPresence', data: { uuid, heartbeatAt: now, now } };
}

describe('device snapshots', () => {
  test('a snapshot is due each time an append passes a multiple of `every` events', () => {
    expect(passedSnapshotPoint(-1n, 0n, 4)).toBe(false);
    expect(passedSnapshotPoint(-1n, 3n, 4)).toBe(true);
    expect(passedSnapshotPoint(2n, 3n, 4)).toBe(true);
    expect(passedSnapshotPoint(3n, 6n, 4)).toBe(false);
    expect(passedSnapshotPoint(6n, 8n, 4)).toBe(true);
    expect(passedSnapshotPoint(-1n, 1n, 2)).toBe(true);
  });

  test.each([
    [1, true],
    [2, true],
    [3, false],
    [4, false],
    [5, true],
    [6, false],
  ])(
    'seed %i (store knows stream lengths: %s): every fold from the newest snapshot is the fold of the whole stream; it reads fewer than `every` events past the snapshot (twice that when it must read to learn a stream is long), a short stream in one call',
    async (seed, knowsLength) => {
      const random = mulberry32(seed);
      const every = 2 + (seed % 3);
      const clock = manualClock(T0);
      const { store, read, calls } = countingReads(fixture.store, knowsLength);
      const snapshots = createDeviceSnapshots(store, every);
      const devices = [randomUUID(), randomUUID()];
      const users = [randomUUID(), randomUUID(), randomUUID()];
      const lastBeat = new Map<string, string>();
      let written = 0;
      for (const uuid of devices) {
        await handleCommand(store, deviceDecider, deviceStream(uuid), randomCommand(() => 0, uuid, users, clock, lastBeat), newCommandContext({ type: 'user', id: users[0] ?? '' }, randomUUID()), clock, { snapshots });
      }
      for (let step = 0; step < 160; step++) {
        const uuid = devices[Math.floor(random() * devices.length)] ?? '';
        const command = randomCommand(random, uuid, users, clock, lastBeat);
        const actor = 'actorUserId' in command.data ? command.data.actorUserId : 'expiry';
        try {
          await handleCommand(store, deviceDecider, deviceStream(uuid), command, newCommandContext({ type: 'user', id: actor }, randomUUID()), clock, { snapshots });
        } catch (error) {
          if (!(error instanceof DomainError)) throw error;
        }
        const whole = await fullFold(store, uuid);
        read.clear();
        calls.clear();
        const fromSnapshot = await snapshotFold(store, uuid, every);
        expect(fromSnapshot.revision).toBe(whole.revision);
        expect(fromSnapshot.state).toEqual(whole.state);
        expect(read.get(deviceStream(uuid)) ?? 0).toBeLessThan(knowsLength ? every : 2 * every);
        // Shorter than `every`: one read, as without snapshots, and no snapshot asked for.
        if (whole.revision + 1n < BigInt(every)) expect([...calls]).toEqual([[deviceStream(uuid), 1]]);
        else expect(calls.get(deviceSnapshotStream(uuid))).toBe(1);
        written = 0;
        for (const d of devices) for await (const _ of fixture.store.readStream(deviceSnapshotStream(d))) written++;
      }
      // The workload went far past `every` events: the snapshots were written, and were used.
      const revisions = await Promise.all(devices.map(async (d) => (await fullFold(store, d)).revision));
      expect(revisions.every((r) => r >= BigInt(4 * every))).toBe(true);
      expect(written).toBeGreaterThanOrEqual(revisions.reduce((sum, r) => sum + Number((r + 1n) / BigInt(every)), 0) - devices.length);
    },
  );

  test('the personal fields are sealed in the stored snapshot; once the device key is destroyed they read "[erased]", as in its events', async () => {
    const clock = manualClock(T0);
    const snapshots = createDeviceSnapshots(fixture.store, 2);
    const uuid = randomUUID();
    const owner = randomUUID();
    const ctx = (): ReturnType<typeof newCommandContext> => newCommandContext({ type: 'user', id: owner }, randomUUID());
    const run = (command: DeviceCommand): Promise<unknown> => handleCommand(fixture.store, deviceDecider, deviceStream(uuid), command, ctx(), clock, { snapshots });
    await run({
      type: 'RegisterDevice',
      data: { id: randomUUID(), uuid, deviceId: 'HUB-SEALED', name: 'Kitchen of Alice Example', ipAddress: '203.0.113.77', metadata: { household: 'the Examples' }, actorUserId: owner, linkId: randomUUID(), ownedDeviceCount: 0, maxDevicesPerUser: 10, now: clock.advance(1) },
    });
    await run({ type: 'RecordHeartbeat', data: { uuid, tokenGen: 0, now: clock.advance(1) } });

    const stored: RecordedEvent[] = [];
    for await (const event of fixture.raw.readStream(deviceSnapshotStream(uuid))) stored.push(event);
    expect(stored.length).toBeGreaterThanOrEqual(1);
    const raw = JSON.stringify(stored.map((e) => e.data));
    for (const secret of ['Kitchen of Alice Example', '203.0.113.77', 'the Examples']) expect(raw).not.toContain(secret);
    expect((await snapshotFold(fixture.store, uuid, 2)).state).toEqual((await fullFold(fixture.store, uuid)).state);

    await fixture.keyring.destroy([deviceSubject(uuid)]);
    const whole = await fullFold(fixture.store, uuid);
    const fromSnapshot = await snapshotFold(fixture.store, uuid, 2);
    expect(whole.state.status === 'active' && whole.state.name).toBe(ERASED);
    expect(fromSnapshot).toEqual(whole);
  });

  test('a snapshot of another format, of another device or not a snapshot is ignored: the fold reads the whole stream', async () => {
    const clock = manualClock(T0);
    const uuid = randomUUID();
    const owner = randomUUID();
    const ctx = newCommandContext({ type: 'user', id: owner }, randomUUID());
    await handleCommand(fixture.store, deviceDecider, deviceStream(uuid), {
      type: 'RegisterDevice',
      data: { id: randomUUID(), uuid, deviceId: 'HUB-1', name: 'Hub', actorUserId: owner, linkId: randomUUID(), ownedDeviceCount: 0, maxDevicesPerUser: 10, now: clock.advance(1) },
    }, ctx, clock);
    const whole = await fullFold(fixture.store, uuid);
    const metadata = { occurredAt: clock.advance(1), actor: { type: 'system' as const, id: 'test' }, requestId: 'r', causationId: 'c', correlationId: 'r' };
    const lying: DeviceState = whole.state.status === 'active' ? { ...whole.state, gen: 99 } : whole.state;
    // A snapshot is sealed only under a key its device has (none is made for a copy).
    const other = randomUUID();
    await fixture.keyring.keyFor(deviceSubject(other));
    const bad: Array<{ type: string; data: Record<string, unknown> }> = [
      { type: DEVICE_SNAPSHOT_EVENT, data: { uuid, revision: 1, format: DEVICE_SNAPSHOT_FORMAT + 1, state: lying } },
      { type: DEVICE_SNAPSHOT_EVENT, data: { uuid: other, revision: 1, format: DEVICE_SNAPSHOT_FORMAT, state: lying } },
      { type: DEVICE_SNAPSHOT_EVENT, data: { uuid, revision: -1, format: DEVICE_SNAPSHOT_FORMAT, state: lying } },
      { type: DEVICE_SNAPSHOT_EVENT, data: { uuid, revision: 1, format: DEVICE_SNAPSHOT_FORMAT, state: { status: 'none' } } },
      { type: 'SomethingElse', data: { uuid, revision: 1, format: DEVICE_SNAPSHOT_FORMAT, state: lying } },
    ];
    for (const { type, data } of bad) {
      await fixture.store.append(deviceSnapshotStream(uuid), [{ id: randomUUID(), type, data, metadata }], 'any');
      expect(await snapshotFold(fixture.store, uuid, 2)).toEqual(whole);
    }
  });

  test('a snapshot that cannot be written loses nothing: the command succeeds and the next fold reads the stream', async () => {
    const clock = manualClock(T0);
    const failing = wrapStore(fixture.store, {
      append: async (streamName, events, expected) => {
        if (streamName.startsWith(DEVICE_SNAPSHOT_PREFIX)) throw new Error('disk full');
        return fixture.store.append(streamName, events, expected);
      },
    });
    const snapshots = createDeviceSnapshots(failing, 2);
    const uuid = randomUUID();
    const owner = randomUUID();
    const result = await handleCommand(failing, deviceDecider, deviceStream(uuid), {
      type: 'RegisterDevice',
      data: { id: randomUUID(), uuid, deviceId: 'HUB-2', name: 'Hub', actorUserId: owner, linkId: randomUUID(), ownedDeviceCount: 0, maxDevicesPerUser: 10, now: clock.advance(1) },
    }, newCommandContext({ type: 'user', id: owner }, randomUUID()), clock, { snapshots });
    expect(result.events.map((e) => e.type)).toEqual(['DeviceRegistered', 'UserLinked']);
    let count = 0;
    for await (const _ of fixture.store.readStream(deviceSnapshotStream(uuid))) count++;
    expect(count).toBe(0);
    const folded: FoldedStream<DeviceState> = await snapshotFold(fixture.store, uuid, 2);
    expect(folded).toEqual(await fullFold(fixture.store, uuid));
  });

  test("the service's wrappers of the embedded log (metrics, privacy) pass on its stream lengths, which count durable events", async () => {
    const instrumented = instrumentEventStore(fixture.raw, { appendSeconds: new Histogram({ name: 'review_append_seconds', help: 'test', registers: [] }) });
    const wrapped = createPrivateEventStore(instrumented, { keyring: fixture.keyring });
    const uuid = randomUUID();
    const metadata = { occurredAt: new Date(T0).toISOString(), actor: { type: 'system' as const, id: 'test' }, requestId: 'r', causationId: 'c', correlationId: 'r' };
    for (const store of [fixture.raw, instrumented, wrapped, fixture.store]) expect(store.streamEnd?.(deviceStream(uuid))).toBe(0);
    await wrapped.append(deviceStream(uuid), [1, 2, 3].map(() => ({ id: randomUUID(), type: 'DeviceTokenIssued', data: { uuid, gen: 1, issuedAt: metadata.occurredAt }, metadata })), 'any');
    for (const store of [fixture.raw, instrumented, wrapped, fixture.store]) expect(store.streamEnd?.(deviceStream(uuid))).toBe(3);
  });

  test('snapshot streams are outside every prefix the projections, feeds and audits read', () => {
    const name = deviceSnapshotStream(randomUUID());
    for (const prefix of Object.values(STREAM_PREFIXES)) expect(name.startsWith(prefix)).toBe(false);
  });
});
