/**
 * Review of the close file (close-file.ts): its header and the README promise that a
 * "foreign" close file is ignored and "never makes a log unopenable". A record only names
 * (base, generation) of the active segment, and every log starts with base 0, generation 0,
 * so a close.rec from one log is taken as vouching for any other log's first segment that
 * is at least as long, and refuses it.
 *
 * Severity: Medium (a healthy log refuses to open until close.rec is deleted by hand; the
 * error names events.log at a byte that is not damaged, so an operator is sent to restore
 * a log that needs nothing. The README backup section half-admits it for "a log restored
 * from another moment", which contradicts "never makes a log unopenable" a few lines up).
 *
 * Sequence:
 *   1. Log A: ten appends, a full disk, a failed append, a clean stop: close.rec vouches for
 *      events.log (base 0, generation 0, its length, its checksum).
 *   2. The directory's segment files are replaced by those of another log B (a restore of
 *      another hub's backup, or a migration, which per README leaves close.rec out of the
 *      copy, so the one already in the directory stays). B's events.log is longer than A's.
 *   3. Start: close.rec names base 0 generation 0 and vouches for fewer bytes than B has:
 *      used, checksum mismatch, CorruptEventLogError for events.log.
 */
import { CLOSE_FILE_NAME, decodeCloseFile } from '../../src/infra/eventstore/embedded/close-file';
import { newEvent } from '../contract/eventstore.contract';
import { Rng } from '../sim/rng';
import { NO_FAULTS, SimFs } from '../sim/sim-fs';
import { CLOSE, DIR, LOG, openSim, startOutcome, tenThenStopOnFullDisk } from './close-file-support';

describe('review: a close file from another log', () => {
  it('is ignored: another log restored into the directory opens with all its events', async () => {
    // 1. Log A, stopped on a full disk right after a failed write: close.rec vouches for it.
    const fs = new SimFs(new Rng(7201));
    await tenThenStopOnFullDisk(fs, 'device-a');
    fs.faults = { ...NO_FAULTS };
    expect(decodeCloseFile(fs.fileBytes(CLOSE))).toMatchObject({ base: 0, generation: 0 });

    // Log B, elsewhere: longer than A, stopped cleanly.
    const other = new SimFs(new Rng(7202));
    const b = await openSim(other);
    for (let i = 1; i <= 20; i++) await b.append('device-b', [newEvent('Renamed', { name: `B ${i}` })], 'any');
    await b.close();
    other.processExit();
    expect(other.fileBytes(LOG).length).toBeGreaterThan(fs.fileBytes(LOG).length);

    // 2. B's segment files restored into A's directory (close.rec left out of the copy, as advised).
    for (const { name } of fs.list(DIR)) if (name !== CLOSE_FILE_NAME) await fs.unlink(`${DIR}/${name}`);
    for (const { name } of other.list(DIR)) {
      if (name === CLOSE_FILE_NAME) continue;
      const bytes = other.fileBytes(`${DIR}/${name}`);
      const handle = await fs.open(`${DIR}/${name}`, 'w');
      await handle.write(bytes, 0, bytes.length, 0);
      await handle.datasync();
      await handle.close();
    }
    await fs.syncDirectory(DIR);

    // 3. The start.
    expect(await startOutcome(fs, 'device-b')).toBe('opened with 20 events');
  });
});
