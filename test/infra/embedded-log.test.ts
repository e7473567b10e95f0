import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { appendFile, mkdtemp, open, readdir, readFile, rm, stat, truncate, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import * as zlib from 'node:zlib';
import {
  CorruptEventLogError,
  EVENT_LOG_FILE_NAME,
  EventStoreLockedError,
  LOCK_FILE_NAME,
  crc32Portable,
  openEmbeddedEventStore,
  type EmbeddedEventStoreOptions,
  type GroupCommit,
  type TornTail,
} from '../../src/infra/eventstore/embedded';
import { WrongExpectedRevisionError, comparePositions, type EventStore, type RecordedEvent } from '../../src/infra/eventstore/port';
import { CLOSE_RECORD_SIZE } from '../../src/infra/eventstore/embedded/record-format';
import { newEvent, readAll, takeUntil, withTimeout } from '../contract/eventstore.contract';

const PROJECT_ROOT = resolve(__dirname, '..', '..');
const WRITER_SCRIPT = join(__dirname, 'fixtures', 'append-until-killed.ts');

describe('embedded event log', () => {
  const directories: string[] = [];
  const openStores: EventStore[] = [];
  let tornTails: TornTail[];

  beforeEach(() => {
    tornTails = [];
  });

  afterEach(async () => {
    await Promise.all(openStores.splice(0).map((store) => store.close()));
    await Promise.all(directories.splice(0).map((dir) => rm(dir, { recursive: true, force: true })));
  });

  async function dataDirectory(): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), 'hhc-embedded-log-'));
    directories.push(dir);
    return dir;
  }

  async function openStore(dir: string, options: EmbeddedEventStoreOptions = {}): Promise<EventStore> {
    const store = await openEmbeddedEventStore(dir, { onTornTail: (tail) => tornTails.push(tail), ...options });
    openStores.push(store);
    return store;
  }

  async function reopen(store: EventStore, dir: string, options: EmbeddedEventStoreOptions = {}): Promise<EventStore> {
    await store.close();
    return openStore(dir, options);
  }

  const logFile = (dir: string): string => join(dir, EVENT_LOG_FILE_NAME);
  /** A cleanly closed log as a crash would have left it: without the record of its clean close. */
  const asAfterACrash = async (dir: string): Promise<void> => {
    const size = (await stat(logFile(dir))).size;
    const closeRecord = (await readFile(logFile(dir))).subarray(size - CLOSE_RECORD_SIZE);
    expect(closeRecord.readUInt32LE(0)).toBe(CLOSE_RECORD_SIZE - 8);
    await truncate(logFile(dir), size - CLOSE_RECORD_SIZE);
  };
  const typesOf = async (store: EventStore, stream: string): Promise<string[]> =>
    (await readAll(store.readStream(stream))).map((event) => event.type);
  const offsetOf = (event: RecordedEvent | undefined): number => {
    if (event === undefined) throw new Error('missing event');
    return Number(event.position.commit);
  };

  describe('durability', () => {
    it('keeps acknowledged events across a reopen, and appends continue from them', async () => {
      const dir = await dataDirectory();
      const store = await openStore(dir);
      await store.append('device-1', [newEvent('DeviceRegistered'), newEvent('DeviceUpdated')], 'no_stream');
      const last = await store.append('user-1', [newEvent('UserSynced')], 'no_stream');
      const before = await readAll(store.readStream('device-1'));

      const reopened = await reopen(store, dir);

      expect(await readAll(reopened.readStream('device-1'))).toEqual(before);
      expect(await typesOf(reopened, 'user-1')).toEqual(['UserSynced']);
      expect(await reopened.headPosition()).toEqual(last.position);
      await expect(reopened.append('device-1', [newEvent('Stale')], 0n)).rejects.toBeInstanceOf(WrongExpectedRevisionError);
      const next = await reopened.append('device-1', [newEvent('DeviceWentOnline')], 1n);
      expect(next.nextExpectedRevision).toBe(2n);
      expect(comparePositions(next.position, last.position)).toBeGreaterThan(0);
      expect(tornTails).toEqual([]);
    });

    it('writes appends still waiting for their fsync before close resolves', async () => {
      const dir = await dataDirectory();
      const store = await openStore(dir);
      const pending = Array.from({ length: 20 }, (_, i) => store.append(`stream-${i % 4}`, [newEvent(`E${i}`)], 'any'));

      await store.close();

      await expect(Promise.all(pending)).resolves.toHaveLength(20);
      const reopened = await openStore(dir);
      expect(await typesOf(reopened, 'stream-0')).toEqual(['E0', 'E4', 'E8', 'E12', 'E16']);
    });

    it('after close, rejects appends and reads and ends live subscriptions', async () => {
      const dir = await dataDirectory();
      const store = await openStore(dir);
      await store.append('s', [newEvent('E0')], 'no_stream');
      const subscription = store.subscribe();
      await takeUntil(subscription, (items) => items.some((item) => item.kind === 'caught-up'));
      const ended = (async () => {
        for await (const item of subscription) throw new Error(`unexpected item ${item.kind}`);
        return 'ended';
      })();

      await store.close();

      await expect(withTimeout(ended, 5000, 'the subscription to end')).resolves.toBe('ended');
      await expect(store.append('s', [newEvent('E1')], 0n)).rejects.toThrow(/closed/);
      await expect(readAll(store.readStream('s'))).rejects.toThrow(/closed/);
    });
  });

  describe('group commit', () => {
    it('acknowledges many concurrent appends with far fewer fsyncs, and keeps them all', async () => {
      const dir = await dataDirectory();
      const commits: GroupCommit[] = [];
      const store = await openStore(dir, { onGroupCommit: (commit) => commits.push(commit) });
      const appends = Array.from({ length: 1000 }, (_, i) => ({ stream: `heartbeat-${i % 50}`, event: newEvent(`Beat${i}`) }));

      const results = await Promise.all(appends.map(({ stream, event }) => store.append(stream, [event], 'any')));

      expect(results).toHaveLength(1000);
      expect(commits.reduce((sum, commit) => sum + commit.events, 0)).toBe(1000);
      expect(commits.length).toBeLessThan(100);
      const reopened = await reopen(store, dir);
      for (let s = 0; s < 50; s++) {
        const events = await readAll(reopened.readStream(`heartbeat-${s}`));
        const expected = appends.filter((append) => append.stream === `heartbeat-${s}`);
        expect(events.map((event) => event.id)).toEqual(expected.map((append) => append.event.id));
        expect(events.map((event) => event.revision)).toEqual(expected.map((_, i) => BigInt(i)));
      }
    });

    it('checks expectations in call order even while earlier appends wait for their fsync', async () => {
      const dir = await dataDirectory();
      const store = await openStore(dir);
      await store.append('contended', [newEvent('E0')], 'no_stream');

      const outcomes = await Promise.allSettled(
        Array.from({ length: 20 }, (_, i) => store.append('contended', [newEvent(`Attempt${i}`)], 0n)),
      );
      const chained = await Promise.all([
        store.append('chained', [newEvent('C0')], 'no_stream'),
        store.append('chained', [newEvent('C1')], 0n),
        store.append('chained', [newEvent('C2')], 1n),
      ]);

      expect(outcomes.map((outcome) => outcome.status)).toEqual(['fulfilled', ...Array<string>(19).fill('rejected')]);
      expect(await typesOf(store, 'contended')).toEqual(['E0', 'Attempt0']);
      expect(chained.map((result) => result.nextExpectedRevision)).toEqual([0n, 1n, 2n]);
    });

    it('answers a retry issued before the original is durable with the original result', async () => {
      const dir = await dataDirectory();
      const store = await openStore(dir);
      const event = newEvent('Created');

      const [original, retried] = await Promise.all([
        store.append('once', [event], 'no_stream'),
        store.append('once', [event], 'no_stream'),
      ]);

      expect(retried).toEqual(original);
      expect(await typesOf(await reopen(store, dir), 'once')).toEqual(['Created']);
    });
  });

  describe('torn tail', () => {
    async function storeWithFiveEvents(dir: string): Promise<RecordedEvent[]> {
      const store = await openStore(dir);
      for (let i = 0; i < 5; i++) await store.append('s', [newEvent(`E${i}`)], i === 0 ? 'no_stream' : BigInt(i - 1));
      const events = await readAll(store.readStream('s'));
      await store.close();
      await asAfterACrash(dir);
      return events;
    }

    it('drops a record cut short, keeps everything before it, and appends after it', async () => {
      const dir = await dataDirectory();
      const events = await storeWithFiveEvents(dir);
      const fullSize = (await stat(logFile(dir))).size;
      await truncate(logFile(dir), fullSize - 7);

      const store = await openStore(dir);

      expect(tornTails).toEqual([{ offset: offsetOf(events[4]), droppedBytes: fullSize - 7 - offsetOf(events[4]) }]);
      expect((await stat(logFile(dir))).size).toBe(offsetOf(events[4]));
      expect(await typesOf(store, 's')).toEqual(['E0', 'E1', 'E2', 'E3']);
      expect(await store.headPosition()).toEqual(events[3]?.position);
      const replay = await takeUntil(store.subscribe(), (items) => items.some((item) => item.kind === 'caught-up'));
      expect(replay.map((item) => (item.kind === 'event' ? item.event.type : item.kind))).toEqual([
        'E0',
        'E1',
        'E2',
        'E3',
        'caught-up',
      ]);
      const next = await store.append('s', [newEvent('E4-again')], 3n);
      expect(next.nextExpectedRevision).toBe(4n);
      expect(await typesOf(await reopen(store, dir), 's')).toEqual(['E0', 'E1', 'E2', 'E3', 'E4-again']);
      expect(tornTails).toHaveLength(1);
    });

    it.each([
      ['at the boundary before its last record', (events: RecordedEvent[]) => offsetOf(events[3])],
      ['inside its middle record', (events: RecordedEvent[]) => offsetOf(events[2]) + 30],
      ['inside the length prefix of its first record', (events: RecordedEvent[]) => offsetOf(events[1]) + 2],
    ])('drops a whole multi-event append cut %s', async (_, cutAt) => {
      const dir = await dataDirectory();
      const store = await openStore(dir);
      await store.append('s', [newEvent('Kept')], 'no_stream');
      await store.append('s', [newEvent('Part1'), newEvent('Part2'), newEvent('Part3')], 0n);
      const events = await readAll(store.readStream('s'));
      await store.close();
      await truncate(logFile(dir), cutAt(events));

      const reopened = await openStore(dir);

      expect(await typesOf(reopened, 's')).toEqual(['Kept']);
      expect(tornTails.map((tail) => tail.offset)).toEqual([offsetOf(events[1])]);
      expect((await reopened.append('s', [newEvent('After')], 0n)).nextExpectedRevision).toBe(1n);
    });

    it.each([
      ['random bytes', randomBytes(700)],
      ['zeros', Buffer.alloc(4096)],
    ])('drops %s after the last record', async (_, garbage) => {
      const dir = await dataDirectory();
      const events = await storeWithFiveEvents(dir);
      const size = (await stat(logFile(dir))).size;
      await appendFile(logFile(dir), garbage);

      const store = await openStore(dir);

      expect(tornTails).toEqual([{ offset: size, droppedBytes: garbage.length }]);
      expect(await readAll(store.readStream('s'))).toEqual(events);
    });
  });

  describe('corruption', () => {
    async function corruptByte(dir: string, offset: number): Promise<void> {
      const handle = await open(logFile(dir), 'r+');
      try {
        const byte = Buffer.alloc(1);
        await handle.read(byte, 0, 1, offset);
        byte[0] = (byte[0] ?? 0) ^ 0x5a;
        await handle.write(byte, 0, 1, offset);
      } finally {
        await handle.close();
      }
    }

    it.each([
      ['payload', 60],
      ['length prefix', 1],
    ])('refuses to open when a record in the middle has a damaged %s', async (_, byteInRecord) => {
      const dir = await dataDirectory();
      const store = await openStore(dir);
      for (let i = 0; i < 10; i++) await store.append(`s-${i % 2}`, [newEvent(`E${i}`)], 'any');
      const damaged = offsetOf((await readAll(store.readStream('s-1')))[1]);
      await store.close();
      const size = (await stat(logFile(dir))).size;
      await corruptByte(dir, damaged + byteInRecord);

      const opening = openEmbeddedEventStore(dir, { onTornTail: (tail) => tornTails.push(tail) });

      await expect(opening).rejects.toBeInstanceOf(CorruptEventLogError);
      await expect(opening).rejects.toThrow(`corrupt at byte ${damaged}`);
      expect((await stat(logFile(dir))).size).toBe(size);
      expect(tornTails).toEqual([]);
      // A failed open releases its lock: the next attempt meets the same corruption, not a lock.
      await expect(openEmbeddedEventStore(dir)).rejects.toBeInstanceOf(CorruptEventLogError);
    });

    it('drops the last write from a hole onwards, even when intact records of that write follow', async () => {
      const dir = await dataDirectory();
      const commits: GroupCommit[] = [];
      const store = await openStore(dir, { onGroupCommit: (commit) => commits.push(commit) });
      await store.append('earlier', [newEvent('Synced')], 'no_stream');
      await Promise.all(Array.from({ length: 40 }, (_, i) => store.append(`burst-${i}`, [newEvent(`B${i}`)], 'no_stream')));
      expect(commits.map((commit) => commit.appends)).toEqual([1, 40]);
      const hole = offsetOf((await readAll(store.readStream('burst-25')))[0]);
      await store.close();
      // As after a crash: no checkpoint or record of a clean close vouches for the last write.
      await rm(`${logFile(dir)}.idx`);
      await asAfterACrash(dir);
      const handle = await open(logFile(dir), 'r+');
      await handle.write(Buffer.alloc(100), 0, 100, hole);
      await handle.close();

      const reopened = await openStore(dir);

      expect(tornTails.map((tail) => tail.offset)).toEqual([hole]);
      expect(await typesOf(reopened, 'earlier')).toEqual(['Synced']);
      expect(await typesOf(reopened, 'burst-24')).toEqual(['B24']);
      expect(await typesOf(reopened, 'burst-25')).toEqual([]);
      expect(await typesOf(reopened, 'burst-39')).toEqual([]);
    });

    it('refuses to open when a hole is followed by a later write', async () => {
      const dir = await dataDirectory();
      const store = await openStore(dir);
      await Promise.all(Array.from({ length: 40 }, (_, i) => store.append(`burst-${i}`, [newEvent(`B${i}`)], 'no_stream')));
      await store.append('later', [newEvent('Later')], 'no_stream');
      const hole = offsetOf((await readAll(store.readStream('burst-25')))[0]);
      await store.close();
      const handle = await open(logFile(dir), 'r+');
      await handle.write(Buffer.alloc(100), 0, 100, hole);
      await handle.close();

      await expect(openEmbeddedEventStore(dir)).rejects.toThrow(`corrupt at byte ${hole}`);
    });

    it('refuses a file that is not an event log', async () => {
      const dir = await dataDirectory();
      await writeFile(logFile(dir), 'this is not an event log, only some text');

      await expect(openEmbeddedEventStore(dir)).rejects.toThrow(/not an event log/);
    });

    it('finishes a file whose creation was interrupted', async () => {
      const dir = await dataDirectory();
      await (await openStore(dir)).close();
      await truncate(logFile(dir), 5);

      const store = await openStore(dir);

      expect((await store.append('s', [newEvent('First')], 'no_stream')).nextExpectedRevision).toBe(0n);
      expect(await typesOf(await reopen(store, dir), 's')).toEqual(['First']);
    });
  });

  describe('lock', () => {
    it('refuses a second open of the same directory until the first is closed', async () => {
      const dir = await dataDirectory();
      const store = await openStore(dir);

      await expect(openEmbeddedEventStore(dir)).rejects.toBeInstanceOf(EventStoreLockedError);

      await store.close();
      const again = await openStore(dir);
      expect(await again.headPosition()).toBeNull();
    });

    it('lets only one of two racing opens in one process win', async () => {
      const dir = await dataDirectory();

      const outcomes = await Promise.allSettled([openStore(dir), openStore(dir)]);

      expect(outcomes.filter((outcome) => outcome.status === 'fulfilled')).toHaveLength(1);
      const rejected = outcomes.find((outcome) => outcome.status === 'rejected');
      expect(rejected?.status === 'rejected' && rejected.reason).toBeInstanceOf(EventStoreLockedError);
    });

    it('takes over a lock left by a process that is gone', async () => {
      const dir = await dataDirectory();
      const deadPid = await pidOfFinishedProcess();
      await writeFile(join(dir, LOCK_FILE_NAME), `${deadPid}\n`);

      const store = await openStore(dir);

      expect((await store.append('s', [newEvent('First')], 'no_stream')).nextExpectedRevision).toBe(0n);
      expect(JSON.parse(await readFile(join(dir, LOCK_FILE_NAME), 'utf8'))).toMatchObject({ pid: process.pid });
    });

    it('takes over at once from a process killed with SIGKILL that its parent has not reaped yet (a zombie)', async () => {
      const dir = await dataDirectory();
      // The store is opened by a grandchild whose parent then becomes `sleep`, which never reaps it.
      const opener = `require('./src/infra/eventstore/embedded').openEmbeddedEventStore(${JSON.stringify(dir)}).then(() => console.log('opened'))`;
      const shell = spawn('sh', ['-c', `node --import tsx -e "${opener.replace(/"/g, '\\"')}" & echo $!; exec sleep 30`], {
        cwd: resolve(__dirname, '../..'),
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      try {
        const output: string[] = [];
        await new Promise<void>((done, fail) => {
          shell.stdout.on('data', (chunk: Buffer) => {
            output.push(chunk.toString());
            if (output.join('').includes('opened')) done();
          });
          shell.once('exit', () => fail(new Error(`the opener exited: ${output.join('')}`)));
        });
        const pid = Number.parseInt(output.join('').trim().split('\n')[0] ?? '', 10);
        expect(JSON.parse(await readFile(join(dir, LOCK_FILE_NAME), 'utf8'))).toMatchObject({ pid });
        process.kill(pid, 'SIGKILL');
        // A zombie: its threads have all exited (so its files are closed), its parent has not reaped it.
        for (let i = 0; i < 500 && !((await readFile(`/proc/${pid}/stat`, 'utf8')).includes(') Z ') && (await readdir(`/proc/${pid}/task`)).length === 1); i++) {
          await new Promise((r) => setTimeout(r, 10));
        }
        expect(await readFile(`/proc/${pid}/stat`, 'utf8')).toContain(') Z ');

        const store = await openStore(dir);
        expect((await store.append('s', [newEvent('AfterCrash')], 'no_stream')).nextExpectedRevision).toBe(0n);
      } finally {
        shell.kill('SIGKILL');
      }
    }, 20_000);

    it('takes over a lock whose pid now belongs to another process (started at another time)', async () => {
      const dir = await dataDirectory();
      // The parent of this test runner is alive, but it did not write this lock: its start time differs.
      await writeFile(join(dir, LOCK_FILE_NAME), `${process.ppid} 1\n`);
      const store = await openStore(dir);
      expect(await store.headPosition()).toBeNull();
    });

    it('does not take the pid in the file for the holder: a live process named there holds nothing (test/infra/embedded-lock.test.ts)', async () => {
      const dir = await dataDirectory();
      const start = (await readFile(`/proc/${process.ppid}/stat`, 'utf8')).split(') ')[1]?.split(' ')[19];
      await writeFile(join(dir, LOCK_FILE_NAME), `${process.ppid} ${start}\n`);
      const store = await openStore(dir);
      expect(await store.headPosition()).toBeNull();
    });
  });

  describe('max age', () => {
    it('hides events older than the max age of their stream, also after a reopen', async () => {
      const dir = await dataDirectory();
      let now = Date.parse('2025-01-01T00:00:00.000Z');
      const clock = { now: () => now };
      const store = await openStore(dir, clock);
      await store.append('heartbeat-1', [newEvent('Old1'), newEvent('Old2')], 'no_stream');
      await store.append('device-1', [newEvent('DeviceRegistered')], 'no_stream');
      await store.setStreamMaxAge('heartbeat-1', 60);
      now += 30_000;
      await store.append('heartbeat-1', [newEvent('Young')], 1n);

      now += 31_000;

      expect(await typesOf(store, 'heartbeat-1')).toEqual(['Young']);
      const newest = await readAll(store.readStream('heartbeat-1', { direction: 'backwards' }));
      expect(newest.map((event) => [event.type, event.revision])).toEqual([['Young', 2n]]);
      expect(await typesOf(store, 'device-1')).toEqual(['DeviceRegistered']);
      expect((await store.append('heartbeat-1', [newEvent('Next')], 2n)).nextExpectedRevision).toBe(3n);
      const reopened = await reopen(store, dir, clock);
      expect(await typesOf(reopened, 'heartbeat-1')).toEqual(['Young', 'Next']);

      await reopened.setStreamMaxAge('heartbeat-1', 3600);

      expect(await typesOf(reopened, 'heartbeat-1')).toEqual(['Old1', 'Old2', 'Young', 'Next']);
    });

    it('reads backwards from the newest event and stops where events aged out', async () => {
      const dir = await dataDirectory();
      let now = Date.parse('2025-01-01T00:00:00.000Z');
      const store = await openStore(dir, { now: () => now });
      await store.setStreamMaxAge('heartbeat-2', 60);
      for (const type of ['A', 'B', 'C']) {
        await store.append('heartbeat-2', [newEvent(type)], 'any');
        now += 20_000;
      }
      const newest = await readAll(store.readStream('heartbeat-2', { direction: 'backwards', maxCount: 1 }));
      expect(newest.map((event) => [event.type, event.revision])).toEqual([['C', 2n]]);
      now += 25_000; // A is 85 s old, B 65 s, C 45 s
      expect((await readAll(store.readStream('heartbeat-2', { direction: 'backwards' }))).map((e) => e.type)).toEqual(['C']);
      now += 60_000;
      expect(await readAll(store.readStream('heartbeat-2', { direction: 'backwards', maxCount: 1 }))).toEqual([]);
      await store.close();
    });
  });

  describe('recent commits in memory', () => {
    it('reads just-written events from memory exactly as from disk, across the edge of what memory keeps', async () => {
      const dir = await dataDirectory();
      const store = await openStore(dir);
      const blob = 'x'.repeat(20_000);
      // About 6 MiB in many group commits: more than memory keeps, so early reads hit the disk.
      for (let round = 0; round < 10; round++) {
        await Promise.all(
          Array.from({ length: 30 }, (_, i) => store.append(`device-${i}`, [{ ...newEvent(`E${round}`), data: { blob, round, i } }], 'any')),
        );
      }
      const live = await readAll(store.readStream('device-7'));
      const liveBackwards = await readAll(store.readStream('device-29', { direction: 'backwards', maxCount: 3 }));
      const subscribed: RecordedEvent[] = [];
      const subscription = store.subscribe({ streamPrefixes: ['device-'] });
      for await (const item of subscription) {
        if (item.kind === 'caught-up') break;
        subscribed.push(item.event);
      }
      await subscription.close();

      const reopened = await reopen(store, dir);
      expect(live).toHaveLength(10);
      expect(await readAll(reopened.readStream('device-7'))).toEqual(live);
      expect(await readAll(reopened.readStream('device-29', { direction: 'backwards', maxCount: 3 }))).toEqual(liveBackwards);
      const fromDisk: RecordedEvent[] = [];
      const again = reopened.subscribe({ streamPrefixes: ['device-'] });
      for await (const item of again) {
        if (item.kind === 'caught-up') break;
        fromDisk.push(item.event);
      }
      await again.close();
      expect(subscribed).toHaveLength(300);
      expect(fromDisk).toEqual(subscribed);
    });
  });

  describe('subscribe positions', () => {
    it('starts after any position, also one inside a record or deep in a long log', async () => {
      const dir = await dataDirectory();
      const store = await openStore(dir);
      for (let batch = 0; batch < 30; batch++) {
        await store.append('long', Array.from({ length: 100 }, (_, i) => newEvent(`E${batch * 100 + i}`)), 'any');
      }
      const events = await readAll(store.readStream('long'));

      const fromInside = store.subscribe({ fromPosition: { commit: BigInt(offsetOf(events[2500]) + 3), prepare: 0n } });
      const items = await takeUntil(fromInside, (seen) => seen.some((item) => item.kind === 'caught-up'));
      await fromInside.close();

      const delivered = items.flatMap((item) => (item.kind === 'event' ? [item.event.type] : []));
      expect(delivered).toHaveLength(499);
      expect(delivered[0]).toBe('E2501');
      expect(delivered[498]).toBe('E2999');
    });
  });

  describe('crash of a writer process', () => {
    it('keeps every acknowledged event of a writer killed with SIGKILL, round after round', async () => {
      const dir = await dataDirectory();
      let acknowledged: Acknowledged[] = [];
      for (let round = 0; round < 3; round++) {
        acknowledged = acknowledged.concat(await runWriterUntilKilled(dir, 400));

        const store = await openStore(dir);
        const streams = [...new Set(acknowledged.map((ack) => ack.stream))];
        let total = 0;
        for (const stream of streams) {
          const events = await readAll(store.readStream(stream));
          total += events.length;
          expect(events.map((event) => event.revision)).toEqual(events.map((_, i) => BigInt(i)));
          const idAtRevision = new Map(events.map((event) => [event.revision, event.id]));
          const missing = acknowledged.filter((ack) => ack.stream === stream && idAtRevision.get(ack.revision) !== ack.id);
          expect(missing).toEqual([]);
        }
        expect(total).toBeGreaterThanOrEqual(acknowledged.length);
        const replay = await takeUntil(store.subscribe(), (items) => items.some((item) => item.kind === 'caught-up'));
        const replayed = replay.flatMap((item) => (item.kind === 'event' ? [item.event] : []));
        expect(replayed).toHaveLength(total);
        const outOfOrder = replayed.filter(
          (event, i) => i > 0 && comparePositions(event.position, replayed[i - 1]?.position ?? event.position) <= 0,
        );
        expect(outOfOrder).toEqual([]);
        await store.close();
      }
    }, 120_000);
  });
});

