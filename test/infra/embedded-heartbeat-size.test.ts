import { randomUUID } from 'node:crypto';
import { mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createDeviceCommands } from '../../src/commands/devices';
import { newCommandContext, type Clock } from '../../src/commands/handler';
import { heartbeatStream } from '../../src/domain/events';
import { openEmbeddedEventStore, type EmbeddedEventStore, type GroupCommit } from '../../src/infra/eventstore/embedded';
import type { RecordedEvent } from '../../src/infra/eventstore/port';
import { createMemoryReadStore } from '../../src/infra/readstore/memory';
import type { Watermark } from '../../src/projections/watermark';
import { readAll } from '../contract/eventstore.contract';
import { legacyRecord } from './fixtures/legacy-log';

/** Bytes on disk of a routine heartbeat, appended through the device use case into the real log. */

const noWait: Watermark = { advance: () => undefined, waitFor: async () => true, current: () => null, close: async () => undefined };

async function logBytes(dir: string): Promise<number> {
  const names = (await readdir(dir)).filter((name) => name.endsWith('.log'));
  const sizes = await Promise.all(names.map(async (name) => (await stat(join(dir, name))).size));
  return sizes.reduce((sum, size) => sum + size, 0);
}

describe('a routine heartbeat in the embedded log', () => {
  let dir: string;
  let store: EmbeddedEventStore;
  let now = Date.parse('2026-11-21T12:00:00.000Z');
  const commits: GroupCommit[] = [];

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'hhc-heartbeat-size-'));
    store = await openEmbeddedEventStore(dir, { now: () => now, reclaimIntervalMs: 0, onGroupCommit: (commit) => commits.push(commit) });
  });

  afterEach(async () => {
    await store.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('takes at most 200 bytes on disk, and reads back with the metadata an auditor needs', async () => {
    const clock: Clock = { now: () => new Date(now) };
    const devices = createDeviceCommands({ eventStore: store, readStore: createMemoryReadStore(), watermark: noWait, clock, readYourWritesTimeoutMs: 1, maxDevicesPerUser: 10 });
    const uuid = randomUUID();
    const owner = newCommandContext({ type: 'user', id: randomUUID() }, randomUUID());
    await devices.register({ uuid, deviceId: 'HUB-1', name: 'Hub' }, owner);
    await devices.issueToken(uuid, owner);
    const device = { type: 'device' as const, id: uuid };
    await devices.heartbeat(uuid, 1, {}, newCommandContext(device, randomUUID()));
    now += 30_000;
    const before = await logBytes(dir);
    commits.length = 0;
    const requestId = randomUUID();

    await devices.heartbeat(uuid, 1, {}, newCommandContext(device, requestId));

    const added = (await logBytes(dir)) - before;
    expect(commits).toEqual([{ appends: 1, events: 1, bytes: added }]);
    expect(added).toBeLessThanOrEqual(200);
    const heartbeats = await readAll(store.readStream(heartbeatStream(uuid)));
    const routine = heartbeats.at(-1) as RecordedEvent;
    expect(routine.type).toBe('HeartbeatReceived');
    expect(routine.metadata).toEqual({
      occurredAt: new Date(now).toISOString(),
      actor: device,
      requestId,
      // The command that caused it (its own id), inside the request.
      causationId: expect.stringMatching(/^[0-9a-f-]{36}$/),
      correlationId: requestId,
    });
    // The same event in the JSON record format of earlier versions, for comparison.
    const legacy = legacyRecord({ streamName: routine.streamName, revision: 1, writtenAt: now, event: routine }).length;
    expect(legacy).toBeGreaterThan(2 * added);
    process.stdout.write(`routine heartbeat: ${added} bytes on disk (JSON record format: ${legacy} bytes)\n`);
  });
});
