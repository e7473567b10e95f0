import { spawn } from 'node:child_process';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { openEmbeddedEventStore, type CompactionStep } from '../../src/infra/eventstore/embedded';
import { isReclaimable, replay, writeHeartbeatHistory } from './fixtures/heartbeat-history';

/**
 * A process killed (SIGKILL) right after each step of a compaction leaves a log that opens
 * with every event that was not expired, in order, at its position; the next run finishes
 * the job. The clock is fixed, so age does not depend on how long the test takes.
 */

const PROJECT_ROOT = resolve(__dirname, '..', '..');
const CHILD = join(__dirname, 'fixtures', 'compact-until-killed.ts');
const SEGMENT_BYTES = 4096;

function runChildUntilKilled(dir: string, step: CompactionStep, now: number): Promise<string> {
  const child = spawn(process.execPath, ['--import', 'tsx', CHILD, dir, step, String(now), String(SEGMENT_BYTES)], {
    cwd: PROJECT_ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  return new Promise((resolveExit) => child.once('exit', (code, signal) => resolveExit(`${String(signal ?? code)} ${output}`.trim())));
}

describe('a crash during compaction', () => {
  let dir: string;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'hhc-compaction-crash-'));
  });

  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it.each<CompactionStep>(['temporary-written', 'temporary-synced', 'renamed', 'directory-synced', 'index-written'])(
    'right after step "%s" loses nothing that was not expired',
    async (step) => {
      const clock = { now: 0 };
      const notes: string[] = [];
      const options = { now: () => clock.now, segmentBytes: SEGMENT_BYTES, reclaimIntervalMs: 0, log: (note: string) => notes.push(note) };
      const writer = await openEmbeddedEventStore(dir, options);
      await writeHeartbeatHistory(writer, clock);
      const before = await replay(writer);
      await writer.close();
      const kept = before.filter((e) => !isReclaimable(e, before, clock.now));

      expect(await runChildUntilKilled(dir, step, clock.now)).toBe('SIGKILL');
      notes.length = 0;

      const reopened = await openEmbeddedEventStore(dir, options);
      try {
        const afterCrash = await replay(reopened);
        // Some expired heartbeats may be gone already; everything else is there, unchanged.
        expect(afterCrash.filter((e) => !isReclaimable(e, before, clock.now))).toEqual(kept);
        expect(afterCrash.every((e) => before.some((b) => b.id === e.id && b.position.commit === e.position.commit))).toBe(true);
        expect((await readdir(dir)).filter((name) => name.endsWith('.compact'))).toEqual([]);
        // From the rename on, the first segment is the compacted copy.
        const renamed = ['renamed', 'directory-synced', 'index-written'].includes(step);
        expect(afterCrash.length < before.length).toBe(renamed);
        // Until its new index checkpoint is written, the compacted segment is scanned at open.
        expect(notes.some((note) => note.includes('not used (stale'))).toBe(step === 'renamed' || step === 'directory-synced');
        expect(notes.some((note) => note.includes('compaction that did not finish'))).toBe(step.startsWith('temporary'));

        await reopened.reclaimExpired();

        expect(await replay(reopened)).toEqual(kept);
      } finally {
        await reopened.close();
      }
      const again = await openEmbeddedEventStore(dir, options);
      expect(await replay(again)).toEqual(kept);
      await again.close();
    },
    60_000,
  );
});
