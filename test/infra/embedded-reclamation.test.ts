import { mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  openEmbeddedEventStore,
  type CompactionStep,
  type EmbeddedEventStore,
  type EmbeddedEventStoreOptions,
} from '../../src/infra/eventstore/embedded';
import type { RecordedEvent } from '../../src/infra/eventstore/port';
import { readAll } from '../contract/eventstore.contract';
import { writeLegacyLog } from './fixtures/legacy-log';
import { event, HISTORY_START, HUBS, isReclaimable, replay, SILENT_HUB, writeHeartbeatHistory } from './fixtures/heartbeat-history';

/** Reclamation of expired heartbeats from disk, on a fake clock. */

const SEGMENT_BYTES = 4096;

describe('reclaiming expired heartbeats', () => {
  let dir: string;
  const clock = { now: 0 };
  let notes: string[];
  const stores: EmbeddedEventStore[] = [];

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'hhc-reclaim-'));
    notes = [];
  });

  afterEach(async () => {
    await Promise.all(stores.splice(0).map((store) => store.close()));
    await rm(dir, { recursive: true, force: true });
  });

  async function open(options: EmbeddedEventStoreOptions = {}): Promise<EmbeddedEventStore> {
    const store = await openEmbeddedEventStore(dir, {
      now: () => clock.now,
      segmentBytes: SEGMENT_BYTES,
      reclaimIntervalMs: 0,
      log: (note) => notes.push(note),
      ...options,
    });
    stores.push(store);
    return store;
  }

  async function closed(store: EmbeddedEventStore): Promise<void> {
    await store.close();
    stores.splice(stores.indexOf(store), 1);
  }

  async function segmentBytes(): Promise<number> {
    const names = (await readdir(dir)).filter((name) => name.endsWith('.log'));
    return (await Promise.all(names.map(async (name) => (await stat(join(dir, name))).size))).reduce((a, b) => a + b, 0);
  }

  const ids = (events: readonly RecordedEvent[]): string[] => events.map((e) => e.id);

  it('removes expired heartbeats from disk and keeps every other event, in order, at its position', async () => {
    const store = await open();
    await writeHeartbeatHistory(store, clock);
    const before = await replay(store);
    const visibleBefore = await Promise.all([...HUBS, SILENT_HUB].map((hub) => readAll(store.readStream(`heartbeat-${hub}`))));
    const bytesOnDisk = await segmentBytes();

    const result = await store.reclaimExpired();

    const expected = before.filter((e) => !isReclaimable(e, before, clock.now));
    expect(result.eventsReclaimed).toBe(before.length - expected.length);
    expect(result.eventsReclaimed).toBeGreaterThan(200);
    expect(result.segmentsCompacted).toBeGreaterThan(3);
    expect(result.bytesBefore).toBe(bytesOnDisk);
    expect(result.bytesAfter).toBe(await segmentBytes());
    expect(result.bytesAfter).toBeLessThan(bytesOnDisk * 0.75);
    const after = await replay(store);
    expect(after).toEqual(expected);
    // Reads hid the expired heartbeats already: they read the same.
    for (const [i, hub] of [...HUBS, SILENT_HUB].entries()) {
      expect(await readAll(store.readStream(`heartbeat-${hub}`))).toEqual(visibleBefore[i]);
    }
    // The silent hub's newest heartbeat stays on disk (a full replay still sees it); its older ones do not.
    const silent = after.filter((e) => e.streamName === `heartbeat-${SILENT_HUB}`);
    expect(silent.map((e) => e.revision)).toEqual([9n]);
    // A $maxAge stream that is not a heartbeat stream keeps everything.
    expect(after.filter((e) => e.streamName === 'session-1')).toEqual(before.filter((e) => e.streamName === 'session-1'));
    expect((await store.reclaimExpired()).eventsReclaimed).toBe(0);

    await closed(store);
    const reopened = await open();
    expect(await replay(reopened)).toEqual(expected);
    expect(notes.filter((note) => note.includes('not used'))).toEqual([]);
  }, 60_000);

  it('goes on reclaiming as time passes, and appends continue meanwhile', async () => {
    const store = await open();
    await writeHeartbeatHistory(store, clock);
    await store.reclaimExpired();
    clock.now += 30 * 60_000;
    const before = await replay(store);

    const reclaiming = store.reclaimExpired();
    const appended = await Promise.all(
      Array.from({ length: 40 }, (_, i) => store.append(`heartbeat-${HUBS[i % 2] ?? ''}`, [event('HeartbeatReceived', clock.now)], 'any')),
    );
    const result = await reclaiming;

    expect(result.eventsReclaimed).toBe(before.filter((e) => isReclaimable(e, before, clock.now)).length);
    expect(result.eventsReclaimed).toBeGreaterThan(50);
    const after = await replay(store);
    expect(ids(after)).toEqual([...ids(before.filter((e) => !isReclaimable(e, before, clock.now))), ...ids(after.slice(-40))]);
    expect(after.slice(-40).map((e) => e.position)).toEqual(appended.map((a) => a.position));
    const positions = after.map((e) => e.position.commit);
    expect(positions).toEqual([...positions].sort((a, b) => (a < b ? -1 : 1)));
  }, 60_000);

  it('compacts a log of earlier versions: expired heartbeats go, everything else keeps its position and reads the same', async () => {
    const start = Date.parse('2025-06-01T00:00:00.000Z');
    const hub = HUBS[0] as string;
    const metadata = { ...event('$metadata', start), data: { $maxAge: 60 } };
    const heartbeats = Array.from({ length: 40 }, (_, i) => ({
      streamName: `heartbeat-${hub}`,
      revision: i,
      writtenAt: start + i * 10_000,
      event: event('HeartbeatReceived', start + i * 10_000, { uuid: hub }),
    }));
    await writeLegacyLog(join(dir, 'events.log'), [
      { streamName: `device-${hub}`, revision: 0, writtenAt: start, event: event('DeviceRegistered', start) },
      { streamName: `$$heartbeat-${hub}`, revision: 0, writtenAt: start, event: metadata },
      ...heartbeats,
    ]);
    clock.now = start + 400_000;
    const store = await open();
    await store.append('user-1', [event('UserSynced', clock.now)], 'no_stream');
    const before = await replay(store);

    const result = await store.reclaimExpired();

    // Written before now - 60 s (and not the newest): the first 34 of 40.
    expect(result.eventsReclaimed).toBe(34);
    const after = await replay(store);
    expect(after).toEqual(before.filter((e) => !(e.streamName.startsWith('heartbeat-') && e.revision < 34n)));
    expect((await readAll(store.readStream(`heartbeat-${hub}`))).map((e) => e.revision)).toEqual([34n, 35n, 36n, 37n, 38n, 39n]);
  });

  it('lets a replay that spans a compaction go on from where it was, with nothing doubled or lost', async () => {
    const store = await open();
    await writeHeartbeatHistory(store, clock);
    const before = await replay(store);
    const subscription = store.subscribe();
    const iterator = subscription[Symbol.asyncIterator]();
    const seen: RecordedEvent[] = [];
    for (let i = 0; i < 25; i++) {
      const next = await iterator.next();
      if (next.done === true || next.value.kind !== 'event') throw new Error('replay ended early');
      seen.push(next.value.event);
    }

    await store.reclaimExpired();

    for (;;) {
      const next = await iterator.next();
      if (next.done === true || next.value.kind === 'caught-up') break;
      seen.push(next.value.event);
    }
    await subscription.close();
    expect(ids(seen.filter((e) => !isReclaimable(e, before, clock.now)))).toEqual(ids(before.filter((e) => !isReclaimable(e, before, clock.now))));
    expect(new Set(ids(seen)).size).toBe(seen.length);
    expect(seen.length).toBeLessThan(before.length);
  });

  it('takes a long history in bulk with chosen written-at times (appendHistory), which reclamation then sees', async () => {
    const hub = HUBS[0] as string;
    const start = Date.parse('2026-01-01T00:00:00.000Z');
    clock.now = start;
    const store = await open();
    await store.setStreamMaxAge(`heartbeat-${hub}`, 60);
    const history = Array.from({ length: 3000 }, (_, i) => ({
      streamName: i % 10 === 0 ? `device-${hub}` : `heartbeat-${hub}`,
      events: [event(i % 10 === 0 ? 'DeviceUpdated' : 'HeartbeatReceived', start + i * 1000)],
      // Times that go back are clamped: written-at never decreases along the log.
      writtenAt: i === 2999 ? start : start + i * 1000,
    }));

    await store.appendHistory(history.slice(0, 1500));
    await store.appendHistory(history.slice(1500));
    clock.now = start + 3000 * 1000;

    const all = await replay(store);
    expect(all.map((e) => e.id)).toEqual(history.map((h) => h.events[0]?.id));
    const visible = await readAll(store.readStream(`heartbeat-${hub}`));
    // Heartbeats written in the last 60 s: entries 2940..2999 less the device events, the
    // last one clamped to the time before it rather than going back to the start.
    expect(visible.map((e) => e.revision)).toEqual(Array.from({ length: 54 }, (_, i) => BigInt(2646 + i)));
    const result = await store.reclaimExpired();
    expect(result.eventsReclaimed).toBeGreaterThan(2000);
    expect((await replay(store)).filter((e) => e.streamName === `device-${hub}`)).toHaveLength(300);
  });

  it('runs again on its timer while the store is open, and not after close', async () => {
    const writer = await open();
    await writeHeartbeatHistory(writer, clock);
    await closed(writer);
    const end = clock.now;
    clock.now = HISTORY_START + 30 * 60_000; // nothing has expired yet

    const store = await open({ reclaimIntervalMs: 100 });
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(notes.filter((note) => note.includes('reclaimed'))).toEqual([]);
    clock.now = end;
    await waitFor(() => notes.some((note) => note.includes('reclaimed')));

    await closed(store);
    const after = notes.length;
    await new Promise((resolve) => setTimeout(resolve, 400));
    expect(notes).toHaveLength(after);
  }, 60_000);

  it('runs by itself right after open', async () => {
    const first = await open();
    await writeHeartbeatHistory(first, clock);
    await closed(first);

    const store = await open({ reclaimIntervalMs: 3_600_000 });
    await waitFor(() => notes.some((note) => note.includes('reclaimed')));

    expect(notes.find((note) => note.includes('reclaimed'))).toMatch(/reclaimed \d+ expired heartbeats from \d+ segments/);
    expect((await store.reclaimExpired()).eventsReclaimed).toBe(0);
  }, 60_000);

  it.each<CompactionStep>(['temporary-written', 'temporary-synced', 'renamed', 'directory-synced', 'index-written'])(
    'survives a compaction failing after step "%s": nothing lost, appends go on, a later run finishes',
    async (failingStep) => {
      let failed = false;
      const store = await open({
        compactionHook: (step) => {
          if (step === failingStep && !failed) {
            failed = true;
            throw new Error(`injected failure after ${step}`);
          }
        },
      });
      await writeHeartbeatHistory(store, clock);
      const before = await replay(store);
      const expected = before.filter((e) => !isReclaimable(e, before, clock.now));

      await expect(store.reclaimExpired()).rejects.toThrow(`injected failure after ${failingStep}`);

      const mid = await replay(store);
      expect(ids(mid.filter((e) => !isReclaimable(e, before, clock.now)))).toEqual(ids(expected));
      await store.append('user-1', [event('UserSynced', clock.now)], 'any');
      await store.reclaimExpired();
      expect(ids(await replay(store))).toEqual([...ids(expected), ...ids((await replay(store)).slice(-1))]);
      await closed(store);
      const reopened = await open();
      expect((await replay(reopened)).slice(0, -1)).toEqual(expected);
    },
    60_000,
  );
});

async function waitFor(condition: () => boolean): Promise<void> {
  for (let i = 0; i < 400 && !condition(); i++) await new Promise((resolve) => setTimeout(resolve, 25));
  if (!condition()) throw new Error('condition not met in time');
}
