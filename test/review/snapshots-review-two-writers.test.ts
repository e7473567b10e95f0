import { randomUUID } from 'node:crypto';
import { createStateCache, handleCommand, loadAggregate, newCommandContext, type Clock } from '../../src/commands/handler';
import { createDeviceSnapshots, DEVICE_SNAPSHOT_PREFIX, deviceSnapshotStream } from '../../src/commands/snapshots';
import { DomainError } from '../../src/domain/errors';
import { deviceDecider, type DeviceCommand, type DeviceState } from '../../src/domain/device';
import { deviceStream } from '../../src/domain/events';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import { createEsdbEventStore } from '../../src/infra/eventstore/esdb';
import type { AppendResult, EventStore, ExpectedRevision, NewEvent } from '../../src/infra/eventstore/port';
import { startEsdbStandin, type EsdbStandin } from '../support/esdb-standin';
import { mulberry32 } from '../support/prng';
import { privateEventStoreEachTest } from '../support/private-event-store';
import { wrapStore } from '../support/stream-reads';

/**
 * The invariant of device snapshots, attacked with what one process's tests do not do: two
 * processes (a cache and a snapshot writer each) act on the same devices, and one of them
 * writes its snapshots late and out of order (a stale snapshot lands after a newer one);
 * appends that bypass the snapshots (the erasure's `UnlinkUser` and `DeleteDevice`, through
 * `handleCommand` without them) and re-registrations of a deleted uuid are mixed in. After
 * every step, the fold from the newest snapshot plus the events after it is the fold of the
 * whole stream, and what the token and link checks decide from it is the same. In both modes:
 * the embedded log, and EventStoreDB (its stand-in, through the real client).
 */

let standin: EsdbStandin | null = null;
beforeAll(async () => {
  standin = await startEsdbStandin({ statsIntervalMs: 0 });
}, 30_000);
afterAll(async () => {
  await standin?.stop();
});

/** `store` whose snapshot appends are kept back until `flush` lets one of them through (any order). */
function lateSnapshots(store: EventStore): EventStore & { pending(): number; flush(index: number): Promise<void> } {
  const held: Array<{ streamName: string; events: readonly NewEvent[]; expected: ExpectedRevision }> = [];
  return {
    ...wrapStore(store, {
      async append(streamName, events, expected): Promise<AppendResult> {
        if (!streamName.startsWith(DEVICE_SNAPSHOT_PREFIX)) return store.append(streamName, events, expected);
        held.push({ streamName, events, expected });
        // As if written: the writer does not wait for it (a crash would lose it; here it lands later).
        return { nextExpectedRevision: 0n, position: { commit: 0n, prepare: 0n } };
      },
    }),
    pending: () => held.length,
    async flush(index) {
      const [late] = held.splice(index, 1);
      if (late !== undefined) await store.append(late.streamName, late.events, late.expected);
    },
  };
}

