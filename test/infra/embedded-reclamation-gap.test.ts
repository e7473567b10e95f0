import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import { newEvent, readAll } from '../contract/eventstore.contract';

describe('embedded log: reclamation across a fully reclaimed segment', () => {
  it('never cuts a heartbeat stream in the middle: the log opens again and the stream goes on at its next revision', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'hhc-embedded-reclaim-gap-'));
    const t0 = Date.UTC(2030, 0, 1);
    let now = t0;
    const options = { now: () => now, segmentBytes: 600, reclaimIntervalMs: 0, log: () => undefined, onTornTail: () => undefined };
    try {
      const store = await openEmbeddedEventStore(dir, options);
      await store.setStreamMaxAge('heartbeat-s', 7200);
      await store.setStreamMaxAge('heartbeat-t', 7200);
      await store.setStreamMaxAge('heartbeat-u', 60);
      for (let i = 0; i < 3; i++) await store.append('heartbeat-s', [newEvent('S')], 'any');
      // Segments of nothing but short-lived heartbeats: emptied by the first reclamation.
      for (let i = 0; i < 12; i++) await store.append('heartbeat-u', [newEvent('U')], 'any');
      for (let i = 0; i < 4; i++) await store.append('heartbeat-s', [newEvent('S')], 'any');
      await store.append('heartbeat-t', [newEvent('T')], 'any');
      await store.append('heartbeat-s', [newEvent('S')], 'any');
      now = t0 + 60_000;
      for (let i = 0; i < 4; i++) await store.append('device-filler', [newEvent('F')], 'any');
      await store.append('heartbeat-u', [newEvent('U')], 'any');
      await store.append('heartbeat-t', [newEvent('T')], 'any');
      await store.append('heartbeat-s', [newEvent('S')], 'any');
      for (let i = 0; i < 6; i++) await store.append('device-filler', [newEvent('F')], 'any');
      now = t0 + 3_600_000;
      await store.reclaimExpired();
      now = t0 + 3 * 3_600_000;
      await store.reclaimExpired();
      const kept = (await readAll(store.readStream('heartbeat-s'))).map((event) => Number(event.revision));
      await store.close();

      const reopened = await openEmbeddedEventStore(dir, options);
      const revisions = (await readAll(reopened.readStream('heartbeat-s'))).map((event) => Number(event.revision));
      expect(revisions).toEqual(kept);
      // The stream goes on at its next revision: nothing was cut out of its middle.
      const next = await reopened.append('heartbeat-s', [newEvent('S')], 8n);
      expect(next.nextExpectedRevision).toBe(9n);
      expect((await readAll(reopened.readStream('heartbeat-s'))).map((event) => Number(event.revision))).toEqual([9]);
      await reopened.close();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
