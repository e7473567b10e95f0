/**
 * The embedded log under file-system faults, one focused case per defect, on the
 * simulation's in-memory file system (test/sim/sim-fs.ts) where faults are exact.
 */
import { mkdtemp, open, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CorruptEventLogError, EventStoreUnavailableError, openEmbeddedEventStore, type EmbeddedEventStore, type EmbeddedEventStoreOptions, type TornTail } from '../../src/infra/eventstore/embedded';
import { newEvent, readAll } from '../contract/eventstore.contract';
import { Rng } from '../sim/rng';
import type { OpenMode, StoreFile } from '../../src/infra/eventstore/embedded/io';
import { NO_FAULTS, SimFs, SimIoError } from '../sim/sim-fs';
import { loadSegmentIndex } from '../../src/infra/eventstore/embedded/segment-index-file';

const DIR = '/sim/data';

async function simStore(fs: SimFs, options: EmbeddedEventStoreOptions = {}): Promise<EmbeddedEventStore> {
  await fs.mkdir(DIR);
  return openEmbeddedEventStore(DIR, { io: fs, lock: async () => async () => undefined, reclaimIntervalMs: 0, log: () => undefined, onTornTail: () => undefined, ...options });
}

async function types(store: EmbeddedEventStore, stream: string): Promise<string[]> {
  return (await readAll(store.readStream(stream))).map((event) => event.type);
}

