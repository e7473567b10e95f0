/**
 * Not a defect: a check that held. What a private store pre-records at append for the events it
 * sealed (what opening them will give) is what a process that never saw the append reads from
 * the log: for data JSON changes on the way (dates, NaN, -0, undefined in arrays and objects,
 * toJSON, large and small numbers, nested personal fields), in the embedded log.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openFileCredentialStore } from '../../src/infra/credentials/file';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import type { EventStore, NewEvent, RecordedEvent } from '../../src/infra/eventstore/port';
import { derivePrivacyKeys } from '../../src/privacy/crypto';
import { createPrivateEventStore } from '../../src/privacy/event-store';
import { createKeyring } from '../../src/privacy/keyring';

const meta = { occurredAt: '2026-11-27T10:00:00.000Z', actor: { type: 'system' as const, id: 'review' }, requestId: 'r', causationId: 'c', correlationId: 'r' };

async function readAll(store: EventStore, stream: string): Promise<RecordedEvent[]> {
  const out: RecordedEvent[] = [];
  for await (const e of store.readStream(stream)) out.push(e);
  return out;
}

const odd = (): Record<string, unknown> => ({
  when: new Date('2026-11-27T10:00:00.000Z'),
  nan: Number.NaN,
  negativeZero: -0,
  big: 1e21,
  small: 5e-324,
  gone: undefined,
  list: [undefined, 1, Number.POSITIVE_INFINITY, -0, { toJSON: () => 'as-json' }],
  nested: { a: undefined, b: -0 },
});

test('pre-recorded opened events equal what a fresh process reads', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'hhc-review-prerecorded-'));
  const raw = await openEmbeddedEventStore(dir, { reclaimIntervalMs: 0 });
  const credentials = await openFileCredentialStore(dir);
  const kek = derivePrivacyKeys('k'.repeat(40)).keyEncryptionKey;
  try {
    const here = createPrivateEventStore(raw, { keyring: createKeyring(credentials, kek) });
    const userId = randomUUID();
    const device = randomUUID();
    const events: Array<[string, NewEvent]> = [
      [
        `user-${userId}`,
        {
          id: randomUUID(),
          type: 'UserSynced',
          data: { userId, created: true, syncId: 3, email: `${userId}@example.org`, firstName: 'Ada', lastName: 'Lovelace', profile: { tz: -0, odd: odd() }, crm: odd(), syncedAt: meta.occurredAt, ...odd() },
          metadata: meta,
        },
      ],
      [
        `device-${device}`,
        {
          id: randomUUID(),
          type: 'DeviceRegistered',
          data: { id: 'i', uuid: device, deviceId: 'HUB', name: 'Attic', ipAddress: '10.0.0.9', port: '8123', metadata: odd(), gen: 0, registeredAt: meta.occurredAt, ...odd() },
          metadata: meta,
        },
      ],
      [`device-${device}`, { id: randomUUID(), type: 'DeviceUpdated', data: { uuid: device, changes: { name: 'Den', metadata: odd(), port: -0 }, source: 'user', updatedAt: meta.occurredAt }, metadata: meta }],
    ];
    for (const [stream, event] of events) await here.append(stream, [event], 'any');
    const elsewhere = createPrivateEventStore(raw, { keyring: createKeyring(credentials, kek) });
    for (const stream of [`user-${userId}`, `device-${device}`]) {
      const mine = (await readAll(here, stream)).map((e) => e.data);
      const theirs = (await readAll(elsewhere, stream)).map((e) => e.data);
      expect(mine).toStrictEqual(theirs);
      expect(JSON.stringify(mine)).toBe(JSON.stringify(theirs));
    }
  } finally {
    await raw.close();
    await credentials.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
