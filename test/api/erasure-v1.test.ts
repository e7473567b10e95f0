import { randomUUID } from 'node:crypto';
import { cpSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import { createEsdbEventStore } from '../../src/infra/eventstore/esdb';
import { formatPosition, type EventStore, type NewEvent, type RecordedEvent } from '../../src/infra/eventstore/port';
import { V1_EVENTS } from '../fixtures/events/make-v1';
import { replay } from '../infra/fixtures/heartbeat-history';
import { api, CRM_KEY, startTestService, type TestService } from '../support/harness';
import { filesUnder, foundIn } from '../support/data-dir-bytes';

/**
 * Events written before personal fields were sealed (schema version 1, test/fixtures/events):
 * destroying a key cannot reach what they hold in the clear. Embedded: the erasure rewrites the
 * segments holding the person's version-1 events with those fields "[erased]" (ids, types,
 * revisions, metadata and every other field kept), and then no file under DATA_DIR holds them.
 * Distributed: EventStoreDB cannot rewrite an event in place; the erasure finishes and reports
 * the streams that still hold them in its log (stream names and a count, never the data).
 *
 * The log: the first release's own bytes (v1-log), plus version-1 events appended as that
 * release wrote them (a session, and a hub the person alone owns, deleted with them).
 */

const USER = '6f1c2a4e-8d7b-4c3a-9e2f-1a2b3c4d5e6f';
const SYNC_ID = 4711;
const OLD_DEVICE = '0d9e8f7a-6b5c-4d3e-8f1a-2b3c4d5e6f70';
const ERASED = '[erased]';

const tag = randomUUID().slice(0, 8);
const FAMILY = randomUUID();
const HUB = randomUUID();
const at = '2026-11-21T09:00:00.000Z';
const meta = { occurredAt: at, actor: { type: 'user' as const, id: USER }, requestId: 'req-v1-more', causationId: 'req-v1-more', correlationId: 'req-v1-more' };
const later = {
  ip: '203.0.113.201',
  agent: `OldAgent/${tag}`,
  hubName: `Vera's old attic ${tag}`,
  hubIp: '192.168.91.19',
  hubMeta: `v1-floorplan-${tag}`,
};
/** Version-1 events as the first release wrote them, besides those of the fixture log. */
const MORE_V1: ReadonlyArray<{ streamName: string; event: NewEvent }> = [
  {
    streamName: `session-${FAMILY}`,
    event: {
      id: randomUUID(),
      type: 'RefreshIssued',
      data: { familyId: FAMILY, jti: `jti-${tag}`, userId: USER, issuedAt: at, expiresAt: '2099-01-01T00:00:00.000Z', ip: later.ip, userAgent: later.agent },
      metadata: meta,
    },
  },
  {
    streamName: `device-${HUB}`,
    event: {
      id: randomUUID(),
      type: 'DeviceRegistered',
      data: { id: randomUUID(), uuid: HUB, deviceId: `HUB-V1-${tag}`, name: later.hubName, ipAddress: later.hubIp, port: '8123', metadata: { plan: later.hubMeta }, gen: 0, registeredAt: at },
      metadata: meta,
    },
  },
  {
    streamName: `device-${HUB}`,
    event: {
      id: randomUUID(),
      type: 'UserLinked',
      data: { uuid: HUB, linkId: randomUUID(), userId: USER, role: 'owner', reactivated: false, createdAt: at, linkedAt: at },
      metadata: meta,
    },
  },
];

/** The person's data in those events: none of it may be readable after the erasure. */
const PERSONAL = [
  'v1.person@example.org',
  'Vintage GmbH',
  '198.51.100.23',
  '198.51.100.24',
  'VintageBrowser/1.0',
  'VintageBrowser/1.1',
  later.ip,
  later.agent,
  later.hubName,
  later.hubIp,
  later.hubMeta,
];

async function appendV1(store: EventStore): Promise<void> {
  let n = 0;
  for (const e of V1_EVENTS) {
    n++;
    const event: NewEvent = { id: `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`, type: e.type, data: e.data, metadata: e.metadata as NewEvent['metadata'] };
    await store.append(e.streamName, [event], 'any');
  }
  for (const { streamName, event } of MORE_V1) await store.append(streamName, [event], 'any');
}

async function readAll(store: EventStore, stream: string): Promise<RecordedEvent[]> {
  const events: RecordedEvent[] = [];
  for await (const event of store.readStream(stream)) events.push(event);
  return events;
}

async function until(check: () => Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 20_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

const eraseCustomer = (service: TestService) => api(service, 'POST', '/auth/erase-customer', { headers: { 'X-Internal-Api-Key': CRM_KEY }, body: { id: SYNC_ID } });

describe('erasure of a person whose events were written before sealing (embedded mode)', () => {
  let dir: string;
  let service: TestService | null = null;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'hhc-erase-v1-'));
    cpSync(join(__dirname, '..', 'fixtures', 'events', 'v1-log'), dir, { recursive: true });
    const raw = await openEmbeddedEventStore(dir);
    for (const { streamName, event } of MORE_V1) await raw.append(streamName, [event], 'any');
    await raw.close();
  });
  afterAll(async () => {
    await service?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test('the segments holding their version-1 events are rewritten: no file under DATA_DIR holds their data, every event is still there', async () => {
    const raw = await openEmbeddedEventStore(dir);
    const before = await replay(raw);
    await raw.close();
    const everyFile = (): Buffer => Buffer.concat(filesUnder(dir).map((f) => readFileSync(f)));
    expect(foundIn(everyFile(), PERSONAL)).toEqual(PERSONAL);

    service = await startTestService('embedded', { DATA_DIR: dir });
    const started = service;
    await until(async () => (await started.readStore.collection('devices').get(HUB)) !== null, 'the hub in the read model');
    expect(await eraseCustomer(service)).toMatchObject({ status: 200, body: { erased: true, userId: USER } });

    expect(foundIn(everyFile(), PERSONAL)).toEqual([]);
    // Read through the service: the person's fields read as erased, ids and the rest kept.
    const synced = (await readAll(service.eventStore, `user-${USER}`)).find((e) => e.type === 'UserSynced');
    expect(synced?.data).toMatchObject({ userId: USER, syncId: SYNC_ID, created: true, email: ERASED, firstName: ERASED, lastName: ERASED, crm: ERASED, profile: ERASED });
    const issued = (await readAll(service.eventStore, `session-${FAMILY}`))[0];
    expect(issued?.data).toMatchObject({ familyId: FAMILY, userId: USER, jti: `jti-${tag}`, ip: ERASED, userAgent: ERASED });
    const hub = await readAll(service.eventStore, `device-${HUB}`);
    expect(hub.map((e) => e.type)).toEqual(['DeviceRegistered', 'UserLinked', 'UserUnlinked', 'DeviceDeleted']);
    expect(hub[0]?.data).toMatchObject({ uuid: HUB, deviceId: `HUB-V1-${tag}`, port: '8123', name: ERASED, ipAddress: ERASED, metadata: ERASED });
    // A device the person deleted before is its household's, not theirs: as with sealed events, it is kept.
    expect((await readAll(service.eventStore, `device-${OLD_DEVICE}`))[0]?.data).toMatchObject({ name: 'Vintage living room' });
    await service.stop();
    service = null;

    // The rewritten log opens, and holds every event it held, at the same positions, with the same ids and types.
    const reopened = await openEmbeddedEventStore(dir);
    const after = await replay(reopened);
    await reopened.close();
    const shape = (e: RecordedEvent) => [e.streamName, String(e.revision), e.id, e.type, formatPosition(e.position)];
    expect(after.slice(0, before.length).map(shape)).toEqual(before.map(shape));
    expect(after.slice(0, before.length).map((e) => e.metadata)).toEqual(before.map((e) => e.metadata));
  }, 90_000);
});

