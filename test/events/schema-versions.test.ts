import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EVENT_CATEGORY } from '../../src/domain/events';
import { CURRENT_VERSIONS, UPCASTERS, VERSION_FIELD, missingUpcasters, stampVersion, storedVersion, upcast, UnknownEventVersionError } from '../../src/events/schema-versions';
import { openFileCredentialStore } from '../../src/infra/credentials/file';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import type { RecordedEvent } from '../../src/infra/eventstore/port';
import { createPrivateEventStore } from '../../src/privacy/event-store';
import { createKeyring } from '../../src/privacy/keyring';
import { derivePrivacyKeys } from '../../src/privacy/crypto';

/**
 * The first schema change done properly: every event type has a version, and what earlier
 * releases wrote (their JSON, and the bytes of an embedded log their code wrote) reads, through
 * the one registry, as the current version. These fixtures are never edited.
 */

const FIXTURES = join(__dirname, '..', 'fixtures', 'events');

interface Fixture {
  readonly streamName: string;
  readonly type: string;
  readonly data: Record<string, unknown>;
  readonly metadata: Record<string, unknown>;
}

function v1Fixtures(): Fixture[] {
  return readdirSync(join(FIXTURES, 'v1'))
    .filter((f) => f.endsWith('.json'))
    .map((f) => JSON.parse(readFileSync(join(FIXTURES, 'v1', f), 'utf8')) as Fixture);
}

describe('event schema versions', () => {
  test('every event type of the domain has a version, and every version above 1 a complete upcaster chain', () => {
    for (const type of Object.keys(EVENT_CATEGORY)) expect(CURRENT_VERSIONS[type]).toBeGreaterThanOrEqual(1);
    expect(missingUpcasters()).toEqual([]);
  });

  test('a fixture of version 1 exists for every type version 1 knew', () => {
    const pinned = new Set(v1Fixtures().map((f) => f.type));
    // Types that came after version 1: no log of that release holds them.
    const sinceV1 = new Set(['UserErased', 'DeviceStateSnapshotted', 'EmailClaimWithdrawn']);
    const known = Object.keys(CURRENT_VERSIONS).filter((t) => !sinceV1.has(t));
    expect([...known].filter((t) => !pinned.has(t))).toEqual([]);
  });

  test.each(v1Fixtures().map((f) => [f.type, f] as const))('%s of version 1 upcasts to the current shape', (_type, fixture) => {
    expect(storedVersion(fixture.data)).toBe(1);
    const current = upcast(fixture.type, fixture.data) as Record<string, unknown>;
    expect(current).toEqual(fixture.data);
    expect(VERSION_FIELD in current).toBe(false);
  });

  test('the current version is stamped when above 1 and removed on read', () => {
    const stamped = stampVersion('UserSynced', { userId: 'u' }) as Record<string, unknown>;
    expect(stamped[VERSION_FIELD]).toBe(CURRENT_VERSIONS.UserSynced);
    expect(stampVersion('HeartbeatReceived', { uuid: 'x' })).toEqual({ uuid: 'x' });
    expect(upcast('UserSynced', stamped)).toEqual({ userId: 'u' });
  });

  test('a version newer than this build is refused by name, not misread', () => {
    expect(() => upcast('UserSynced', { [VERSION_FIELD]: 99 })).toThrow(UnknownEventVersionError);
  });

  test('upcasters run in order, one version at a time', () => {
    const calls: number[] = [];
    const steps = UPCASTERS as Record<string, Record<number, (d: Readonly<Record<string, unknown>>) => Readonly<Record<string, unknown>>>>;
    const versions = CURRENT_VERSIONS as Record<string, number>;
    steps.TestOnly = { 1: (d) => (calls.push(1), { ...d, b: 1 }), 2: (d) => (calls.push(2), { ...d, c: (d.b as number) + 1 }) };
    versions.TestOnly = 3;
    try {
      expect(upcast('TestOnly', { a: 0 })).toEqual({ a: 0, b: 1, c: 2 });
      expect(upcast('TestOnly', { a: 0, b: 5, [VERSION_FIELD]: 2 })).toEqual({ a: 0, b: 5, c: 6 });
      expect(calls).toEqual([1, 2, 2]);
    } finally {
      delete steps.TestOnly;
      delete versions.TestOnly;
    }
  });

  test("the embedded log written by the first release's code reads, through the service's store, as its events", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hhc-v1-log-'));
    try {
      cpSync(join(FIXTURES, 'v1-log'), dir, { recursive: true });
      const raw = await openEmbeddedEventStore(dir);
      const credentials = await openFileCredentialStore(dir);
      const store = createPrivateEventStore(raw, { keyring: createKeyring(credentials, derivePrivacyKeys('x'.repeat(40)).keyEncryptionKey) });
      const read: RecordedEvent[] = [];
      const subscription = store.subscribe();
      for await (const item of subscription) {
        if (item.kind === 'caught-up') break;
        read.push(item.event);
      }
      await subscription.close();
      // make-v1.ts appended them in this order, one per append.
      const { V1_EVENTS } = (await import('../fixtures/events/make-v1')) as { V1_EVENTS: Fixture[] };
      expect(read.map((e) => [e.streamName, e.type, e.data, e.metadata])).toEqual(V1_EVENTS.map((e) => [e.streamName, e.type, e.data, e.metadata]));
      await raw.close();
      await credentials.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
