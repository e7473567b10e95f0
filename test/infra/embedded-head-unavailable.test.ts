/**
 * While the embedded log refuses writes (after a failed write, or opened read-only on a
 * full disk) `headPosition()` fails: readiness reports it. Its other callers must go on:
 * a start that finds a snapshot replays the whole log instead of failing, and the tunnel's
 * live feed starts without a head and begins following once the store can say where it is.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EventStoreUnavailableError, openEmbeddedEventStore, type EmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import type { EventStore, SubscribeOptions } from '../../src/infra/eventstore/port';
import type { Logger } from '../../src/logger';
import { loadStartSnapshot, snapshotVersion, writeStartSnapshot } from '../../src/runtime/snapshot';
import { createSessions, type TunnelContext } from '../../src/tunnel/context';
import { startLiveFeed } from '../../src/tunnel/live-feed';
import { newEvent } from '../contract/eventstore.contract';
import { Rng } from '../sim/rng';
import { NO_FAULTS, SimFs } from '../sim/sim-fs';

const DIR = '/sim/data';

interface Note {
  readonly level: 'info' | 'warn';
  readonly message: string;
}

function recordingLogger(notes: Note[]): Logger {
  const logger = {
    info: (_fields: unknown, message: string) => notes.push({ level: 'info', message }),
    warn: (_fields: unknown, message: string) => notes.push({ level: 'warn', message }),
    error: (_fields: unknown, message: string) => notes.push({ level: 'warn', message }),
  };
  return logger as unknown as Logger;
}

/** A store whose last append failed on a full disk: writes are refused, headPosition() fails. */
async function failedStore(fs: SimFs): Promise<EmbeddedEventStore> {
  await fs.mkdir(DIR);
  const store = await openEmbeddedEventStore(DIR, { io: fs, lock: async () => async () => undefined, reclaimIntervalMs: 0, log: () => undefined, onTornTail: () => undefined });
  await store.append('device-1', [newEvent('First')], 'no_stream');
  fs.faults = { ...NO_FAULTS, diskFull: true };
  await expect(store.append('device-1', [newEvent('Refused')], 0n)).rejects.toBeInstanceOf(EventStoreUnavailableError);
  await expect(store.headPosition()).rejects.toBeInstanceOf(EventStoreUnavailableError);
  return store;
}

async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 20));
}

describe('callers of headPosition() while the embedded log refuses writes', () => {
  it('a start snapshot is not used (the whole log is replayed) instead of failing the start', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hhc-head-unavailable-'));
    const fs = new SimFs(new Rng(11));
    const store = await failedStore(fs);
    try {
      const file = join(dir, 'read-models.snapshot');
      const version = snapshotVersion('test');
      await writeStartSnapshot(file, version, { readModels: { checkpoints: { projector: '0/0' }, collections: {} } } as never);
      const notes: Note[] = [];
      await expect(loadStartSnapshot(file, version, store, recordingLogger(notes))).resolves.toBeNull();
      expect(notes).toEqual([{ level: 'warn', message: 'start snapshot: stale; replaying the whole log' }]);
    } finally {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('the live feed starts, and follows from the head once the store can say where it is', async () => {
    const fs = new SimFs(new Rng(12));
    const store = await failedStore(fs);
    const subscribed: SubscribeOptions[] = [];
    let headCalls = 0;
    const watched: EventStore = {
      append: (...args) => store.append(...args),
      readStream: (...args) => store.readStream(...args),
      setStreamMaxAge: (...args) => store.setStreamMaxAge(...args),
      close: () => store.close(),
      headPosition: () => {
        headCalls++;
        return store.headPosition();
      },
      subscribe: (options) => {
        subscribed.push(options ?? {});
        return store.subscribe(options);
      },
    };
    const notes: Note[] = [];
    const ctx = {
      sessions: createSessions(),
      access: { apply: () => undefined },
      logger: recordingLogger(notes),
      track: () => undefined,
    } as unknown as TunnelContext;
    const devices = { end: () => undefined, tunnel: () => ({ connected: false }), sendStatus: () => undefined };
    const feed = await startLiveFeed(ctx, { eventStore: watched, apps: { removeSubscription: () => undefined }, devices: devices as never, accessRevocations: undefined });
    await until(() => notes.length > 0);
    expect(notes.map((note) => note.message)).toEqual(['tunnel: the event store head is unavailable; the device event feed starts once it is']);
    // Not from the start of the log: nothing is followed while the head is unknown.
    expect(subscribed).toEqual([]);
    await until(() => headCalls >= 2);
    expect(subscribed).toEqual([]);
    // Asked again after a pause, not in a tight loop: one warning, a call per pause.
    expect(headCalls).toBeLessThanOrEqual(3);

    fs.faults = { ...NO_FAULTS };
    await until(() => subscribed.length > 0);
    const head = await store.headPosition();
    expect(subscribed).toEqual([{ fromPosition: head, streamPrefixes: ['device-'] }]);
    await feed.stop();
    await store.close();
  });
});
