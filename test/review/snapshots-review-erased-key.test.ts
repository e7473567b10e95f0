import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createStateCache, handleCommand, loadAggregate, newCommandContext, type Clock, type HandledCommand } from '../../src/commands/handler';
import { createDeviceSnapshots, deviceSnapshotStream } from '../../src/commands/snapshots';
import { deviceDecider, type DeviceCommand, type DeviceEvent, type DeviceState } from '../../src/domain/device';
import { deviceStream } from '../../src/domain/events';
import { openFileCredentialStore } from '../../src/infra/credentials/file';
import type { CredentialStore } from '../../src/infra/credentials/port';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import type { EventStore } from '../../src/infra/eventstore/port';
import { derivePrivacyKeys } from '../../src/privacy/crypto';
import { createPrivateEventStore } from '../../src/privacy/event-store';
import { createKeyring, deviceSubject } from '../../src/privacy/keyring';
import { ERASED } from '../../src/privacy/personal-fields';
import { wrapStore } from '../support/stream-reads';

/**
 * A snapshot is sealed after the command's append, with no expected revision: between the two,
 * an erasure in another request (or process) may delete the device and destroy its data key.
 * A device subject keeps no tombstone, so sealing then must not make a new key for it: the
 * household's name, address and metadata would be kept under a key no erasure destroys
 * (decisions §11: nothing readable after the erasure). Here the gap is a key lookup that
 * answers late (the key had left this process's cache: a credential store read).
 */

const KEK = derivePrivacyKeys('r'.repeat(40)).keyEncryptionKey;
const NAME = 'Snapshot race attic of Ida Example';
const IP = '203.0.113.199';
const PLAN = 'ida-floorplan-snapshot-race';

/** A credential store whose next lookup of `subject` waits until released, once armed. */
function gatedCredentials(inner: CredentialStore): CredentialStore & { arm(subject: string): Promise<void>; release(): void } {
  let armed: string | null = null;
  let reached: () => void = () => undefined;
  let open: () => void = () => undefined;
  return {
    ...inner,
    put: (u, v, h) => inner.put(u, v, h),
    get: (u, v) => inner.get(u, v),
    putDataKey: (s, k) => inner.putDataKey(s, k),
    forget: (what) => inner.forget(what),
    ping: () => inner.ping(),
    close: () => inner.close(),
    async getDataKey(subject) {
      if (armed === subject) {
        armed = null;
        const gate = new Promise<void>((resolve) => (open = resolve));
        reached();
        await gate;
      }
      return inner.getDataKey(subject);
    },
    arm(subject) {
      armed = subject;
      return new Promise<void>((resolve) => (reached = resolve));
    },
    release: () => open(),
  };
}

