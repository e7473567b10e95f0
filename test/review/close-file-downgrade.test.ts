/**
 * Review of the close file (close-file.ts): a record, once written, is kept until a start
 * ignores it; versions before the close file do not know close.rec and leave it as it is.
 * After a downgrade such a version treats damage in the last acknowledged record as a torn
 * tail (cuts it) and appends over those bytes; after the upgrade the old record names the
 * same active segment, vouches for no more bytes than it has, and refuses the log for good.
 *
 * Severity: Low (needs a downgrade across the change and damage in the vouched record; the
 * log refuses to open until close.rec is deleted by hand, and the error points at events.log
 * bytes the operator cannot repair, since they were rewritten with acknowledged events).
 *
 * Sequence:
 *   1. Ten appends, a full disk, a failed append, a clean stop: close.rec vouches for events.log.
 *   2. One bit flips in the last acknowledged record.
 *   3. Downgrade (simulated: the start does not see close.rec, as an earlier version does not
 *      read it; the file itself stays in the directory): the damaged record is cut as a torn
 *      tail, three events are appended (past the vouched length), clean stop with space.
 *   4. Upgrade: start. Expected: the log opens (with 9 + 3 events); the record is stale.
 */
import { newEvent } from '../contract/eventstore.contract';
import { Rng } from '../sim/rng';
import { NO_FAULTS, SimFs } from '../sim/sim-fs';
import { CLOSE, DIR, LOG, openSim, replaceCloseFile, startOutcome, tenThenStopOnFullDisk } from './close-file-support';

describe('review: a close file left across a downgrade and an upgrade', () => {
  it('does not refuse a log that a version without the close file cut and appended to', async () => {
    const fs = new SimFs(new Rng(7601));
    const last = await tenThenStopOnFullDisk(fs, 'device-1');
    const vouched = fs.fileBytes(LOG).length;
    fs.faults = { ...NO_FAULTS };
    fs.flipBit(LOG, last + 30, 4);

    // 3. The earlier version: close.rec is not read nor written (moved aside for this start only).
    const kept = fs.fileBytes(CLOSE);
    await fs.unlink(CLOSE);
    await fs.syncDirectory(DIR);
    const earlier = await openSim(fs);
    for (let i = 1; i <= 3; i++) await earlier.append('device-1', [newEvent('Renamed', { name: `Later ${i}` })], 'any');
    await earlier.close();
    fs.processExit();
    await replaceCloseFile(fs, kept);
    expect(fs.fileBytes(LOG).length).toBeGreaterThan(vouched);

    // 4. The upgrade.
    expect(await startOutcome(fs, 'device-1')).toBe('opened with 12 events');
  });
});
