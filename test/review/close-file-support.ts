/** Shared steps of the close file review tests (test/review/close-file-*.test.ts), on the simulated file system. */
import { CorruptEventLogError, openEmbeddedEventStore, type EmbeddedEventStore, type EmbeddedEventStoreOptions } from '../../src/infra/eventstore/embedded';
import { CLOSE_FILE_NAME } from '../../src/infra/eventstore/embedded/close-file';
import { newEvent, readAll } from '../contract/eventstore.contract';
import { NO_FAULTS, type SimFs } from '../sim/sim-fs';

export const DIR = '/sim/data';
export const LOG = `${DIR}/events.log`;
export const CLOSE = `${DIR}/${CLOSE_FILE_NAME}`;

export async function openSim(fs: SimFs, options: EmbeddedEventStoreOptions = {}): Promise<EmbeddedEventStore> {
  await fs.mkdir(DIR);
  return openEmbeddedEventStore(DIR, { io: fs, lock: async () => async () => undefined, reclaimIntervalMs: 0, log: () => undefined, onTornTail: () => undefined, ...options });
}

/**
 * Ten appends to `stream`, a full disk, an append that fails, a clean stop (close.rec then
 * vouches), the process gone. Returns the position of the last acknowledged record. The disk stays full.
 */
export async function tenThenStopOnFullDisk(fs: SimFs, stream: string): Promise<number> {
  const store = await openSim(fs);
  for (let i = 1; i <= 10; i++) await store.append(stream, [newEvent('Renamed', { name: `${stream} ${i}` })], 'any');
  const last = Number((await readAll(store.readStream(stream))).at(-1)?.position.commit);
  fs.faults = { ...NO_FAULTS, diskFull: true };
  await expect(store.append(stream, [newEvent('Renamed', { name: `${stream} 11` })], 'any')).rejects.toThrow('Event store unavailable');
  await store.close();
  fs.processExit();
  return last;
}

/** What a start makes of the log: 'refused' (CorruptEventLogError), or how many events of `stream` it opened with. */
export async function startOutcome(fs: SimFs, stream: string): Promise<string> {
  return openSim(fs).then(
    async (opened) => {
      const count = (await readAll(opened.readStream(stream))).length;
      await opened.close();
      return `opened with ${count} events`;
    },
    (error: unknown) => (error instanceof CorruptEventLogError ? 'refused' : `failed: ${String(error)}`),
  );
}

/** Replaces the close file with `bytes`, durably. */
export async function replaceCloseFile(fs: SimFs, bytes: Buffer): Promise<void> {
  const handle = await fs.open(CLOSE, 'w');
  await handle.write(bytes, 0, bytes.length, 0);
  await handle.datasync();
  await handle.close();
  await fs.syncDirectory(DIR);
}
