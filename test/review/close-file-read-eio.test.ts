/**
 * Review of the close file (close-file.ts): readCloseFile treats any read error but
 * EMFILE/ENFILE as "no close file" (logged, open goes on); CloseFile.prepare then opens the
 * same file, finds it has its size, takes its (unchecked) record as "not used", and the
 * write probe overwrites it with zeros. One transient EIO on reading a 64-byte file thus
 * both drops the vouching for this start and erases it for every later one.
 *
 * Severity: Low (needs a read error on close.rec at the one start after a clean stop on a
 * full disk and damage in the last acknowledged record; the outcome is the worst kind
 * though: an acknowledged event is cut as a torn tail without a refusal, and the record that
 * would have caught it on a retried start is gone).
 *
 * Sequence:
 *   1. Ten appends, a full disk, a failed append, a clean stop: close.rec vouches for events.log.
 *   2. One bit flips in the last acknowledged record.
 *   3. Start (disk still full): readFile(close.rec) fails once with EIO; the open treats the
 *      end of the log as after a crash and cuts the damaged record as a torn tail;
 *      prepare + write probe overwrite close.rec with zeros.
 *   Expected: the start refuses (as it does when the read works), or fails to be retried
 *   (as for EMFILE), and close.rec is left as it was.
 */
import { CorruptEventLogError } from '../../src/infra/eventstore/embedded';
import { decodeCloseFile } from '../../src/infra/eventstore/embedded/close-file';
import { Rng } from '../sim/rng';
import { SimFs, SimIoError } from '../sim/sim-fs';
import { CLOSE, LOG, openSim, startOutcome, tenThenStopOnFullDisk } from './close-file-support';

/** The simulated file system, failing the next whole-file read of close.rec with EIO (once). */
class CloseFileReadEioFs extends SimFs {
  failNextCloseFileRead = false;

  override async readFile(file: string): Promise<Buffer> {
    if (this.failNextCloseFileRead && file === CLOSE) {
      this.failNextCloseFileRead = false;
      throw new SimIoError('EIO', 'read', file);
    }
    return super.readFile(file);
  }
}

describe('review: a read error on the close file at the start after a stop on a full disk', () => {
  it('does not cut the damaged last acknowledged record nor erase the record that vouches for it', async () => {
    const fs = new CloseFileReadEioFs(new Rng(7401));
    const last = await tenThenStopOnFullDisk(fs, 'device-1');
    const vouching = fs.fileBytes(CLOSE);
    expect(decodeCloseFile(vouching)).toMatchObject({ base: 0, generation: 0, length: fs.fileBytes(LOG).length });
    fs.flipBit(LOG, last + 30, 4);
    fs.failNextCloseFileRead = true;

    const outcome = await startOutcome(fs, 'device-1');

    // Refused as with a readable close file, or failed to be retried: never opened with the record cut.
    expect(outcome).not.toMatch(/^opened/);
    expect(fs.fileBytes(CLOSE)).toEqual(vouching);
    await expect(openSim(fs)).rejects.toBeInstanceOf(CorruptEventLogError);
  });
});
