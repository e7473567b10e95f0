import { copyFile, mkdtemp, open, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CorruptEventLogError, EVENT_LOG_FILE_NAME, openEmbeddedEventStore, type EmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import type { RecordedEvent } from '../../src/infra/eventstore/port';
import { newEvent, readAll } from '../contract/eventstore.contract';
import { replay } from './fixtures/heartbeat-history';
import { writeLegacyLog } from './fixtures/legacy-log';

/** Segments, their index checkpoints at open (and the fallbacks), and logs of earlier versions. */

const SEGMENT_BYTES = 4096;

describe('embedded log segments', () => {
  let dir: string;
  let notes: string[];
  const stores: EmbeddedEventStore[] = [];

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'hhc-segments-'));
    notes = [];
  });

  afterEach(async () => {
    await Promise.all(stores.splice(0).map((store) => store.close()));
    await rm(dir, { recursive: true, force: true });
  });

  async function openStore(): Promise<EmbeddedEventStore> {
    const store = await openEmbeddedEventStore(dir, { segmentBytes: SEGMENT_BYTES, reclaimIntervalMs: 0, log: (note) => notes.push(note) });
    stores.push(store);
    return store;
  }

  async function reopen(store: EmbeddedEventStore): Promise<EmbeddedEventStore> {
    await store.close();
    stores.splice(stores.indexOf(store), 1);
    return openStore();
  }

  async function filesEndingWith(suffix: string): Promise<string[]> {
    // In log order: events.log is the first segment.
    const names = (await readdir(dir)).filter((name) => name.endsWith(suffix)).sort();
    return [...names.filter((name) => name.startsWith(EVENT_LOG_FILE_NAME)), ...names.filter((name) => !name.startsWith(EVENT_LOG_FILE_NAME))];
  }

  async function fillSegments(store: EmbeddedEventStore): Promise<RecordedEvent[]> {
    for (let i = 0; i < 120; i++) await store.append(`stream-${i % 7}`, [newEvent(`E${i}`), newEvent(`F${i}`)], 'any');
    return replay(store);
  }

  it('seals full segments, and a reopen reads their index checkpoints instead of the segments', async () => {
    const store = await openStore();
    const events = await fillSegments(store);
    const segments = await filesEndingWith('.log');

    const reopened = await reopen(store);

    expect(segments.length).toBeGreaterThan(5);
    expect(segments[0]).toBe(EVENT_LOG_FILE_NAME);
    expect(await filesEndingWith('.idx')).toEqual(segments.map((name) => `${name}.idx`));
    expect(notes).toEqual([]);
    expect(await replay(reopened)).toEqual(events);
    expect(await readAll(reopened.readStream('stream-3'))).toEqual(events.filter((e) => e.streamName === 'stream-3'));
    const middle = events[100] as RecordedEvent;
    const fromMiddle = reopened.subscribe({ fromPosition: middle.position });
    const rest: RecordedEvent[] = [];
    for await (const item of fromMiddle) {
      if (item.kind === 'caught-up') break;
      rest.push(item.event);
    }
    await fromMiddle.close();
    expect(rest).toEqual(events.slice(101));
    const next = await reopened.append('stream-3', [newEvent('After')], BigInt(events.filter((e) => e.streamName === 'stream-3').length - 1));
    expect(next.position.commit).toBeGreaterThan((events.at(-1) as RecordedEvent).position.commit);
  });

  it('opens without reading sealed segments: only their checkpoints', async () => {
    const store = await openStore();
    const events = await fillSegments(store);
    await store.close();
    stores.splice(0);
    const [first] = await filesEndingWith('.log');
    // Damage inside a sealed segment that has a checkpoint goes unseen by open...
    const handle = await open(join(dir, first as string), 'r+');
    await handle.write(Buffer.from('damage'), 0, 6, 100);
    await handle.close();

    const reopened = await openStore();

    expect(notes).toEqual([]);
    // ...and is refused by the read that meets it, never handed out as an event.
    await expect(replay(reopened)).rejects.toThrow(/unreadable/);
    expect(await readAll(reopened.readStream((events.at(-1) as RecordedEvent).streamName, { direction: 'backwards', maxCount: 1 }))).toHaveLength(1);
  });

  it.each([
    ['missing', async (file: string) => rm(file)],
    ['damaged', async (file: string) => writeFile(file, Buffer.concat([Buffer.from('HHEVIDX\x01', 'latin1'), Buffer.alloc(200, 7)]))],
    ['stale', async (file: string, other: string) => copyFile(other, file)],
  ])('scans a segment whose checkpoint is %s, says so, and writes a new one', async (_, spoil) => {
    const store = await openStore();
    const events = await fillSegments(store);
    await store.close();
    stores.splice(0);
    const [firstIndex, secondIndex] = await filesEndingWith('.idx');
    await spoil(join(dir, firstIndex as string), join(dir, secondIndex as string));

    const reopened = await openStore();

    expect(notes).toHaveLength(1);
    expect(notes[0]).toMatch(new RegExp(`index checkpoint of ${EVENT_LOG_FILE_NAME} not used \\(.+\\); scanning the segment`));
    expect(await replay(reopened)).toEqual(events);
    expect((await stat(join(dir, firstIndex as string))).size).toBeGreaterThan(100);
    notes.length = 0;
    expect(await replay(await reopen(reopened))).toEqual(events);
    expect(notes).toEqual([]);
  });

  it("uses the active segment's checkpoint from close only while the bytes it covers are unchanged", async () => {
    const store = await openStore();
    const events = await fillSegments(store);
    await store.close();
    stores.splice(0);
    const active = (await filesEndingWith('.log')).at(-1) as string;
    // Garbage after the covered bytes (a torn write) is dropped; the checkpoint still holds.
    await writeFile(join(dir, active), Buffer.alloc(50, 0xee), { flag: 'a' });

    const reopened = await openStore();

    expect(notes).toEqual([]);
    expect(await replay(reopened)).toEqual(events);
    await reopened.close();
    stores.splice(0);
    const handle = await open(join(dir, active), 'r+');
    await handle.write(Buffer.from('damage'), 0, 6, 200);
    await handle.close();

    await expect(openStore()).rejects.toBeInstanceOf(CorruptEventLogError);
    expect(notes).toEqual([`Event log: index checkpoint of ${active} not used (its checksum of the segment does not match); scanning the segment`]);
  });

  it('keeps only a few dozen segment files open, however many segments a replay reads', async () => {
    const openFiles = async (): Promise<number> => (await readdir('/proc/self/fd')).length;
    const store = await openEmbeddedEventStore(dir, { segmentBytes: 1024, reclaimIntervalMs: 0 });
    stores.push(store);
    for (let round = 0; round < 40; round++) {
      await Promise.all(Array.from({ length: 20 }, (_, i) => store.append(`stream-${i}`, [newEvent(`E${round}`)], 'any')));
    }
    const reopened = await reopen(store);
    const before = await openFiles();

    const events = await replay(reopened);

    expect(events).toHaveLength(800);
    expect((await filesEndingWith('.log')).length).toBeGreaterThan(150);
    expect((await openFiles()) - before).toBeLessThanOrEqual(64);
  });

  it.each([
    ['before its header was written', 0],
    ['in the middle of its header', 9],
    ['right after its header', 16],
  ])('recovers from a crash while starting a new segment, %s', async (_, headerBytes) => {
    const store = await openStore();
    const events = await fillSegments(store);
    await store.close();
    stores.splice(0);
    // The state a crash leaves: the segment before was synced whole, but its checkpoint is
    // not written yet; the new segment's file exists with only part of its header.
    const segments = await filesEndingWith('.log');
    const [sealed, active] = segments.slice(-2) as [string, string];
    await rm(join(dir, `${sealed}.idx`));
    await rm(join(dir, `${active}.idx`));
    const inActive = events.filter((e) => e.position.commit >= BigInt(Number(active.slice(7, 23))));
    await writeFile(join(dir, active), (await readFile(join(dir, active))).subarray(0, headerBytes));

    const reopened = await openStore();

    expect(await replay(reopened)).toEqual(events.slice(0, events.length - inActive.length));
    expect(notes).toEqual([`Event log: index checkpoint of ${sealed} not used (missing); scanning the segment`]);
    await reopened.append('stream-0', [newEvent('After')], 'any');
    expect((await replay(await reopen(reopened))).at(-1)?.type).toBe('After');
  });

  it('refuses damage in a sealed segment that has to be scanned', async () => {
    const store = await openStore();
    await fillSegments(store);
    await store.close();
    stores.splice(0);
    const [first] = await filesEndingWith('.log');
    await rm(join(dir, `${first as string}.idx`));
    const handle = await open(join(dir, first as string), 'r+');
    await handle.write(Buffer.from('damage'), 0, 6, 100);
    await handle.close();

    await expect(openStore()).rejects.toBeInstanceOf(CorruptEventLogError);
  });

  it('opens a single-file log of earlier versions: same events at the same positions, new appends in new segments', async () => {
    const old = Date.parse('2025-06-01T00:00:00.000Z');
    const appends = Array.from({ length: 60 }, (_, i) => ({
      streamName: `legacy-${i % 3}`,
      revision: Math.floor(i / 3),
      writtenAt: old + i * 1000,
      event: newEvent(`Old${i}`, { i, at: new Date(old + i).toISOString() }),
    }));
    const positions = await writeLegacyLog(join(dir, EVENT_LOG_FILE_NAME), appends);

    const store = await openStore();
    const events = await replay(store);

    // Larger than a segment: sealed at once with a checkpoint, so the next open need not check it all.
    expect(await filesEndingWith('.idx')).toEqual([`${EVENT_LOG_FILE_NAME}.idx`]);
    expect(await filesEndingWith('.log')).toHaveLength(2);
    expect(events.map((e) => [e.streamName, Number(e.revision), Number(e.position.commit), e.data, e.metadata])).toEqual(
      appends.map((a, i) => [a.streamName, a.revision, positions[i], a.event.data, a.event.metadata]),
    );
    for (let i = 0; i < 30; i++) await store.append('legacy-1', [newEvent(`New${i}`)], 'any');
    const reopened = await reopen(store);
    expect((await filesEndingWith('.log')).length).toBeGreaterThan(1);
    expect((await replay(reopened)).slice(0, 60)).toEqual(events);
    expect((await readAll(reopened.readStream('legacy-1'))).map((e) => e.type)).toEqual([
      ...appends.filter((a) => a.streamName === 'legacy-1').map((a) => a.event.type),
      ...Array.from({ length: 30 }, (_, i) => `New${i}`),
    ]);
  });
});