describe('embedded log under faults', () => {
  it('after a failed write answers "store unavailable" (503), fails readiness, serves reads, and resumes once space is back', async () => {
    const fs = new SimFs(new Rng(1));
    const store = await simStore(fs);
    await store.append('device-1', [newEvent('First')], 'no_stream');
    fs.faults = { ...NO_FAULTS, diskFull: true };

    const failed = await store.append('device-1', [newEvent('Second')], 0n).catch((error: unknown) => error);
    expect(failed).toBeInstanceOf(EventStoreUnavailableError);
    expect((failed as EventStoreUnavailableError).statusCode).toBe(503);
    await expect(store.append('device-1', [newEvent('Again')], 0n)).rejects.toBeInstanceOf(EventStoreUnavailableError);
    await expect(store.headPosition()).rejects.toThrow('Event store unavailable: writes failed');
    expect(await types(store, 'device-1')).toEqual(['First']);

    fs.faults = { ...NO_FAULTS };
    await store.append('device-1', [newEvent('Third')], 0n);
    expect(await store.headPosition()).not.toBeNull();
    expect(await types(store, 'device-1')).toEqual(['First', 'Third']);
    await store.close();
  });

  it('cuts a batch whose fsync failed, so a restart cannot take it as durable nor find a hole before later batches', async () => {
    const fs = new SimFs(new Rng(2));
    const store = await simStore(fs);
    await store.append('device-1', [newEvent('Kept')], 'no_stream');
    const committed = fs.fileBytes(`${DIR}/events.log`).length;
    fs.faults = { ...NO_FAULTS, syncEio: 1 };
    await expect(store.append('device-1', [newEvent('Failed')], 0n)).rejects.toBeInstanceOf(EventStoreUnavailableError);
    fs.faults = { ...NO_FAULTS };
    // The page cache no longer holds the failed batch (the file is cut back).
    await store.append('device-2', [newEvent('Later')], 'no_stream');
    expect(fs.fileBytes(`${DIR}/events.log`).length).toBeGreaterThan(committed);
    fs.crash();
    const reopened = await simStore(fs);
    expect(await types(reopened, 'device-1')).toEqual(['Kept']);
    expect(await types(reopened, 'device-2')).toEqual(['Later']);
    await reopened.close();
  });

  it('opens read-only on a full disk when a repair write at open fails, serves reads, and takes appends once writes work', async () => {
    const fs = new SimFs(new Rng(3));
    const store = await simStore(fs);
    await store.append('device-1', [newEvent('First')], 'no_stream');
    await store.close();
    fs.processExit();
    // The creation of the next segment was interrupted after its first bytes: open must finish it.
    const size = fs.fileBytes(`${DIR}/events.log`).length;
    const next = await fs.open(`${DIR}/events-${String(size).padStart(16, '0')}.log`, 'wx+');
    await next.write(fs.fileBytes(`${DIR}/events.log`), 0, 8, 0);
    await next.datasync();
    await next.close();
    await fs.syncDirectory(DIR);
    fs.faults = { ...NO_FAULTS, diskFull: true };
    const messages: string[] = [];

    const reopened = await simStore(fs, { log: (message) => messages.push(message) });

    expect(messages.some((message) => message.includes('opened read-only'))).toBe(true);
    expect(await types(reopened, 'device-1')).toEqual(['First']);
    await expect(reopened.append('device-1', [newEvent('Refused')], 0n)).rejects.toBeInstanceOf(EventStoreUnavailableError);
    await expect(reopened.headPosition()).rejects.toBeInstanceOf(EventStoreUnavailableError);
    fs.faults = { ...NO_FAULTS };
    await reopened.append('device-1', [newEvent('Second')], 0n);
    expect(await types(reopened, 'device-1')).toEqual(['First', 'Second']);
    await reopened.close();
  });

  it('opens read-only on a full disk found at open (nothing to repair), says so at once, serves reads, and resumes once space is back', async () => {
    const fs = new SimFs(new Rng(13));
    const store = await simStore(fs);
    await store.append('device-1', [newEvent('First')], 'no_stream');
    await store.close();
    fs.processExit();
    fs.faults = { ...NO_FAULTS, diskFull: true };
    const messages: string[] = [];

    const reopened = await simStore(fs, { log: (message) => messages.push(message) });

    expect(messages.filter((message) => message.includes('opened read-only'))).toEqual([
      "Event log: opened read-only (ENOSPC: simulated fault, write '/sim/data/events.log'); reads are served, appends are refused until a write succeeds",
    ]);
    await expect(reopened.headPosition()).rejects.toBeInstanceOf(EventStoreUnavailableError);
    expect(await types(reopened, 'device-1')).toEqual(['First']);
    await expect(reopened.append('device-1', [newEvent('Refused')], 0n)).rejects.toBeInstanceOf(EventStoreUnavailableError);
    fs.faults = { ...NO_FAULTS };
    expect(await reopened.headPosition()).not.toBeNull();
    await reopened.append('device-1', [newEvent('Second')], 0n);
    expect(await types(reopened, 'device-1')).toEqual(['First', 'Second']);
    expect(messages).toContain('Event log: writes work again; appends resume');
    await reopened.close();
  });

  it('removes the temporary file of a compaction that failed', async () => {
    const fs = new SimFs(new Rng(4));
    let now = Date.UTC(2030, 0, 1);
    const store = await simStore(fs, {
      now: () => now,
      segmentBytes: 600,
      compactionHook: (step) => {
        if (step === 'temporary-written') throw new Error('simulated failure');
      },
    });
    await store.setStreamMaxAge('heartbeat-1', 60);
    for (let i = 0; i < 12; i++) await store.append('heartbeat-1', [newEvent('Heartbeat')], 'any');
    now += 3_600_000;
    await expect(store.reclaimExpired()).rejects.toThrow('simulated failure');
    expect(fs.list(DIR).filter((file) => file.name.endsWith('.compact'))).toEqual([]);
    await store.close();
  });

  it('does not keep a failed open (EMFILE) of a sealed segment: the next read opens it again', async () => {
    const fs = new SimFs(new Rng(5));
    const store = await simStore(fs, { segmentBytes: 600 });
    for (let i = 0; i < 8; i++) await store.append('device-1', [newEvent(`E${i}`)], 'any');
    await store.close();
    fs.processExit();
    const reopened = await simStore(fs, { segmentBytes: 600 });
    fs.faults = { ...NO_FAULTS, emfile: 1 };
    await expect(types(reopened, 'device-1')).rejects.toThrow('EMFILE');
    fs.faults = { ...NO_FAULTS };
    expect(await types(reopened, 'device-1')).toEqual(['E0', 'E1', 'E2', 'E3', 'E4', 'E5', 'E6', 'E7']);
    await reopened.close();
  });

  it('refuses damage inside the last acknowledged batch after a clean close, naming file and byte', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'hhc-embedded-faults-'));
    try {
      const store = await openEmbeddedEventStore(dir, { reclaimIntervalMs: 0, log: () => undefined, onTornTail: () => undefined });
      for (let i = 1; i <= 10; i++) await store.append('device-1', [newEvent('Renamed', { name: `Name ${i}` })], 'any');
      const last = (await readAll(store.readStream('device-1'))).at(-1);
      await store.close();
      const file = join(dir, 'events.log');
      const offset = Number(last?.position.commit) + 30;
      expect(offset).toBeLessThan((await stat(file)).size);
      const handle = await open(file, 'r+');
      const byte = Buffer.alloc(1);
      await handle.read(byte, 0, 1, offset);
      byte[0] = (byte[0] as number) ^ 0x10;
      await handle.write(byte, 0, 1, offset);
      await handle.close();

      const reopening = openEmbeddedEventStore(dir, { reclaimIntervalMs: 0, log: () => undefined, onTornTail: () => undefined });

      await expect(reopening).rejects.toBeInstanceOf(CorruptEventLogError);
      await expect(reopening).rejects.toThrow(/events\.log is corrupt at byte \d+/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('embedded log: the record of a clean close', () => {
  /** Ten renames of one device, the log left as `stop` leaves it, then a bit flipped in the last record. */
  async function lastRecordDamaged(seed: number, stop: (store: EmbeddedEventStore, fs: SimFs) => Promise<void>): Promise<{ fs: SimFs; offset: number }> {
    const fs = new SimFs(new Rng(seed));
    const store = await simStore(fs);
    for (let i = 1; i <= 10; i++) await store.append('device-1', [newEvent('Renamed', { name: `Name ${i}` })], 'any');
    const last = (await readAll(store.readStream('device-1'))).at(-1);
    await stop(store, fs);
    const offset = Number(last?.position.commit) + 30;
    fs.flipBit(`${DIR}/events.log`, offset, 4);
    return { fs, offset: Number(last?.position.commit) };
  }

  it('refuses damage in the last acknowledged record after a clean close, also without the index checkpoint', async () => {
    const { fs, offset } = await lastRecordDamaged(11, async (store, sim) => {
      await store.close();
      sim.processExit();
      // A clean stop on a full disk may not have written it.
      await sim.unlink(`${DIR}/events.log.idx`);
    });
    const tornTails: TornTail[] = [];

    const reopening = simStore(fs, { onTornTail: (tail) => tornTails.push(tail) });

    await expect(reopening).rejects.toBeInstanceOf(CorruptEventLogError);
    await expect(reopening).rejects.toThrow(`${DIR}/events.log is corrupt at byte ${offset}: checksum mismatch in acknowledged data (a clean close or an index checkpoint vouches for it)`);
    expect(tornTails).toEqual([]);
  });

  it('refuses damage in the last acknowledged record after a clean stop on a full disk right after a failed write (no room for the close record nor the checkpoint)', async () => {
    const { fs, offset } = await lastRecordDamaged(16, async (store, sim) => {
      sim.faults = { ...NO_FAULTS, diskFull: true };
      await expect(store.append('device-1', [newEvent('Renamed', { name: 'Name 11' })], 'any')).rejects.toBeInstanceOf(EventStoreUnavailableError);
      await store.close();
      sim.processExit();
      expect(sim.list(DIR).map((file) => file.name)).not.toContain('events.log.idx');
    });
    const tornTails: TornTail[] = [];

    const reopening = simStore(fs, { onTornTail: (tail) => tornTails.push(tail) });

    await expect(reopening).rejects.toBeInstanceOf(CorruptEventLogError);
    await expect(reopening).rejects.toThrow(`${DIR}/events.log is corrupt at byte ${offset}: checksum mismatch in acknowledged data`);
    expect(tornTails).toEqual([]);
  });

  it('cuts a damaged last record after a crash (no clean close) as a torn tail, as an append never acknowledged', async () => {
    // As kill -9: the store is never closed.
    const { fs, offset } = await lastRecordDamaged(12, async (_store, sim) => sim.processExit());
    const tornTails: TornTail[] = [];

    const reopened = await simStore(fs, { onTornTail: (tail) => tornTails.push(tail) });

    expect(tornTails.map((tail) => tail.offset)).toEqual([offset]);
    expect((await readAll(reopened.readStream('device-1'))).map((event) => (event.data as { name: string }).name).at(-1)).toBe('Name 9');
    await reopened.close();
  });
});

describe('embedded log: index checkpoints of the active segment while it runs', () => {
  /** Resolves once the active segment's checkpoint covers the whole of it, as its last commit left it. */
  async function checkpointCoversAll(fs: SimFs): Promise<void> {
    const size = fs.fileBytes(`${DIR}/events.log`).length;
    for (let turn = 0; turn < 1000; turn++) {
      const loaded = await loadSegmentIndex(`${DIR}/events.log`, { base: 0, generation: 0 }, size, fs);
      if ('table' in loaded && loaded.table.coveredSize === size) return;
      await new Promise((resolve) => setImmediate(resolve));
    }
    throw new Error('the checkpoint never covered the segment');
  }

  it('after a crash, opens from the last checkpoint written while running (no scan of what it covers)', async () => {
    const fs = new SimFs(new Rng(14));
    const store = await simStore(fs, { checkpointBytes: 1 });
    for (let i = 1; i <= 20; i++) await store.append('device-1', [newEvent('Renamed', { name: `Name ${i}` })], 'any');
    await checkpointCoversAll(fs);
    fs.processExit();
    const messages: string[] = [];

    const reopened = await simStore(fs, { log: (message) => messages.push(message) });

    expect(messages).toEqual([]);
    expect((await readAll(reopened.readStream('device-1'))).map((event) => (event.data as { name: string }).name)).toEqual(
      Array.from({ length: 20 }, (_, i) => `Name ${i + 1}`),
    );
    await reopened.close();
  });

  it('after a crash, refuses damage in the last record when a checkpoint covers it (acknowledged), instead of cutting it', async () => {
    const fs = new SimFs(new Rng(15));
    const store = await simStore(fs, { checkpointBytes: 1 });
    for (let i = 1; i <= 10; i++) await store.append('device-1', [newEvent('Renamed', { name: `Name ${i}` })], 'any');
    const last = Number((await readAll(store.readStream('device-1'))).at(-1)?.position.commit);
    await checkpointCoversAll(fs);
    fs.processExit();
    fs.flipBit(`${DIR}/events.log`, last + 30, 4);
    const tornTails: TornTail[] = [];

    const reopening = simStore(fs, { onTornTail: (tail) => tornTails.push(tail) });

    await expect(reopening).rejects.toThrow(`${DIR}/events.log is corrupt at byte ${last}: checksum mismatch in acknowledged data`);
    expect(tornTails).toEqual([]);
  });
});

/** The simulated file system with a few scripted moments: a pause right after a rename, one failed directory sync, failed opens. */
class ScriptedFs extends SimFs {
  /** Runs after a rename has taken effect, before the rename returns. */
  afterRename: ((to: string) => Promise<void>) | null = null;
  failNextDirectorySync = false;
  failOpen: ((file: string) => boolean) | null = null;

  override async rename(from: string, to: string): Promise<void> {
    await super.rename(from, to);
    const pause = this.afterRename;
    this.afterRename = null;
    if (pause !== null) await pause(to);
  }

  override async syncDirectory(directory: string): Promise<void> {
    if (this.failNextDirectorySync) {
      this.failNextDirectorySync = false;
      throw new SimIoError('EIO', 'fsync', directory);
    }
    await super.syncDirectory(directory);
  }

  override async open(file: string, mode: OpenMode): Promise<StoreFile> {
    if (this.failOpen?.(file) === true) throw new SimIoError('EIO', 'open', file);
    return super.open(file, mode);
  }
}

const COMPACTION_CLOCK_START = Date.UTC(2030, 0, 1);
const SEGMENT_BYTES = 2000;
const FILL_EVENTS = 600;

/**
 * A log of more segments than the handle cap (64) keeps open: the first segment holds three
 * expired heartbeats and `device-a`'s only event, 600 `device-fill` events fill the rest.
 * Reopened an hour later, so a reclamation compacts the first segment.
 */
async function logToCompact(fs: ScriptedFs): Promise<{ store: EmbeddedEventStore; clock: { now: number } }> {
  const clock = { now: COMPACTION_CLOCK_START };
  const options = { now: () => clock.now, segmentBytes: SEGMENT_BYTES };
  const store = await simStore(fs, options);
  await store.setStreamMaxAge('heartbeat-1', 60);
  for (let i = 0; i < 3; i++) await store.append('heartbeat-1', [newEvent('Heartbeat')], 'any');
  const target = await store.append('device-a', [newEvent('Target')], 'no_stream');
  // Behind the reclaimed heartbeats in the first segment: the copy holds it at another offset.
  expect(Number(target.position.commit)).toBeLessThan(SEGMENT_BYTES);
  for (let i = 0; i < FILL_EVENTS; i++) await store.append('device-fill', [newEvent(`F${i}`)], 'any');
  expect(fs.list(DIR).filter((file) => file.name.endsWith('.log')).length).toBeGreaterThan(64 + 1);
  await store.append('heartbeat-1', [newEvent('Heartbeat')], 'any');
  await store.close();
  fs.processExit();
  clock.now += 3_600_000;
  return { store: await simStore(fs, options), clock };
}

describe('embedded log: reads during a compaction', () => {
  it('never reads a compacted copy with the old offsets, even when the old file was closed for other reads', async () => {
    const fs = new ScriptedFs(new Rng(6));
    const { store } = await logToCompact(fs);
    let seen: string[] | Error = [];
    fs.afterRename = async (to) => {
      expect(to).toBe(`${DIR}/events.log`);
      // The name now holds the copy, the old segment is still the one in use: read through
      // more other segments than the handle cap keeps open, then the one being replaced.
      expect((await readAll(store.readStream('device-fill'))).length).toBe(FILL_EVENTS);
      seen = await types(store, 'device-a').catch((error: unknown) => error as Error);
    };
    const result = await store.reclaimExpired();
    expect(result.eventsReclaimed).toBe(3);
    expect(fs.afterRename).toBeNull();
    expect(seen).toEqual(['Target']);
    expect(await types(store, 'device-a')).toEqual(['Target']);
    await store.close();
  });

  it('swaps the copy in even when the directory sync after its rename fails: a later failed run cannot expose the old offsets', async () => {
    const fs = new ScriptedFs(new Rng(7));
    const { store } = await logToCompact(fs);
    fs.failNextDirectorySync = true;
    await expect(store.reclaimExpired()).rejects.toThrow('EIO');
    // A second run that fails before its rename (here: the temporary file cannot be opened).
    fs.failOpen = (file) => file.endsWith('.compact');
    await store.reclaimExpired().catch(() => undefined);
    fs.failOpen = null;
    expect((await readAll(store.readStream('device-fill'))).length).toBe(FILL_EVENTS);
    expect(await types(store, 'device-a')).toEqual(['Target']);
    const replayed: string[] = [];
    for await (const item of store.subscribe({ streamPrefixes: ['device-'] })) {
      if (item.kind === 'caught-up') break;
      replayed.push(item.event.type);
    }
    expect(replayed).toEqual(['Target', ...Array.from({ length: FILL_EVENTS }, (_, i) => `F${i}`)]);
    await store.close();
    fs.crash();
    const reopened = await simStore(fs, { now: () => COMPACTION_CLOCK_START + 3_600_000, segmentBytes: SEGMENT_BYTES });
    expect(await types(reopened, 'device-a')).toEqual(['Target']);
    await reopened.close();
  });
});

/** Records index checkpoint writes through their temporary file: a second writer of one before the first renamed it is an overlap. */
class IndexWritesFs extends SimFs {
  private readonly writing = new Set<string>();
  readonly overlaps: string[] = [];
  /** Holds the first write of this file until `released` resolves. */
  hold: { readonly file: string; readonly released: Promise<void> } | null = null;

  override async writeFile(file: string, bytes: Buffer): Promise<void> {
    if (this.writing.has(file)) this.overlaps.push(file);
    this.writing.add(file);
    const hold = this.hold;
    if (hold !== null && hold.file === file) {
      this.hold = null;
      await hold.released;
    }
    await super.writeFile(file, bytes);
  }

  override async rename(from: string, to: string): Promise<void> {
    await super.rename(from, to);
    this.writing.delete(from);
  }
}

describe('embedded log: index checkpoints of a sealed segment and of its compacted copy', () => {
  it("writes the copy's checkpoint after the sealed segment's still queued one, never both at once through one temporary file", async () => {
    const fs = new IndexWritesFs(new Rng(8));
    let release: () => void = () => undefined;
    // The checkpoint the seal of the first segment queues is slow to write.
    fs.hold = { file: `${DIR}/events.log.idx.tmp`, released: new Promise<void>((resolve) => (release = resolve)) };
    let now = Date.UTC(2030, 0, 1);
    const store = await simStore(fs, {
      now: () => now,
      segmentBytes: 600,
      // Once the copy replaced the first segment (its directory entry synced), the held write goes on.
      compactionHook: (step) => {
        if (step === 'directory-synced') setImmediate(release);
      },
    });
    await store.setStreamMaxAge('heartbeat-1', 60);
    for (let i = 0; i < 12; i++) await store.append('heartbeat-1', [newEvent('Heartbeat')], 'any');
    expect(fs.hold).toBeNull();
    now += 3_600_000;

    const result = await store.reclaimExpired();
    release();
    await store.close();

    expect(result.segmentsCompacted).toBeGreaterThan(0);
    expect(fs.overlaps).toEqual([]);
    const copy = await loadSegmentIndex(`${DIR}/events.log`, { base: 0, generation: 1 }, fs.fileBytes(`${DIR}/events.log`).length, fs);
    expect('problem' in copy ? copy.problem : "the copy's checkpoint").toBe("the copy's checkpoint");
  });
});
