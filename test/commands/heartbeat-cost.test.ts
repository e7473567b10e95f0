import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createDeviceCommands, type DeviceCommands } from '../../src/commands/devices';
import { newCommandContext, systemClock } from '../../src/commands/handler';
import { UnauthorizedError } from '../../src/domain/errors';
import { heartbeatStream } from '../../src/domain/events';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import type { EventStore } from '../../src/infra/eventstore/port';
import { createMemoryReadStore } from '../../src/infra/readstore/memory';
import { createLocalWatermark } from '../../src/projections/watermark';

/**
 * What a heartbeat costs in event-store calls (counted at the port, so the same for both
 * adapters): a routine one appends to `heartbeat-<uuid>` and reads the device stream's tail,
 * nothing else. Two command instances with caches of their own stand for two API processes.
 */

type Call = `${'append' | 'read'} ${string}`;

function counting(store: EventStore, calls: Call[]): EventStore {
  return {
    append: (streamName, events, expected) => {
      calls.push(`append ${streamName.split('-')[0] ?? ''}`);
      return store.append(streamName, events, expected);
    },
    readStream: (streamName, options) => {
      calls.push(`read ${streamName.split('-')[0] ?? ''}`);
      return store.readStream(streamName, options);
    },
    subscribe: (options) => store.subscribe(options),
    setStreamMaxAge: (streamName, seconds) => store.setStreamMaxAge(streamName, seconds),
    headPosition: () => store.headPosition(),
    close: () => store.close(),
  };
}

describe('heartbeat cost (embedded log)', () => {
  let dir: string;
  let store: EventStore;
  const calls: Call[] = [];
  const owner = newCommandContext({ type: 'user', id: 'owner-1' }, randomUUID());
  const deviceContext = (uuid: string) => newCommandContext({ type: 'device', id: uuid }, randomUUID());
  /** A process of its own: its own fold cache; the watermark is not what is measured. */
  const apiProcess = (): DeviceCommands =>
    createDeviceCommands({
      eventStore: counting(store, calls),
      readStore: createMemoryReadStore(),
      watermark: { ...createLocalWatermark(), waitFor: async () => true },
      clock: systemClock,
      readYourWritesTimeoutMs: 1,
      maxDevicesPerUser: 100,
    });
  const heartbeats = async (uuid: string): Promise<number> => {
    let count = 0;
    for await (const event of store.readStream(heartbeatStream(uuid))) if (event.type === 'HeartbeatReceived') count++;
    return count;
  };

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'hhc-heartbeat-cost-'));
    store = await openEmbeddedEventStore(dir);
    calls.length = 0;
  });
  afterEach(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('a routine heartbeat appends to heartbeat-<uuid> and reads the device stream: two calls', async () => {
    const api = apiProcess();
    const uuid = randomUUID();
    await api.register({ uuid, deviceId: 'HUB-1', name: 'Hub' }, owner);
    await api.issueToken(uuid, owner);
    await api.heartbeat(uuid, 1, {}, deviceContext(uuid)); // first: DeviceWentOnline
    calls.length = 0;
    await api.heartbeat(uuid, 1, {}, deviceContext(uuid));
    expect(calls).toEqual(['append heartbeat', 'read device']);

    // A process that never folded the device reads it first: once.
    const other = apiProcess();
    calls.length = 0;
    await other.heartbeat(uuid, 1, {}, deviceContext(uuid));
    await other.heartbeat(uuid, 1, {}, deviceContext(uuid));
    expect(calls).toEqual(['read device', 'append heartbeat', 'read device', 'append heartbeat', 'read device']);
    expect(await heartbeats(uuid)).toBe(4);
  });

  /** A device beating through process `a`, then given token generation 2 through process `b`: `a`'s fold still says 1. */
  async function tokenRenewedElsewhere(): Promise<{ a: DeviceCommands; b: DeviceCommands; uuid: string }> {
    const a = apiProcess();
    const b = apiProcess();
    const uuid = randomUUID();
    await a.register({ uuid, deviceId: 'HUB-2', name: 'Hub' }, owner);
    await a.issueToken(uuid, owner);
    await a.heartbeat(uuid, 1, {}, deviceContext(uuid));
    await b.issueToken(uuid, owner);
    calls.length = 0;
    return { a, b, uuid };
  }

  test('a token issued through another process is accepted at once; the one it replaced is refused', async () => {
    const { a, uuid } = await tokenRenewedElsewhere();
    await a.heartbeat(uuid, 2, {}, deviceContext(uuid));
    // Its fold refused generation 2, so it read the stream before anything was written.
    expect(calls).toEqual(['read device', 'append heartbeat', 'read device']);
    await expect(a.heartbeat(uuid, 1, {}, deviceContext(uuid))).rejects.toBeInstanceOf(UnauthorizedError);
    expect(await heartbeats(uuid)).toBe(2);
  });

  test('a token revoked through another process: refused by the read after the append, and from then on before any write', async () => {
    const { a, b, uuid } = await tokenRenewedElsewhere();
    await expect(a.heartbeat(uuid, 1, {}, deviceContext(uuid))).rejects.toBeInstanceOf(UnauthorizedError);
    expect(await heartbeats(uuid)).toBe(2);
    calls.length = 0;
    await expect(a.heartbeat(uuid, 1, {}, deviceContext(uuid))).rejects.toBeInstanceOf(UnauthorizedError);
    await expect(b.heartbeat(uuid, 1, {}, deviceContext(uuid))).rejects.toBeInstanceOf(UnauthorizedError);
    expect(calls.filter((call) => call.startsWith('append'))).toEqual([]);
    expect(await heartbeats(uuid)).toBe(2);
  });
});