describe('a snapshot sealed after its device was erased', () => {
  let dir: string;
  let raw: EventStore;
  let credentials: ReturnType<typeof gatedCredentials>;

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'hhc-review-snap-key-'));
    raw = await openEmbeddedEventStore(dir);
    credentials = gatedCredentials(await openFileCredentialStore(dir));
  });

  afterEach(async () => {
    await raw.close();
    await credentials.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('makes no key for it: the snapshot is not written, or its fields read "[erased]" to anyone', async () => {
    let keyringNow = Date.parse('2026-11-28T08:00:00.000Z');
    const keyring = createKeyring(credentials, KEK, () => keyringNow);
    const store = createPrivateEventStore(raw, { keyring });
    let now = keyringNow;
    const clock: Clock = { now: () => new Date(now) };
    const at = (): string => new Date((now += 1000)).toISOString();
    const uuid = randomUUID();
    const owner = randomUUID();
    const snapshots = createDeviceSnapshots(store, 4);
    const cache = createStateCache<DeviceState>(10);
    const run = (command: DeviceCommand): Promise<HandledCommand<DeviceState, DeviceEvent>> =>
      handleCommand(store, deviceDecider, deviceStream(uuid), command, newCommandContext({ type: 'user', id: owner }, randomUUID()), clock, { cache, snapshots });

    await run({
      type: 'RegisterDevice',
      data: { id: randomUUID(), uuid, deviceId: 'HUB-RACE', name: NAME, ipAddress: IP, metadata: { plan: PLAN }, actorUserId: owner, linkId: randomUUID(), ownedDeviceCount: 0, maxDevicesPerUser: 10, now: at() },
    });
    await run({ type: 'IssueDeviceToken', data: { uuid, actorUserId: owner, now: at() } });
    // The key leaves this process's cache (30 s): the snapshot's seal looks it up in the store.
    keyringNow += 60_000;

    // The heartbeat's DeviceWentOnline is the stream's 4th event: a snapshot is due after it.
    const reached = credentials.arm(deviceSubject(uuid));
    const heartbeat = run({ type: 'RecordHeartbeat', data: { uuid, tokenGen: 1, now: at() } });
    await reached;
    // Meanwhile the erasure of its only owner: DeviceDeleted, then the device's key destroyed.
    await handleCommand(store, deviceDecider, deviceStream(uuid), { type: 'DeleteDevice', data: { uuid, actorUserId: owner, now: at() } }, newCommandContext({ type: 'system', id: 'erasure' }, randomUUID()), clock);
    await keyring.destroy([deviceSubject(uuid)]);
    credentials.release();
    expect((await heartbeat).events.map((e) => e.type)).toEqual(['DeviceWentOnline']);

    // Anyone reading the log afterwards (another process: a keyring of its own over the same key store).
    const readable = await snapshotsSeenByAnotherProcess(uuid);
    for (const data of readable) expect(data).toMatchObject({ state: { name: ERASED, ipAddress: ERASED, metadata: ERASED } });
    expect(JSON.stringify(readable)).not.toContain(NAME);
    // No key was made for the erased device.
    expect(await credentials.getDataKey(deviceSubject(uuid))).toBeNull();
  });
  /** A device whose events were all written before personal fields were sealed: it has no data key. */
  /** The device's snapshots as another process reads them: a keyring of its own over the same key store. */
  async function snapshotsSeenByAnotherProcess(uuid: string): Promise<unknown[]> {
    const reader = createPrivateEventStore(raw, { keyring: createKeyring(credentials, KEK) });
    const readable: unknown[] = [];
    for await (const event of reader.readStream(deviceSnapshotStream(uuid))) readable.push(event.data);
    return readable;
  }

  async function legacyDevice(uuid: string, owner: string, at: () => string): Promise<void> {
    const metadata = { occurredAt: at(), actor: { type: 'user' as const, id: owner }, requestId: 'r', causationId: 'c', correlationId: 'r' };
    await raw.append(
      deviceStream(uuid),
      [
        { id: randomUUID(), type: 'DeviceRegistered', data: { id: randomUUID(), uuid, deviceId: 'HUB-V1', name: NAME, ipAddress: IP, port: '8080', metadata: { plan: PLAN }, gen: 0, registeredAt: at() }, metadata },
        { id: randomUUID(), type: 'UserLinked', data: { uuid, linkId: randomUUID(), userId: owner, role: 'owner', reactivated: false, createdAt: at(), linkedAt: at() }, metadata },
      ],
      'no_stream',
    );
  }

  /** `store` with the appends to snapshot streams held, once armed, until released (a slow snapshot write). */
  function holdingSnapshots(store: EventStore): EventStore & { arm(): Promise<void>; release(): void } {
    let armed = false;
    let reached: () => void = () => undefined;
    let open: () => void = () => undefined;
    return {
      ...wrapStore(store, {
        async append(streamName, events, expected) {
          if (armed && streamName.startsWith('snapshot-')) {
            armed = false;
            const gate = new Promise<void>((resolve) => (open = resolve));
            reached();
            await gate;
          }
          return store.append(streamName, events, expected);
        },
      }),
      arm() {
        armed = true;
        return new Promise<void>((resolve) => (reached = resolve));
      },
      release: () => open(),
    };
  }

  test('a device with no data key yet (written before sealing) gets one before the append its snapshot follows: its snapshot is sealed', async () => {
    const keyring = createKeyring(credentials, KEK);
    const store = createPrivateEventStore(raw, { keyring });
    let now = Date.parse('2026-11-28T08:00:00.000Z');
    const clock: Clock = { now: () => new Date(now) };
    const at = (): string => new Date((now += 1000)).toISOString();
    const uuid = randomUUID();
    const owner = randomUUID();
    await legacyDevice(uuid, owner, at);
    const snapshots = createDeviceSnapshots(store, 4, keyring);
    const ctx = newCommandContext({ type: 'user', id: owner }, randomUUID());
    await handleCommand(store, deviceDecider, deviceStream(uuid), { type: 'IssueDeviceToken', data: { uuid, actorUserId: owner, now: at() } }, ctx, clock, { snapshots });
    await handleCommand(store, deviceDecider, deviceStream(uuid), { type: 'RecordHeartbeat', data: { uuid, tokenGen: 1, now: at() } }, ctx, clock, { snapshots });

    const stored: unknown[] = [];
    for await (const event of raw.readStream(deviceSnapshotStream(uuid))) stored.push(event.data);
    expect(stored).toHaveLength(1);
    expect(JSON.stringify(stored)).not.toContain(NAME);
    const whole = await loadAggregate(store, deviceDecider.evolve, deviceDecider.initialState, deviceStream(uuid));
    const fromSnapshot = await loadAggregate(store, deviceDecider.evolve, deviceDecider.initialState, deviceStream(uuid), undefined, createDeviceSnapshots(store, 4));
    expect(fromSnapshot).toEqual(whole);
    expect(whole.state.status === 'active' && whole.state.name).toBe(NAME);
  });

  test('...and when its erasure comes between that append and the snapshot, the key made for it is destroyed with it', async () => {
    const keyring = createKeyring(credentials, KEK);
    const store = createPrivateEventStore(raw, { keyring });
    const held = holdingSnapshots(store);
    let now = Date.parse('2026-11-28T08:00:00.000Z');
    const clock: Clock = { now: () => new Date(now) };
    const at = (): string => new Date((now += 1000)).toISOString();
    const uuid = randomUUID();
    const owner = randomUUID();
    await legacyDevice(uuid, owner, at);
    const snapshots = createDeviceSnapshots(held, 4, keyring);
    const ctx = newCommandContext({ type: 'user', id: owner }, randomUUID());
    await handleCommand(held, deviceDecider, deviceStream(uuid), { type: 'IssueDeviceToken', data: { uuid, actorUserId: owner, now: at() } }, ctx, clock, { snapshots });
    const reached = held.arm();
    const heartbeat = handleCommand(held, deviceDecider, deviceStream(uuid), { type: 'RecordHeartbeat', data: { uuid, tokenGen: 1, now: at() } }, ctx, clock, { snapshots });
    await reached;
    await handleCommand(store, deviceDecider, deviceStream(uuid), { type: 'DeleteDevice', data: { uuid, actorUserId: owner, now: at() } }, newCommandContext({ type: 'system', id: 'erasure' }, randomUUID()), clock);
    await keyring.destroy([deviceSubject(uuid)]);
    held.release();
    expect((await heartbeat).events.map((e) => e.type)).toEqual(['DeviceWentOnline']);

    const readable = await snapshotsSeenByAnotherProcess(uuid);
    expect(JSON.stringify(readable)).not.toContain(NAME);
    expect(await credentials.getDataKey(deviceSubject(uuid))).toBeNull();
  });
});
