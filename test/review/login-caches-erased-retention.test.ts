/**
 * Decisions §11: after an erasure nothing the service keeps holds the person's data in
 * readable form. Events written before sealing (version 1) hold it in the clear; the erasure
 * rewrites their segments. The records read from segment files are kept decoded (the last
 * 2,048, by position, tied to the segment object): a compaction replaces the segment, so the
 * old record is never served again, but it stays in the cache, with its decoded event (and its
 * bytes, in the clear), until its position is read again or 2,048 later reads push it out. Here: the decoded data of a version-1 event read before the
 * erasure must not stay reachable in the process once nothing of the caller refers to it.
 */
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import type { EventStore } from '../../src/infra/eventstore/port';
import { collectGarbage, lastDataRef } from '../support/gc';

const meta = { occurredAt: '2026-11-27T10:00:00.000Z', actor: { type: 'system' as const, id: 'review' }, requestId: 'r', causationId: 'c', correlationId: 'r' };

async function emails(store: EventStore, stream: string): Promise<unknown[]> {
  const out: unknown[] = [];
  for await (const event of store.readStream(stream)) out.push((event.data as { email?: unknown }).email);
  return out;
}

test('the decoded plaintext of a version-1 event read before its erasure rewrite is not kept reachable after it', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'hhc-review-retention-'));
  try {
    const userId = randomUUID();
    const stream = `user-${userId}`;
    const writer = await openEmbeddedEventStore(dir, { reclaimIntervalMs: 0 });
    // As the first release wrote it: no `$v`, the personal fields in the clear.
    await writer.append(stream, [{ id: randomUUID(), type: 'UserSynced', data: { userId, created: true, syncId: 5, email: `${userId}@example.org`, firstName: 'Vera', lastName: 'Old', syncedAt: meta.occurredAt }, metadata: meta }], 'no_stream');
    await writer.append('device-other', [{ id: randomUUID(), type: 'Other', data: {}, metadata: meta }], 'no_stream');
    await writer.close();

    // Another start: the record is read from its segment file (each login reads the user's stream).
    const store = await openEmbeddedEventStore(dir, { reclaimIntervalMs: 0 });
    // Twice, as two logins do.
    await lastDataRef(store, stream);
    const ref = await lastDataRef(store, stream);
    // The erasure: the segment rewritten with the fields "[erased]".
    await store.rewriteStreams([stream], (name, event) =>
      name === stream ? { ...event, data: { ...(event.data as Record<string, unknown>), email: '[erased]', firstName: '[erased]', lastName: '[erased]' } } : null,
    );
    await collectGarbage();
    // Before anything reads the position again (a read would replace the cache entry).
    const stillThere = (ref?.deref() as { email?: string } | undefined)?.email;
    expect(await emails(store, stream)).toEqual(['[erased]']);
    await store.close();
    expect(stillThere).toBeUndefined();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
