import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readSnapshotFile } from '../../src/infra/snapshot/file';
import { createLogger } from '../../src/logger';
import type { SnapshotBody } from '../../src/runtime/snapshot';
import { startSnapshotWriter } from '../../src/runtime/snapshot-writer';

/**
 * The snapshot writer (src/runtime/snapshot-writer.ts): a write once enough events were
 * appended, none while what a snapshot would cover has not moved, and the position in the
 * header is the read models' checkpoint. Counted, not timed: the interval is an hour.
 */

const bodyAt = (position: number): SnapshotBody => ({
  readModels: { checkpoints: { projector: `${position}/${position}` }, collections: { users: [] } },
});

/** A writer of `file` whose interval is an hour (only the count and explicit writes write). */
function counted(file: string, everyEvents: number, collect: () => SnapshotBody | null) {
  return startSnapshotWriter({ file, version: 'v', logger: createLogger('silent'), everyEvents, intervalMs: 3_600_000, restored: bodyAt(100), collect });
}

let dir: string;
beforeEach(() => (dir = mkdtempSync(join(tmpdir(), 'hhc-snapwriter-'))));
afterEach(() => rmSync(dir, { recursive: true, force: true }));

test('writes after everyEvents appends, and only when the state moved on', async () => {
  const file = join(dir, 'read-models.snapshot');
  let position = 100;
  let collected = 0;
  const writer = startSnapshotWriter({
    file,
    version: 'v',
    logger: createLogger('silent'),
    everyEvents: 10,
    intervalMs: 3_600_000,
    restored: bodyAt(100),
    collect: () => {
      collected++;
      return bodyAt(position);
    },
  });

  writer.appended(9);
  await writer.write(); // the restored state: nothing new to write
  expect(existsSync(file)).toBe(false);

  position = 150;
  writer.appended(1); // the tenth event since the start: a write
  await writer.write(); // waits for it (and finds nothing more to write)
  const read = await readSnapshotFile(file);
  expect(read).toMatchObject({ kind: 'ok', header: { version: 'v', position: '150/150' }, body: bodyAt(150) });
  expect(collected).toBe(3);

  writer.appended(5);
  position = 160;
  await writer.stop();
  writer.appended(100); // stopped: no more periodic writes
  await writer.write(); // the shutdown write still writes what moved on
  expect(await readSnapshotFile(file)).toMatchObject({ kind: 'ok', header: { position: '160/160' } });
});

test('writeOrFail writes although the checkpoint has not moved, and rejects when the file cannot be written', async () => {
  const file = join(dir, 'read-models.snapshot');
  const writer = startSnapshotWriter({
    file,
    version: 'v',
    logger: createLogger('silent'),
    everyEvents: 1_000,
    intervalMs: 3_600_000,
    restored: bodyAt(100),
    collect: () => bodyAt(100),
  });
  mkdirSync(`${file}.tmp`); // the temporary file cannot be opened
  await expect(writer.writeOrFail()).rejects.toThrow();
  expect(existsSync(file)).toBe(false);
  rmSync(`${file}.tmp`, { recursive: true });
  await writer.write(); // the chain goes on after a failed write; `write` skips an unmoved checkpoint
  expect(existsSync(file)).toBe(false);
  await writer.writeOrFail();
  expect(await readSnapshotFile(file)).toMatchObject({ kind: 'ok', header: { position: '100/100' } });
  await writer.stop();
});

test('a write the count asked for while the projector had not moved on is asked again, with no further append', async () => {
  const file = join(dir, 'read-models.snapshot');
  let position = 100;
  const writer = counted(file, 5, () => bodyAt(position));
  writer.appended(5); // the count is reached, but the projector has not applied anything yet
  await writer.write();
  expect(existsSync(file)).toBe(false);
  position = 105; // the projector catches up; no append follows (the burst is over)
  for (let i = 0; i < 200 && !existsSync(file); i++) await new Promise((resolve) => setTimeout(resolve, 25));
  expect(await readSnapshotFile(file)).toMatchObject({ kind: 'ok', header: { position: '105/105' } });
  await writer.stop();
});

test('a write that keeps failing is not tried again at once, over and over, while the count stays reached', async () => {
  const file = join(dir, 'read-models.snapshot');
  let position = 100;
  let collected = 0;
  const writer = counted(file, 5, () => {
    collected++;
    return bodyAt(position++);
  });
  mkdirSync(`${file}.tmp`); // every write fails
  writer.appended(5);
  await writer.write();
  await new Promise((resolve) => setTimeout(resolve, 300));
  // The count's write, the explicit one: no loop of writes on its own (a spin would make thousands).
  expect(collected).toBeLessThan(10);
  expect(existsSync(file)).toBe(false);
  await writer.stop();
});
