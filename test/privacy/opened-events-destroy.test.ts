/**
 * The opened events a private store keeps (by event id, while their key is held) go as soon as
 * their person's key is destroyed in this process, not only once their UserErased passes by or
 * the same event is read again: after an erasure here, the opened plaintext is not reachable.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openFileCredentialStore } from '../../src/infra/credentials/file';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import { derivePrivacyKeys } from '../../src/privacy/crypto';
import { createPrivateEventStore } from '../../src/privacy/event-store';
import { createKeyring, userSubject } from '../../src/privacy/keyring';
import { collectGarbage, lastDataRef } from '../support/gc';

const meta = { occurredAt: '2026-11-27T10:00:00.000Z', actor: { type: 'system' as const, id: 'test' }, requestId: 'r', causationId: 'c', correlationId: 'r' };

test('a key destroyed in this process drops what the private store kept opened with it at once', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'hhc-opened-destroy-'));
  const raw = await openEmbeddedEventStore(dir, { reclaimIntervalMs: 0 });
  const credentials = await openFileCredentialStore(dir);
  try {
    const keyring = createKeyring(credentials, derivePrivacyKeys('k'.repeat(40)).keyEncryptionKey);
    const store = createPrivateEventStore(raw, { keyring });
    const userId = randomUUID();
    const stream = `user-${userId}`;
    await store.append(stream, [{ id: randomUUID(), type: 'UserSynced', data: { userId, created: true, syncId: 1, email: `${userId}@example.org`, firstName: 'Ada', lastName: 'Lovelace', syncedAt: meta.occurredAt }, metadata: meta }], 'no_stream');
    // Two reads hand out the same kept object (opened once).
    const first = await lastDataRef(store, stream);
    const second = await lastDataRef(store, stream);
    expect(first?.deref()).toBeDefined();
    expect(second?.deref()).toBe(first?.deref());
    expect((first?.deref() as { email?: string }).email).toBe(`${userId}@example.org`);

    await keyring.destroy([userSubject(userId)], userId);
    await collectGarbage();
    // Nothing read the stream again since the destruction.
    expect(first?.deref()).toBeUndefined();
  } finally {
    await raw.close();
    await credentials.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