describe('erasure of a person whose events were written before sealing (distributed mode)', () => {
  let service: TestService;

  beforeAll(async () => {
    service = await startTestService('distributed');
    const raw = createEsdbEventStore(service.env.EVENTSTORE_URL ?? '');
    await appendV1(raw);
    await raw.close();
  }, 60_000);
  afterAll(() => service?.stop());

  test('EventStoreDB cannot rewrite them: the erasure finishes and reports the streams still holding them, by name only', async () => {
    await until(async () => (await service.readStore.collection('devices').get(HUB)) !== null, 'the hub in the read model');
    expect(await eraseCustomer(service)).toMatchObject({ status: 200, body: { erased: true, userId: USER } });
    const logs = service.logs();
    const line = logs.split('\n').find((l) => l.includes('erasure: events written before personal fields were sealed'));
    expect(line).toBeDefined();
    const reported = JSON.parse(line ?? '{}') as { streams?: string[]; events?: number };
    const fixtureFamily = 'f0e1d2c3-b4a5-4968-8776-655443322110';
    expect([...(reported.streams ?? [])].sort()).toEqual([`device-${HUB}`, `session-${FAMILY}`, `session-${fixtureFamily}`, `user-${USER}`].sort());
    // UserSynced and EmailVerified; RefreshIssued and RefreshReuseDetected; RefreshIssued; DeviceRegistered.
    expect(reported.events).toBe(6);
    expect(foundIn(Buffer.from(logs, 'utf8'), PERSONAL)).toEqual([]);
    // The account is gone all the same: a later sync of the same customer creates a new user.
    const again = await api(service, 'POST', '/auth/sync-customer', {
      headers: { 'X-Internal-Api-Key': CRM_KEY },
      body: { id: SYNC_ID, first_name: 'New', last_name: 'Person', email: `new.${tag}@example.org`, active: true },
    });
    expect(again.status).toBe(201);
  }, 90_000);
});
