import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { Histogram } from 'prom-client';
import { foldStream, handleCommand, newCommandContext, toNewEvents, type FoldedStream } from '../../src/commands/handler';
import { createDeviceSnapshots, deviceSnapshotStream, type SnapshotStore } from '../../src/commands/snapshots';
import { deviceDecider, type DeviceCommand, type DeviceState } from '../../src/domain/device';
import { DomainError } from '../../src/domain/errors';
import { deviceStream } from '../../src/domain/events';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import { instrumentEventStore } from '../../src/infra/eventstore/instrumented';
import type { EventStore } from '../../src/infra/eventstore/port';
import { privateEventStoreEachTest } from '../support/private-event-store';
import { mulberry32 } from '../support/prng';
import { manualClock } from '../support/manual-clock';
import { countingReads } from '../support/stream-reads';

/**
 * Review of `streamEnd` (the embedded log's stream length from its index) and of `foldStream`'s
 * use of it: whatever the store knows of a stream's length, and whichever snapshot is the
 * newest (none, one behind the first events, one ahead, any older one), a device stream folds
 * to the state and revision of reading it whole; `streamEnd` agrees with what a read yields
 * (appends in flight, reclaimed heartbeats, system streams, a closed store) and survives the
 * wrappers the service puts around the log.
 */

const fixture = privateEventStoreEachTest('hhc-stream-end-', (dir) => openEmbeddedEventStore(dir, { reclaimIntervalMs: 0 }));

const T0 = Date.parse('2026-11-28T08:00:00.000Z');
/** The store as the embedded service composes it: privacy over metrics over the log. */
function composed(): EventStore {
  const appendSeconds = new Histogram({ name: `review_stream_end_${randomUUID().replace(/-/g, '')}`, help: 'review', registers: [] });
  return instrumentEventStore(fixture.store, { appendSeconds });
}

async function countOf(store: EventStore, stream: string): Promise<number> {
  let n = 0;
  for await (const _ of store.readStream(stream)) n++;
  return n;
}

async function lastRevisionOf(store: EventStore, stream: string): Promise<number> {
  let last = -1;
  for await (const event of store.readStream(stream, { direction: 'backwards', maxCount: 1 })) last = Number(event.revision);
  return last;
}

const whole = (store: EventStore, stream: string): Promise<FoldedStream<DeviceState>> => foldStream(store, deviceDecider, stream);

function randomCommand(random: () => number, uuid: string, owner: string, clock: ReturnType<typeof manualClock>, lastBeat: { at: string | null }): DeviceCommand {
  const now = clock.advance(1 + Math.floor(random() * 400));
  const pick = random();
  if (pick < 0.1) return { type: 'UpdateDevice', data: { uuid, actorUserId: owner, changes: { name: `Hub ${Math.floor(random() * 1000)}` }, now } };
  if (pick < 0.15) return { type: 'IssueDeviceToken', data: { uuid, actorUserId: owner, now } };
  if (pick < 0.6) {
    lastBeat.at = now;
    return { type: 'RecordHeartbeat', data: { uuid, tokenGen: 0, ...(random() < 0.4 ? { ipAddress: `10.0.0.${Math.floor(random() * 9)}` } : {}), now } };
  }
  if (pick < 0.9) return { type: 'MarkOffline', data: { uuid, lastHeartbeatAt: lastBeat.at, offlineAfterSeconds: 300, now } };
  return { type: 'ConfirmPresence', data: { uuid, heartbeatAt: now, now } };
}

/** A device stream of about `commands` commands, written through the command handler with device snapshots every 8 events. */
async function deviceWithHistory(store: EventStore, seed: number, commands: number): Promise<string> {
  const random = mulberry32(seed);
  const clock = manualClock(T0);
  const uuid = randomUUID();
  const owner = randomUUID();
  const snapshots = createDeviceSnapshots(store, 8, fixture.keyring);
  const ctx = (): ReturnType<typeof newCommandContext> => newCommandContext({ type: 'user', id: owner }, randomUUID());
  await handleCommand(store, deviceDecider, deviceStream(uuid), {
    type: 'RegisterDevice',
    data: { id: randomUUID(), uuid, deviceId: `HUB-${seed}`, name: 'Hall', ipAddress: '10.0.0.1', metadata: { room: 'hall' }, actorUserId: owner, linkId: randomUUID(), ownedDeviceCount: 0, maxDevicesPerUser: 10, now: clock.advance(1) },
  }, ctx(), clock, { snapshots });
  const lastBeat = { at: null as string | null };
  for (let i = 0; i < commands; i++) {
    try {
      await handleCommand(store, deviceDecider, deviceStream(uuid), randomCommand(random, uuid, owner, clock, lastBeat), ctx(), clock, { snapshots });
    } catch (error) {
      if (!(error instanceof DomainError)) throw error;
    }
  }
  return uuid;
}

