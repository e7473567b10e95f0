import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { handleCommand, newCommandContext, systemClock } from '../../src/commands/handler';
import { deviceDecider, type DeviceCommand } from '../../src/domain/device';
import { deviceStream } from '../../src/domain/events';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import type { EventStore, RecordedEvent } from '../../src/infra/eventstore/port';

/**
 * An embedded event store in a fresh directory for each test, with device commands run
 * straight against it. Call at the top of a test file: it registers its own beforeEach/afterEach.
 */
export interface DeviceStreamStore {
  readonly store: () => EventStore;
  readonly run: (uuid: string, actor: string, cmd: DeviceCommand) => Promise<void>;
  /** A device registered by a new owner. */
  readonly registered: () => Promise<{ uuid: string; owner: string; now: string }>;
  /** The last event of the device's stream. */
  readonly lastEvent: (uuid: string) => Promise<RecordedEvent>;
}

export function deviceStreamStore(prefix: string): DeviceStreamStore {
  let dir: string | undefined;
  let current: EventStore | undefined;
  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), prefix));
    current = await openEmbeddedEventStore(dir);
  });
  afterEach(async () => {
    await current?.close();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });
  const store = (): EventStore => {
    if (current === undefined) throw new Error('the store is open only within a test');
    return current;
  };
  const run = async (uuid: string, actor: string, cmd: DeviceCommand): Promise<void> => {
    await handleCommand(store(), deviceDecider, deviceStream(uuid), cmd, newCommandContext({ type: 'user', id: actor }, randomUUID()), systemClock);
  };
  return {
    store,
    run,
    registered: async () => {
      const uuid = randomUUID();
      const owner = randomUUID();
      const now = new Date().toISOString();
      await run(uuid, owner, { type: 'RegisterDevice', data: { id: randomUUID(), uuid, deviceId: 'HUB-1', name: 'Hub', actorUserId: owner, linkId: randomUUID(), ownedDeviceCount: 0, maxDevicesPerUser: 10, now } });
      return { uuid, owner, now };
    },
    lastEvent: async (uuid) => {
      let last: RecordedEvent | undefined;
      for await (const event of store().readStream(deviceStream(uuid))) last = event;
      if (last === undefined) throw new Error('no events');
      return last;
    },
  };
}