describe.each([
  { mode: 'embedded', seeds: [11, 12, 13, 14, 15, 16] },
  { mode: 'distributed (EventStoreDB stand-in)', seeds: [21, 22] },
])('device snapshots with two writers, late snapshots and appends that bypass them: $mode', ({ mode, seeds }) => {
  const fixture = privateEventStoreEachTest('hhc-review-snap-two-', (dir) => (mode === 'embedded' ? openEmbeddedEventStore(dir) : createEsdbEventStore((standin as EsdbStandin).url)));

  test.each(seeds)('seed %i: the fold from the newest snapshot is the fold of the whole stream after every step', async (seed) => {
    const random = mulberry32(seed);
    const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
    const every = 2 + (seed % 3);
    let now = Date.parse('2026-11-28T08:00:00.000Z');
    const clock: Clock = { now: () => new Date(now) };
    const at = (): string => new Date((now += 1000 + Math.floor(random() * 400_000))).toISOString();
    const slow = lateSnapshots(fixture.store);
    const processes = [
      { store: fixture.store, cache: createStateCache<DeviceState>(100), snapshots: createDeviceSnapshots(fixture.store, every, fixture.keyring) },
      { store: slow as EventStore, cache: createStateCache<DeviceState>(100), snapshots: createDeviceSnapshots(slow, every, fixture.keyring) },
    ];
    const devices = [randomUUID(), randomUUID()];
    const users = [randomUUID(), randomUUID(), randomUUID()];
    const lastBeat = new Map<string, string>();
    /** The token generation of each device at the last check: most heartbeats carry it, some an older or newer one. */
    const gens = new Map<string, number>();

    const command = (uuid: string): { command: DeviceCommand; actor: string } => {
      const user = pick(users);
      const other = pick(users);
      const r = random();
      if (r < 0.08) {
        return {
          actor: user,
          command: { type: 'RegisterDevice', data: { id: randomUUID(), uuid, deviceId: 'HUB-2W', name: `Hub ${Math.floor(random() * 100)}`, ipAddress: '10.1.0.1', metadata: { n: Math.floor(random() * 9) }, actorUserId: user, linkId: randomUUID(), ownedDeviceCount: 0, maxDevicesPerUser: 100, now: at() } },
        };
      }
      if (r < 0.18) return { actor: user, command: { type: 'LinkUser', data: { uuid, actorUserId: user, targetUserId: other, role: pick(['owner', 'editor', 'viewer'] as const), linkId: randomUUID(), now: at() } } };
      if (r < 0.24) return { actor: user, command: { type: 'UnlinkUser', data: { uuid, actorUserId: user, targetUserId: other, now: at() } } };
      if (r < 0.32) return { actor: user, command: { type: 'IssueDeviceToken', data: { uuid, actorUserId: user, now: at() } } };
      if (r < 0.36) return { actor: user, command: { type: 'UpdateDevice', data: { uuid, actorUserId: user, changes: { name: `Renamed ${Math.floor(random() * 1000)}` }, now: at() } } };
      if (r < 0.4) return { actor: user, command: { type: 'DeleteDevice', data: { uuid, actorUserId: user, now: at() } } };
      if (r < 0.7) {
        const beatAt = at();
        lastBeat.set(uuid, beatAt);
        return { actor: uuid, command: { type: 'RecordHeartbeat', data: { uuid, tokenGen: random() < 0.8 ? (gens.get(uuid) ?? 0) : Math.floor(random() * 4), ...(random() < 0.3 ? { ipAddress: `10.1.0.${Math.floor(random() * 3)}` } : {}), now: beatAt } } };
      }
      if (r < 0.92) return { actor: 'expiry', command: { type: 'MarkOffline', data: { uuid, lastHeartbeatAt: lastBeat.get(uuid) ?? null, offlineAfterSeconds: 300, now: at() } } };
      return { actor: 'expiry', command: { type: 'ConfirmPresence', data: { uuid, heartbeatAt: at(), now: at() } } };
    };

    // Every device registered once by the first user.
    for (const uuid of devices) {
      const owner = users[0] as string;
      await handleCommand(fixture.store, deviceDecider, deviceStream(uuid), {
        type: 'RegisterDevice',
        data: { id: randomUUID(), uuid, deviceId: 'HUB-2W', name: 'Hub', actorUserId: owner, linkId: randomUUID(), ownedDeviceCount: 0, maxDevicesPerUser: 100, now: at() },
      }, newCommandContext({ type: 'user', id: owner }, randomUUID()), clock);
    }

    let snapshotsRead = 0;
    let staleLast = 0;
    for (let step = 0; step < 400; step++) {
      const uuid = pick(devices);
      const { command: next, actor } = command(uuid);
      const r = random();
      try {
        if (r < 0.12) {
          // The erasure's way: handleCommand without cache or snapshots, actor system.
          const whole = await loadAggregate(fixture.store, deviceDecider.evolve, deviceDecider.initialState, deviceStream(uuid));
          const linked = whole.state.status === 'active' ? Object.values(whole.state.links).find((l) => l.isActive) : undefined;
          if (linked !== undefined) {
            const sole = linked.role === 'owner' && whole.state.status === 'active' && Object.values(whole.state.links).filter((l) => l.isActive && l.role === 'owner').length === 1;
            await handleCommand(
              fixture.store,
              deviceDecider,
              deviceStream(uuid),
              sole
                ? { type: 'DeleteDevice', data: { uuid, actorUserId: linked.userId, now: at() } }
                : { type: 'UnlinkUser', data: { uuid, actorUserId: linked.userId, targetUserId: linked.userId, now: at() } },
              newCommandContext({ type: 'system', id: 'erasure' }, randomUUID()),
              clock,
            );
          }
        } else {
          const process = pick(processes);
          await handleCommand(process.store, deviceDecider, deviceStream(uuid), next, newCommandContext({ type: 'user', id: actor }, randomUUID()), clock, { cache: process.cache, snapshots: process.snapshots });
        }
      } catch (error) {
        if (!(error instanceof DomainError)) throw error;
      }
      // Late snapshots land now and then, in any order: a stale one may be the newest.
      while (slow.pending() > 0 && random() < 0.06) await slow.flush(0);

      for (const device of devices) {
        const whole = await loadAggregate(fixture.store, deviceDecider.evolve, deviceDecider.initialState, deviceStream(device));
        const cold = await loadAggregate(fixture.store, deviceDecider.evolve, deviceDecider.initialState, deviceStream(device), undefined, createDeviceSnapshots(fixture.store, every));
        expect(cold).toEqual(whole);
        if (whole.state.status !== 'none') gens.set(device, whole.state.gen);
        // The token and link checks of the service decide the same from both.
        for (let gen = 0; gen < 5; gen++) {
          const beat: DeviceCommand = { type: 'RecordHeartbeat', data: { uuid: device, tokenGen: gen, now: at() } };
          const decide = (state: DeviceState): string => {
            try {
              return JSON.stringify(deviceDecider.decide(beat, state));
            } catch (error) {
              return error instanceof Error ? error.message : String(error);
            }
          };
          expect(decide(cold.state)).toBe(decide(whole.state));
        }
      }
    }
    while (slow.pending() > 0) await slow.flush(slow.pending() - 1);
    for (const device of devices) {
      let newest = -1;
      for await (const event of fixture.store.readStream(deviceSnapshotStream(device))) {
        snapshotsRead++;
        const revision = (event.data as { revision: number }).revision;
        if (revision < newest) staleLast++;
        newest = Math.max(newest, revision);
      }
      const whole = await loadAggregate(fixture.store, deviceDecider.evolve, deviceDecider.initialState, deviceStream(device));
      expect(await loadAggregate(fixture.store, deviceDecider.evolve, deviceDecider.initialState, deviceStream(device), undefined, createDeviceSnapshots(fixture.store, every))).toEqual(whole);
    }
    // The workload did write snapshots, and some landed after a newer one.
    expect(snapshotsRead).toBeGreaterThan(4);
    expect(staleLast).toBeGreaterThan(0);
  }, 120_000);
});
