/**
 * Review of the close file (close-file.ts): CloseFile.prepare unlinks close.rec on any error
 * once it holds a handle, also when the handle is the existing close file opened in place
 * ('r+') and the error is a transient one on stat(). The record that file holds may be the
 * one this very start used (it vouches for the acknowledged bytes of the active segment);
 * deleting it drops that vouching for every later start, which then cuts damage in those
 * bytes as a torn tail.
 *
 * Severity: Low (needs an I/O error on fstat of close.rec at the start right after a clean
 * stop on a full disk, then damage in the last acknowledged record; the outcome is an
 * acknowledged event silently cut instead of refused).
 *
 * Sequence:
 *   1. Ten appends, a full disk, a failed append, a clean stop: close.rec vouches (used record).
 *   2. Start, disk still full: the record is used (checked, intact); prepare opens close.rec
 *      'r+', stat() fails with EIO: prepare closes it and unlinks close.rec; read-only.
 *   3. Clean stop (disk full: no close record, no close file).
 *   4. One bit flips in the last acknowledged record.
 *   5. Start: nothing vouches any more; the damaged record is cut as a torn tail (9 of 10).
 *   Expected: step 2 leaves close.rec in place (it only failed to be prepared), and step 5 refuses.
 */
import { openSim, CLOSE, LOG, startOutcome, tenThenStopOnFullDisk } from './close-file-support';
import type { OpenMode, StoreFile } from '../../src/infra/eventstore/embedded/io';
import { readAll } from '../contract/eventstore.contract';
import { Rng } from '../sim/rng';
import { SimFs, SimIoError } from '../sim/sim-fs';

/** The simulated file system, failing stat() on the next handle of close.rec opened in place (once). */
class CloseFileStatEioFs extends SimFs {
  failNextCloseFileStat = false;

  override async open(file: string, mode: OpenMode): Promise<StoreFile> {
    const handle = await super.open(file, mode);
    if (!this.failNextCloseFileStat || file !== CLOSE || mode !== 'r+') return handle;
    this.failNextCloseFileStat = false;
    return {
      read: (buffer, offset, length, position) => handle.read(buffer, offset, length, position),
      write: (buffer, offset, length, position) => handle.write(buffer, offset, length, position),
      datasync: () => handle.datasync(),
      truncate: (length) => handle.truncate(length),
      stat: () => Promise.reject(new SimIoError('EIO', 'fstat', file)),
      close: () => handle.close(),
    };
  }
}

describe('review: a transient error while preparing the close file at open', () => {
  it('does not delete the close file whose record the start used', async () => {
    const fs = new CloseFileStatEioFs(new Rng(7501));
    const last = await tenThenStopOnFullDisk(fs, 'device-1');

    // 2.-3. A start on the still full disk (read-only), its stat error on close.rec, a clean stop.
    fs.failNextCloseFileStat = true;
    const second = await openSim(fs);
    expect((await readAll(second.readStream('device-1'))).length).toBe(10);
    await second.close();
    fs.processExit();
    fs.flipBit(LOG, last + 30, 4);

    // Without the stat error this start refuses the damaged record (the close file vouches for it).
    expect(await startOutcome(fs, 'device-1')).toBe('refused');
  });
});
