/**
 * What the reading caches hold on to. The records just committed are kept up to 4 MiB
 * (recent-commits.ts: bounded by bytes); the records read from segment files are kept by
 * count (2,048), whatever their size (an event body may be up to 16 MiB; through the API up to
 * the 64 KiB of a request body), and so are the opened events of the private store (1,024).
 * Here a stream of large events is read once from the files (a process started after they were
 * written, as `npm run replay`, an export or an audit read would): once nothing refers to what
 * was read, the process should not keep tens of MiB of it.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { openFileCredentialStore } from '../../src/infra/credentials/file';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import { derivePrivacyKeys } from '../../src/privacy/crypto';
import { createPrivateEventStore } from '../../src/privacy/event-store';
import { createKeyring } from '../../src/privacy/keyring';
import type { NewEvent } from '../../src/infra/eventstore/port';

const meta = { occurredAt: '2026-11-27T10:00:00.000Z', actor: { type: 'system' as const, id: 'review' }, requestId: 'r', causationId: 'c', correlationId: 'r' };
const EVENT_BYTES = 256 * 1024;
const EVENTS = 160;

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** Bytes outside the JS heap (Buffers) and in it, after a full collection. */
function held(): number {
  gc();
  gc();
  const usage = process.memoryUsage();
  return usage.arrayBuffers + usage.heapUsed;
}

describe('the reading caches hold a bounded number of bytes, not only of records', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'hhc-review-memory-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  test(`reading ${EVENTS} events of ${EVENT_BYTES / 1024} KiB once leaves less than 16 MiB held by the store`, async () => {
    const writer = await openEmbeddedEventStore(dir, { reclaimIntervalMs: 0 });
    for (let i = 0; i < EVENTS; i++) {
      const event: NewEvent = { id: randomUUID(), type: 'DeviceUpdated', data: { blob: randomUUID().repeat(EVENT_BYTES / 36), i }, metadata: meta };
      await writer.append('device-big', [event], 'any');
    }
    await writer.close();

    const store = await openEmbeddedEventStore(dir, { reclaimIntervalMs: 0 });
    const before = held();
    let count = 0;
    for await (const event of store.readStream('device-big')) if (event.type === 'DeviceUpdated') count++;
    expect(count).toBe(EVENTS);
    const grown = held() - before;
    await store.close();
    expect(grown).toBeLessThan(16 * 1024 * 1024);
  });

  test(`sealing ${EVENTS} device registrations with ${EVENT_BYTES / 1024} KiB of metadata and reading each once leaves less than 16 MiB held by the private store`, async () => {
    const raw = await openEmbeddedEventStore(dir, { reclaimIntervalMs: 0 });
    const credentials = await openFileCredentialStore(dir);
    const store = createPrivateEventStore(raw, { keyring: createKeyring(credentials, derivePrivacyKeys('k'.repeat(40)).keyEncryptionKey) });
    const warm = randomUUID();
    await store.append(`device-${warm}`, [registered(warm, 10)], 'any');
    const before = held();
    for (let i = 0; i < EVENTS; i++) {
      const uuid = randomUUID();
      await store.append(`device-${uuid}`, [registered(uuid, EVENT_BYTES)], 'any');
      // Read once (as a command reads the device's stream).
      for await (const event of store.readStream(`device-${uuid}`)) expect(event.type).toBe('DeviceRegistered');
    }
    const grown = held() - before;
    await raw.close();
    await credentials.close();
    expect(grown).toBeLessThan(16 * 1024 * 1024);
  });
});

function registered(uuid: string, bytes: number): NewEvent {
  return {
    id: randomUUID(),
    type: 'DeviceRegistered',
    data: { id: randomUUID(), uuid, deviceId: 'HUB', name: 'Attic', ipAddress: '10.0.0.9', port: '8123', metadata: { plan: randomUUID().repeat(bytes / 36) }, gen: 0, registeredAt: meta.occurredAt },
    metadata: meta,
  };
}