/** Every snapshot the device's snapshot stream holds, oldest first, as its loader decodes them. */
async function allSnapshots(store: EventStore, uuid: string): Promise<Array<FoldedStream<DeviceState>>> {
  const real = createDeviceSnapshots(store, 8);
  const found: Array<FoldedStream<DeviceState>> = [];
  const count = await countOf(store, deviceSnapshotStream(uuid));
  for (let r = 0; r < count; r++) {
    // One snapshot at a time: a store whose snapshot stream ends at revision r.
    const upTo: EventStore = {
      ...store,
      readStream: (name, options) => (name === deviceSnapshotStream(uuid) ? store.readStream(name, { ...options, fromRevision: BigInt(r), direction: 'backwards', maxCount: 1 }) : store.readStream(name, options)),
    };
    const loaded = await createDeviceSnapshots(upTo, 8).load(deviceStream(uuid));
    if (loaded !== null) found.push(loaded);
  }
  expect(await real.load(deviceStream(uuid))).toEqual(found[found.length - 1] ?? null);
  return found;
}

const fixed = (newest: FoldedStream<DeviceState> | null): SnapshotStore<DeviceState> => ({ every: 8, load: async () => newest, save: async () => undefined });

describe('streamEnd and foldStream', () => {
  test.each([
    [1, 3],
    [2, 9],
    [3, 40],
    [4, 90],
  ])('seed %i, %i commands: with and without streamEnd, from every snapshot or none, a device stream folds as read whole', async (seed, commands) => {
    const store = composed();
    const uuid = await deviceWithHistory(store, seed, commands);
    const stream = deviceStream(uuid);
    const expected = await whole(store, stream);
    // The wrappers pass streamEnd on, bound to the log, and it is the stream's length.
    expect(typeof store.streamEnd).toBe('function');
    const { streamEnd } = store;
    expect(streamEnd?.(stream)).toBe(Number(expected.revision) + 1);
    expect(streamEnd?.(stream)).toBe(await countOf(store, stream));

    const snapshots = await allSnapshots(store, uuid);
    if (expected.revision >= 7n) expect(snapshots.length).toBeGreaterThan(0);
    const candidates: Array<SnapshotStore<DeviceState>> = [createDeviceSnapshots(store, 8), fixed(null), ...snapshots.map(fixed)];
    for (const knowsLength of [true, false]) {
      const { store: counted } = countingReads(store, knowsLength);
      expect(counted.streamEnd !== undefined).toBe(knowsLength);
      for (const candidate of candidates) {
        const folded = await foldStream(counted, deviceDecider, stream, { snapshots: candidate });
        expect(folded.revision).toBe(expected.revision);
        expect(folded.state).toEqual(expected.state);
      }
    }
  });

  test('appends in flight: streamEnd counts only what a read yields, and a fold during them is the fold of a prefix', async () => {
    const store = composed();
    const uuid = await deviceWithHistory(store, 7, 20);
    const stream = deviceStream(uuid);
    const before = store.streamEnd?.(stream) ?? -1;
    const ctx = newCommandContext({ type: 'system', id: 'review' }, randomUUID());
    const beat = { type: 'Noted', data: {} };
    // Appends to an unrelated stream and to the device's own, not awaited: reserved, not yet durable.
    const pending = Array.from({ length: 12 }, (_, i) => store.append(i % 2 === 0 ? `review-${uuid}` : `review-other-${uuid}`, toNewEvents([beat as never], ctx, new Date().toISOString()), 'any'));
    expect(store.streamEnd?.(`review-${uuid}`)).toBe(0);
    expect(store.streamEnd?.(stream)).toBe(before);
    const during = await foldStream(store, deviceDecider, stream, { snapshots: createDeviceSnapshots(store, 8) });
    await Promise.all(pending);
    expect(store.streamEnd?.(`review-${uuid}`)).toBe(6);
    expect(during).toEqual(await whole(store, stream));
  });

  test('a concurrent command on the device during a cold fold: the fold is the whole fold at some revision', async () => {
    const store = composed();
    const uuid = await deviceWithHistory(store, 8, 30);
    const stream = deviceStream(uuid);
    const clock = manualClock(T0);
    clock.advance(100_000);
    const snapshots = createDeviceSnapshots(store, 8, fixture.keyring);
    const folds = Array.from({ length: 6 }, () => foldStream(store, deviceDecider, stream, { snapshots }));
    const before = store.streamEnd?.(stream) ?? 0;
    const presence = (i: number): DeviceCommand => {
      const now = clock.advance(1);
      return i % 2 === 0 ? { type: 'MarkOffline', data: { uuid, lastHeartbeatAt: null, offlineAfterSeconds: 300, now } } : { type: 'ConfirmPresence', data: { uuid, heartbeatAt: now, now } };
    };
    const writes = Array.from({ length: 6 }, (_, i) =>
      handleCommand(store, deviceDecider, stream, presence(i), newCommandContext({ type: 'system', id: 'r' }, randomUUID()), clock, { snapshots }).catch((e: unknown) => {
        if (!(e instanceof DomainError)) throw e;
      }),
    );
    const results = await Promise.all(folds);
    await Promise.all(writes);
    expect(store.streamEnd?.(stream)).toBeGreaterThan(before);
    expect(await whole(store, stream)).toEqual(await foldStream(store, deviceDecider, stream, { snapshots }));
    for (const folded of results) {
      // The same revision read whole, from a store cut there.
      let state = deviceDecider.initialState();
      for await (const e of store.readStream(stream)) {
        if (e.revision > folded.revision) break;
        state = deviceDecider.evolve(state, { type: e.type, data: e.data } as never);
      }
      expect(folded.state).toEqual(state);
    }
  });

  test('system streams and streams never written: streamEnd is what a read yields, and looking does not create the stream', async () => {
    const store = composed();
    const heartbeats = `heartbeat-${randomUUID()}`;
    await store.setStreamMaxAge(heartbeats, 60);
    const meta = `$$${heartbeats}`;
    expect(store.streamEnd?.(meta)).toBe(await countOf(fixture.raw, meta));
    expect(store.streamEnd?.(meta)).toBeGreaterThan(0);
    const unknown = `device-${randomUUID()}`;
    expect(store.streamEnd?.(unknown)).toBe(0);
    expect(await foldStream(store, deviceDecider, unknown, { snapshots: createDeviceSnapshots(store, 8) })).toEqual({ state: deviceDecider.initialState(), revision: -1n });
    expect(store.streamEnd?.(unknown)).toBe(0);
  });

  test('a closed store: a cold fold of a long stream fails as it does without streamEnd, not with a stale snapshot', async () => {
    const store = composed();
    const uuid = await deviceWithHistory(store, 9, 30);
    const stream = deviceStream(uuid);
    const snapshots = createDeviceSnapshots(store, 8);
    await fixture.raw.close();
    await expect(foldStream(store, deviceDecider, stream, { snapshots })).rejects.toThrow('closed');
    await expect(foldStream(countingReads(store, false).store, deviceDecider, stream, { snapshots })).rejects.toThrow('closed');
    // afterEach closes it again: opened anew so that the fixture's close has a store to close.
    fixture.raw = await openEmbeddedEventStore(fixture.dir, { reclaimIntervalMs: 0 });
  });
});

