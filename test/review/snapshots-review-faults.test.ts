import { randomUUID } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createDeviceCommands, type DeviceCommands } from '../../src/commands/devices';
import { createStateCache, handleCommand, loadAggregate, newCommandContext, type Clock } from '../../src/commands/handler';
import { createPresenceCommands } from '../../src/commands/presence';
import { createDeviceSnapshots, deviceSnapshotStream } from '../../src/commands/snapshots';
import { deviceDecider, type DeviceState } from '../../src/domain/device';
import { deviceStream } from '../../src/domain/events';
import { openFileCredentialStore } from '../../src/infra/credentials/file';
import type { CredentialStore } from '../../src/infra/credentials/port';
import { openEmbeddedEventStore, type EmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import type { EventStore } from '../../src/infra/eventstore/port';
import { createMemoryReadStore } from '../../src/infra/readstore/memory';
import { derivePrivacyKeys } from '../../src/privacy/crypto';
import { createPrivateEventStore } from '../../src/privacy/event-store';
import { createKeyring, type Keyring } from '../../src/privacy/keyring';
import type { Watermark } from '../../src/projections/watermark';

/**
 * Device snapshots under faults, from outside: the key store away when a snapshot is due; the
 * log reclaimed (compacted) with snapshot records in its sealed segments, then reopened; a
 * snapshot record damaged on disk.
 */

const KEK = derivePrivacyKeys('f'.repeat(40)).keyEncryptionKey;
const T0 = Date.parse('2026-11-28T08:00:00.000Z');
const noWait: Watermark = { advance: () => undefined, waitFor: async () => true, current: () => null, close: async () => undefined };

const wholeFold = (store: EventStore, uuid: string): Promise<{ state: DeviceState; revision: bigint }> =>
  loadAggregate(store, deviceDecider.evolve, deviceDecider.initialState, deviceStream(uuid));
const coldFold = (store: EventStore, uuid: string, every?: number): Promise<{ state: DeviceState; revision: bigint }> =>
  loadAggregate(store, deviceDecider.evolve, deviceDecider.initialState, deviceStream(uuid), undefined, createDeviceSnapshots(store, every));

async function count(store: EventStore, stream: string): Promise<number> {
  let n = 0;
  for await (const _ of store.readStream(stream)) n++;
  return n;
}

describe('device snapshots under faults', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'hhc-review-snap-faults-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  test('the key store away when a snapshot is due: the command answers, no snapshot is written, the key store is asked once', async () => {
    const raw = await openEmbeddedEventStore(dir);
    const file = await openFileCredentialStore(dir);
    let away = false;
    let asked = 0;
    const credentials: CredentialStore = {
      ...file,
      getDataKey: async (subject) => {
        if (!away) return file.getDataKey(subject);
        asked++;
        throw new Error('key store unreachable');
      },
      putDataKey: (s, k) => file.putDataKey(s, k),
      forget: (what) => file.forget(what),
      put: (u, v, h) => file.put(u, v, h),
      get: (u, v) => file.get(u, v),
      ping: () => file.ping(),
      close: () => file.close(),
    };
    let keyringNow = T0;
    const keyring = createKeyring(credentials, KEK, () => keyringNow);
    const store = createPrivateEventStore(raw, { keyring });
    try {
      let now = T0;
      const clock: Clock = { now: () => new Date(now) };
      const at = (): string => new Date((now += 1000)).toISOString();
      const uuid = randomUUID();
      const owner = randomUUID();
      const cache = createStateCache<DeviceState>(10);
      const snapshots = createDeviceSnapshots(store, 4, keyring);
      const ctx = newCommandContext({ type: 'user', id: owner }, randomUUID());
      await handleCommand(store, deviceDecider, deviceStream(uuid), {
        type: 'RegisterDevice',
        data: { id: randomUUID(), uuid, deviceId: 'HUB-AWAY', name: 'Hub', ipAddress: '10.0.0.1', actorUserId: owner, linkId: randomUUID(), ownedDeviceCount: 0, maxDevicesPerUser: 10, now: at() },
      }, ctx, clock, { cache, snapshots });
      await handleCommand(store, deviceDecider, deviceStream(uuid), { type: 'IssueDeviceToken', data: { uuid, actorUserId: owner, now: at() } }, ctx, clock, { cache, snapshots });
      keyringNow += 60_000;
      away = true;
      const beat = await handleCommand(store, deviceDecider, deviceStream(uuid), { type: 'RecordHeartbeat', data: { uuid, tokenGen: 1, now: at() } }, ctx, clock, { cache, snapshots });
      expect(beat.events.map((e) => e.type)).toEqual(['DeviceWentOnline']);
      // Asked once (before the append), not once more to seal a snapshot it already knew it could not seal.
      expect(asked).toBe(1);
      away = false;
      expect(await count(raw, deviceSnapshotStream(uuid))).toBe(0);
      expect(await coldFold(store, uuid, 4)).toEqual(await wholeFold(store, uuid));
    } finally {
      await raw.close();
      await credentials.close();
    }
  });

  describe('an aged device in a log with small segments', () => {
    let now = T0;
    const clock: Clock = { now: () => new Date(now) };
    const uuid = randomUUID();
    let raw: EmbeddedEventStore;
    let credentials: CredentialStore;
    let keyring: Keyring;
    let store: EventStore;

    const open = async (): Promise<void> => {
      raw = await openEmbeddedEventStore(dir, { now: () => now, segmentBytes: 16 * 1024, reclaimIntervalMs: 0 });
      credentials = await openFileCredentialStore(dir);
      keyring = createKeyring(credentials, KEK);
      store = createPrivateEventStore(raw, { keyring });
    };
    const close = async (): Promise<void> => {
      await raw.close();
      await credentials.close();
    };

    /** A week of outages: each a heartbeat (online) and, five minutes later, the expiry (offline). */
    const age = async (): Promise<void> => {
      const devicesOn = (): DeviceCommands =>
        createDeviceCommands({ eventStore: store, readStore: createMemoryReadStore(), watermark: noWait, clock, readYourWritesTimeoutMs: 1, maxDevicesPerUser: 10, heartbeatRetentionSeconds: 3600, keyring });
      const devices = devicesOn();
      const presence = createPresenceCommands({ eventStore: store, clock, offlineAfterSeconds: 300, keyring });
      const owner = newCommandContext({ type: 'user', id: 'owner-faults' }, randomUUID());
      await devices.register({ uuid, deviceId: 'HUB-FAULTS', name: 'Faults hub', ipAddress: '10.9.9.9', metadata: { floor: 2 } }, owner);
      await devices.issueToken(uuid, owner);
      for (let i = 0; i < 60; i++) {
        now += 3_600_000;
        await devices.heartbeat(uuid, 1, i % 5 === 0 ? { ipAddress: `10.9.9.${i}` } : {}, newCommandContext({ type: 'device', id: uuid }, randomUUID()));
        now += 301_000;
        expect(await presence.expire(uuid)).toEqual({ kind: 'offline' });
      }
    };

    beforeEach(async () => {
      now = T0;
      await open();
      await age();
    });
    afterEach(async () => {
      await close().catch(() => undefined);
    });

    test('reclaimed and reopened: every snapshot record is kept and opens; the cold fold is the fold of the whole stream', async () => {
      const snapshots = await count(store, deviceSnapshotStream(uuid));
      const events = await count(store, deviceStream(uuid));
      expect(snapshots).toBeGreaterThanOrEqual(10);
      now += 7 * 24 * 3_600_000;
      const reclaimed = await raw.reclaimExpired();
      expect(reclaimed.eventsReclaimed).toBeGreaterThan(0);
      expect(reclaimed.segmentsCompacted).toBeGreaterThan(0);
      await close();
      await open();
      expect(await count(store, deviceSnapshotStream(uuid))).toBe(snapshots);
      expect(await count(store, deviceStream(uuid))).toBe(events);
      for await (const snapshot of store.readStream(deviceSnapshotStream(uuid))) expect(snapshot.data).toMatchObject({ state: { name: 'Faults hub', metadata: { floor: 2 } } });
      expect(await coldFold(store, uuid)).toEqual(await wholeFold(store, uuid));
    });

    test('a snapshot record damaged on disk: the device is still folded (from the log, the snapshot being a cache)', async () => {
      // The newest snapshot's sealed box, as stored: find it in the segment files and damage one byte of it.
      let box = '';
      for await (const snapshot of store.readStream(deviceSnapshotStream(uuid), { sealed: true, direction: 'backwards', maxCount: 1 })) {
        box = ((snapshot.data as { $pii: { c: string } }).$pii.c).slice(8, 40);
      }
      expect(box.length).toBeGreaterThan(0);
      const whole = await wholeFold(store, uuid);
      await close();
      const segments = readdirSync(dir).map((name) => join(dir, name)).filter((path) => readFileSync(path).includes(box));
      expect(segments).toHaveLength(1);
      const bytes = readFileSync(segments[0] as string);
      const at = bytes.indexOf(box);
      bytes[at] = bytes[at] === 0x41 ? 0x42 : 0x41;
      writeFileSync(segments[0] as string, bytes);

      await open();
      // The device stream itself is intact: the whole fold still reads.
      expect(await wholeFold(store, uuid)).toEqual(whole);
      expect(await coldFold(store, uuid)).toEqual(whole);
    });
  });
});