interface Acknowledged {
  readonly stream: string;
  readonly revision: bigint;
  readonly id: string;
}

/** Runs the writer until it has acknowledged at least `minimum` events, then kills it. */
async function runWriterUntilKilled(dir: string, minimum: number): Promise<Acknowledged[]> {
  const child = spawn(process.execPath, ['--import', 'tsx', WRITER_SCRIPT, dir], {
    cwd: PROJECT_ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise<NodeJS.Signals | number | null>((resolve) =>
    child.once('exit', (code, signal) => resolve(signal ?? code)),
  );
  let stdout = '';
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
  });
  const enough = new Promise<void>((resolve, reject) => {
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      stdout += chunk;
      if (countAcks(stdout) >= minimum) resolve();
    });
    void exited.then((how) => reject(new Error(`writer exited (${String(how)}) early:\n${stderr}`)));
  });
  try {
    await withTimeout(enough, 60_000, `${minimum} acknowledged appends`);
  } finally {
    child.kill('SIGKILL');
  }
  expect(await exited).toBe('SIGKILL');
  // Only whole lines: the kill may cut the last one.
  const lines = stdout.split('\n').slice(0, -1);
  return lines.flatMap((line) => {
    const [word, stream, revision, id] = line.split(' ');
    return word === 'ack' && stream !== undefined && revision !== undefined && id !== undefined
      ? [{ stream, revision: BigInt(revision), id }]
      : [];
  });
}

function countAcks(output: string): number {
  let count = 0;
  for (let at = output.indexOf('ack '); at !== -1; at = output.indexOf('ack ', at + 4)) count++;
  return count;
}

async function pidOfFinishedProcess(): Promise<number> {
  const child = spawn(process.execPath, ['-e', ''], { stdio: 'ignore' });
  await new Promise((resolve) => child.once('exit', resolve));
  if (child.pid === undefined) throw new Error('could not start a process');
  return child.pid;
}

describe('crc32Portable', () => {
  it('matches the standard check value and zlib', () => {
    expect(crc32Portable(Buffer.from('123456789'))).toBe(0xcbf43926);
    for (let i = 0; i < 20; i++) {
      const bytes = randomBytes(1 + i * 97);
      expect(crc32Portable(bytes)).toBe(zlib.crc32(bytes));
    }
  });
});
