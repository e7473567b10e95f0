import { randomUUID } from 'node:crypto';
import type { DeviceEvent } from '../../src/domain/device';
import { deviceStream } from '../../src/domain/events';
import type { EventStore, NewEvent, RecordedEvent } from '../../src/infra/eventstore/port';
import { formatPosition } from '../../src/infra/eventstore/port';
import type { ReadStore } from '../../src/infra/readstore/port';
import { DEVICES_COLLECTION, devicesProjection, type DeviceDoc } from '../../src/projections/devices';
import { positionOrder } from '../../src/projections/projection';
import { CHECKPOINT_NAME, startProjector } from '../../src/projections/projector';
import { openEventStore, openReadStore, unique, type EventStoreKind, type ReadStoreKind } from '../support/adapters';

/**
 * At most one projector applies at a time (decisions §1), and when one that lost its lease
 * still writes (its writes were on their way, or it replays behind the new one), the store
 * keeps what the newer one wrote: the checkpoint never goes back nor takes an older epoch,
 * and a deleted document does not come back.
 */

const meta = { occurredAt: '2026-01-01T00:00:00.000Z', actor: { type: 'system', id: 't' }, requestId: 'r', causationId: 'c', correlationId: 'c' } as const;
const asNew = (event: DeviceEvent): NewEvent => ({ id: randomUUID(), type: event.type, data: event.data, metadata: meta });
const registered = (uuid: string, id: string): DeviceEvent => ({
  type: 'DeviceRegistered',
  data: { id, uuid, deviceId: 'HUB-1', name: 'Hub', ipAddress: null, port: '8123', metadata: null, gen: 0, registeredAt: meta.occurredAt },
});
const renamed = (uuid: string, name: string): DeviceEvent => ({ type: 'DeviceUpdated', data: { uuid, changes: { name }, source: 'user', updatedAt: meta.occurredAt } });
const deleted = (uuid: string, id: string): DeviceEvent => ({ type: 'DeviceDeleted', data: { uuid, id, deletedAt: meta.occurredAt } });

async function waitUntil(check: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function streamEvents(events: EventStore, stream: string): Promise<RecordedEvent[]> {
  const read: RecordedEvent[] = [];
  for await (const event of events.readStream(stream)) read.push(event);
  return read;
}

describe.each<[EventStoreKind, ReadStoreKind]>([
  ['embedded', 'memory'],
  ['esdb', 'mongodb'],
])('fencing over %s events into %s read models', (esKind, rsKind) => {
  let events: EventStore;
  let reads: ReadStore;
  const cleanups: Array<() => Promise<void>> = [];
  beforeAll(async () => {
    const es = await openEventStore(esKind);
    const rs = await openReadStore(rsKind);
    events = es.value;
    reads = rs.value;
    cleanups.push(es.cleanup, rs.cleanup);
    await devicesProjection.init(reads);
  }, 30_000);
  afterAll(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup();
  });

  test('a replay of DeviceRegistered after the deletion does not bring the device back', async () => {
    const uuid = randomUUID();
    const stream = deviceStream(uuid);
    await events.append(stream, [asNew(registered(uuid, 'id-1')), asNew(deleted(uuid, 'id-1'))], 'no_stream');
    const [registration, deletion] = await streamEvents(events, stream);
    if (registration === undefined || deletion === undefined) throw new Error('two events expected');
    // The projector of the new lease applies both; the one that lost it replays the registration after.
    await devicesProjection.applyBatch([registration, deletion], reads);
    await devicesProjection.applyBatch([registration], reads);
    const devices = reads.collection<DeviceDoc>(DEVICES_COLLECTION);
    expect(await devices.get(uuid)).toBeNull();
    expect(await devices.find({ where: { uuid } })).toEqual([]);
    // The other way round too: the deletion seen first (the registration's write still on its way).
    const other = randomUUID();
    await events.append(deviceStream(other), [asNew(registered(other, 'id-2')), asNew(deleted(other, 'id-2'))], 'no_stream');
    const [late, removal] = await streamEvents(events, deviceStream(other));
    if (late === undefined || removal === undefined) throw new Error('two events expected');
    await devicesProjection.applyBatch([removal], reads);
    await devicesProjection.applyBatch([late], reads);
    expect(await devices.get(other)).toBeNull();
  });

  test('a projector that lost its lease writes nothing more, its late checkpoint is refused, and the checkpoint never goes back', async () => {
    const uuid = randomUUID();
    const stream = deviceStream(uuid);
    const devices = reads.collection<DeviceDoc>(DEVICES_COLLECTION);
    await events.append(stream, [asNew(registered(uuid, unique('id-')))], 'no_stream');
    let oldHeld = true;
    const old = await startProjector(events, reads, [devicesProjection], { checkpointEveryMs: 0, fencing: { epoch: 10, held: () => oldHeld } });
    await old.caughtUp;
    expect((await devices.get(uuid))?.name).toBe('Hub');
    const before = await reads.getCheckpoint(CHECKPOINT_NAME);

    // The lease lapses (its renewals no longer answered): nothing it reads from now on is written.
    oldHeld = false;
    await events.append(stream, [asNew(renamed(uuid, 'seen by the new holder only'))], 0n);
    await new Promise((r) => setTimeout(r, 300));
    expect((await devices.get(uuid))?.name).toBe('Hub');
    expect(await reads.getCheckpoint(CHECKPOINT_NAME)).toBe(before);

    const next = await startProjector(events, reads, [devicesProjection], { checkpointEveryMs: 0, fencing: { epoch: 11, held: () => true } });
    await next.caughtUp;
    await waitUntil(async () => (await devices.get(uuid))?.name === 'seen by the new holder only');
    const [, rename] = await streamEvents(events, stream);
    if (rename === undefined) throw new Error('the rename is in the stream');
    await waitUntil(async () => (await reads.getCheckpoint(CHECKPOINT_NAME)) === formatPosition(rename.position));

    // A checkpoint of the old epoch arriving late, behind or beyond: refused.
    expect(await reads.advanceCheckpoint(CHECKPOINT_NAME, '1/1', { epoch: 10, order: positionOrder({ commit: 1n, prepare: 1n }) })).toBe('fenced');
    const beyond = { commit: rename.position.commit + 1000n, prepare: rename.position.prepare + 1000n };
    expect(await reads.advanceCheckpoint(CHECKPOINT_NAME, formatPosition(beyond), { epoch: 10, order: positionOrder(beyond) })).toBe('fenced');
    await old.stop();
    await next.stop();
    expect(await reads.getCheckpoint(CHECKPOINT_NAME)).toBe(formatPosition(rename.position));
  }, 30_000);
});
