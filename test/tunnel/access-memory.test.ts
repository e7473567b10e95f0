import { createStateCache, foldStream, handleCommand, newCommandContext, sharedRevision, SHARED_REVISIONS, systemClock } from '../../src/commands/handler';
import { deviceDecider, type DeviceState } from '../../src/domain/device';
import { deviceStream } from '../../src/domain/events';
import { createDeviceAccess, RECENT_VERIFICATION_MS } from '../../src/tunnel/access';
import { deviceStreamStore } from '../support/device-stream-store';

/**
 * What the tunnel keeps of each connected hub's device, kept small (src/tunnel/access.ts,
 * src/commands/handler.ts): the fold itself (no wrapper with a time per device), revisions as
 * shared bigints, and a fold that read nothing new is the one it started from. None of it
 * changes what is answered.
 */

const { store: openStore, run, registered, lastEvent } = deviceStreamStore('hhc-access-memory-');

describe('device folds', () => {
  test('a fold that finds nothing new is the fold it started from; one that does is a new fold at the new revision', async () => {
    const store = openStore();
    const { uuid, owner, now } = await registered();
    const first = await foldStream(store, deviceDecider, deviceStream(uuid));
    expect(first.revision).toBe(1n);
    expect(await foldStream(store, deviceDecider, deviceStream(uuid), { from: first })).toBe(first);

    await run(uuid, owner, { type: 'IssueDeviceToken', data: { uuid, actorUserId: owner, now } });
    const second = await foldStream(store, deviceDecider, deviceStream(uuid), { from: first });
    expect(second).not.toBe(first);
    expect(second.revision).toBe(2n);
    expect(second.state).toMatchObject({ status: 'active', gen: 1 });
    // The same as a fold from the start.
    expect(second).toEqual(await foldStream(store, deviceDecider, deviceStream(uuid)));
  });

  test('a command that appends nothing leaves the cache with the fold it had', async () => {
    const store = openStore();
    const { uuid, owner, now } = await registered();
    const cache = createStateCache<DeviceState>(10);
    const context = newCommandContext({ type: 'user', id: owner }, 'r1');
    // An update that changes nothing: decided on the cached fold, nothing appended.
    await handleCommand(store, deviceDecider, deviceStream(uuid), { type: 'UpdateDevice', data: { uuid, actorUserId: owner, changes: { name: 'Hub' }, now } }, context, systemClock, { cache });
    const cached = cache.get(deviceStream(uuid));
    expect(cached?.revision).toBe(1n);
    await handleCommand(store, deviceDecider, deviceStream(uuid), { type: 'UpdateDevice', data: { uuid, actorUserId: owner, changes: { name: 'Hub' }, now } }, context, systemClock, { cache });
    expect(cache.get(deviceStream(uuid))).toBe(cached);
  });

  test('shared revisions are the same numbers, below the bound and beyond it', () => {
    for (const revision of [-1n, 0n, 1n, 2n, 4095n, BigInt(SHARED_REVISIONS), 2n ** 40n]) {
      expect(sharedRevision(revision)).toBe(revision);
      expect(sharedRevision(BigInt(revision.toString()))).toBe(revision);
    }
    expect(sharedRevision(5n) + 1n).toBe(6n);
  });
});

describe('the tunnel device access', () => {
  test('peek hands out the fold itself, the one the shared cache holds, and the live feed moves it on', async () => {
    const store = openStore();
    const { uuid, owner, now } = await registered();
    const shared = createStateCache<DeviceState>(10);
    const access = createDeviceAccess(store, { maxEntries: 10, now: () => Date.now(), shared });
    const read = await access.fresh(uuid);
    expect(access.peek(uuid)).toBe(read);
    expect(shared.get(deviceStream(uuid))).toBe(read);

    await run(uuid, owner, { type: 'IssueDeviceToken', data: { uuid, actorUserId: owner, now } });
    access.apply(await lastEvent(uuid));
    const moved = access.peek(uuid);
    expect(moved).not.toBe(read);
    expect(moved?.revision).toBe(2n);
    expect(moved?.state).toMatchObject({ status: 'active', gen: 1 });
  });

  test('a recent check is known for the last devices read, and forgotten after a while: then a refusal is checked again', async () => {
    const store = openStore();
    const a = await registered();
    const b = await registered();
    let now = 1_000_000;
    const access = createDeviceAccess(store, { maxEntries: 10, now: () => now });
    await access.fresh(a.uuid);
    expect(access.verifiedRecently(a.uuid, 250)).toBe(true);
    now += 249;
    expect(access.verifiedRecently(a.uuid, 250)).toBe(true);
    now += 1;
    expect(access.verifiedRecently(a.uuid, 250)).toBe(false);
    // Read again: recent again.
    await access.fresh(a.uuid);
    expect(access.verifiedRecently(a.uuid, 250)).toBe(true);
    expect(access.verifiedRecently(b.uuid, 250)).toBe(false);

    // Long after, another device's read lets the old check go: asked with any window, it is not recent.
    now += RECENT_VERIFICATION_MS;
    await access.fresh(b.uuid);
    expect(access.verifiedRecently(a.uuid, Number.MAX_SAFE_INTEGER)).toBe(false);
    expect(access.verifiedRecently(b.uuid, 1)).toBe(true);
    // The fold itself stays: the per-message check needs no read.
    expect(access.peek(a.uuid)?.state).toMatchObject({ status: 'active' });
  });

  test('a device dropped from the folds (a gap in the feed) is not recent either', async () => {
    const store = openStore();
    const { uuid, owner, now } = await registered();
    const access = createDeviceAccess(store, { maxEntries: 10, now: () => Date.now() });
    await access.fresh(uuid);
    await run(uuid, owner, { type: 'IssueDeviceToken', data: { uuid, actorUserId: owner, now } });
    await run(uuid, owner, { type: 'IssueDeviceToken', data: { uuid, actorUserId: owner, now } });
    // Only the second is handed over: a gap.
    access.apply(await lastEvent(uuid));
    expect(access.peek(uuid)).toBeUndefined();
    expect(access.verifiedRecently(uuid, 60_000)).toBe(false);
    expect((await access.fresh(uuid)).state).toMatchObject({ gen: 2 });
  });
});