describe('streamEnd of a heartbeat stream whose oldest events were reclaimed', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'hhc-stream-end-reclaim-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  test('firstRevision above 0: streamEnd is the revision after the newest event, before and after a reopen', async () => {
    const clock = { now: T0 };
    const options = { now: () => clock.now, segmentBytes: 800, reclaimIntervalMs: 0 };
    const store = await openEmbeddedEventStore(dir, options);
    const stream = `heartbeat-${randomUUID()}`;
    await store.setStreamMaxAge(stream, 60);
    const ctx = newCommandContext({ type: 'system', id: 'review' }, randomUUID());
    const event = { type: 'HeartbeatReceived', data: { at: 'x' } };
    for (let i = 0; i < 30; i++) await store.append(stream, toNewEvents([event as never], ctx, new Date(clock.now).toISOString()), 'any');
    clock.now += 3_600_000;
    for (let i = 0; i < 10; i++) await store.append(stream, toNewEvents([event as never], ctx, new Date(clock.now).toISOString()), 'any');
    for (let i = 0; i < 10; i++) await store.append(`filler-${i}`, toNewEvents([event as never], ctx, new Date(clock.now).toISOString()), 'any');
    const result = await store.reclaimExpired();
    expect(result.eventsReclaimed).toBeGreaterThan(0);
    const check = async (s: EventStore): Promise<void> => {
      expect(s.streamEnd?.(stream)).toBe(40);
      expect(s.streamEnd?.(stream)).toBe((await lastRevisionOf(s, stream)) + 1);
      // Fewer events than the end says are left to read: the oldest are gone, their revisions are not reused.
      expect(await countOf(s, stream)).toBeLessThan(40);
    };
    await check(store);
    await store.close();
    const reopened = await openEmbeddedEventStore(dir, options);
    try {
      await check(reopened);
    } finally {
      await reopened.close();
    }
  });
});
