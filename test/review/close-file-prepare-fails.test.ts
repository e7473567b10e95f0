/**
 * Review of the close file (close-file.ts): a record the open did not use must be cleared
 * before anything is written to the log, "so that it never comes to vouch for bytes written
 * later". That clearing lives only in the CloseFile object; when CloseFile.prepare fails
 * (here a transient EMFILE on opening close.rec, an error the open itself treats as
 * retryable everywhere else) the store runs with `closeFile === null`, nothing clears the
 * ignored record, appends go on, and the record comes to apply to bytes it never saw.
 *
 * Severity: Medium (the worst outcome: a healthy log refuses to open, for good, until
 * close.rec is deleted by hand, and the error blames events.log, not close.rec; but it needs
 * a stale record in close.rec and a failure to open close.rec at that one start).
 *
 * Sequence:
 *   1. close.rec holds an intact record for the active segment (base 0, generation 0) vouching
 *      for 600 bytes with some checksum, left from an earlier log in the directory (the case of
 *      the existing test "a stale record left from an earlier log in the directory never comes
 *      to vouch for the new log"), or from another moment of this one (a restore).
 *   2. Open: the record is ignored (it vouches beyond the segment's end), as designed.
 *   3. CloseFile.prepare: open(close.rec, 'r+') fails once with EMFILE; prepare logs and
 *      returns null. The write probe then runs without clearing the record.
 *   4. Ten appends grow events.log past 600 bytes (acknowledged).
 *   5. A crash (or any stop), then a start: the record now names the active segment and
 *      vouches for no more than it has, its checksum does not match: CorruptEventLogError.
 */
import { CLOSE_FILE_NAME, encodeCloseFile } from '../../src/infra/eventstore/embedded/close-file';
import type { OpenMode, StoreFile } from '../../src/infra/eventstore/embedded/io';
import { newEvent } from '../contract/eventstore.contract';
import { Rng } from '../sim/rng';
import { SimFs, SimIoError } from '../sim/sim-fs';
import { CLOSE, DIR, LOG, openSim, replaceCloseFile, startOutcome } from './close-file-support';

/** The simulated file system, failing the next open of close.rec for writing with EMFILE (once). */
class CloseFileEmfileFs extends SimFs {
  failNextCloseFileOpen = false;

  override async open(file: string, mode: OpenMode): Promise<StoreFile> {
    if (this.failNextCloseFileOpen && file === CLOSE && mode === 'r+') {
      this.failNextCloseFileOpen = false;
      throw new SimIoError('EMFILE', 'open', file);
    }
    return super.open(file, mode);
  }
}

describe('review: the close file when it cannot be prepared at open', () => {
  it('a stale record the open ignored is still cleared before appends when opening close.rec fails transiently (EMFILE)', async () => {
    const fs = new CloseFileEmfileFs(new Rng(7101));
    await fs.mkdir(DIR);
    await replaceCloseFile(fs, encodeCloseFile({ base: 0, generation: 0, length: 600, crc: 0x1234 }));
    fs.failNextCloseFileOpen = true;
    const messages: string[] = [];
    const store = await openSim(fs, { log: (message) => messages.push(message) });
    expect(messages.some((message) => message.includes(`could not prepare ${CLOSE_FILE_NAME}`))).toBe(true);
    for (let i = 1; i <= 10; i++) await store.append('device-1', [newEvent('Renamed', { name: `Name ${i}` })], 'any');
    expect(fs.fileBytes(LOG).length).toBeGreaterThan(600);
    fs.crash();

    expect(await startOutcome(fs, 'device-1')).toBe('opened with 10 events');
  });
});
