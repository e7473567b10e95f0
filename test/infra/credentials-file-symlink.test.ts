import { mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openFileCredentialStore } from '../../src/infra/credentials/file';

/**
 * DATA_DIR owner-only (decisions §1) protects what the service writes only if it writes its own
 * files: a symbolic link planted as `credentials.jsonl` (say, before the directory was made
 * owner-only) must be refused, not followed; opening it repairs a "torn tail" by truncating,
 * which would cut the file the link points to.
 */

let parent: string;
beforeEach(async () => {
  parent = await mkdtemp(join(tmpdir(), 'hhc-cred-link-'));
});
afterEach(async () => {
  await rm(parent, { recursive: true, force: true });
});

test('a symbolic link planted as credentials.jsonl is refused, and the file it points to is left as it was', async () => {
  const dataDir = join(parent, 'data');
  const victim = join(parent, 'precious');
  await writeFile(victim, 'precious content\nsecond line without newline');
  await mkdir(dataDir, { mode: 0o700 });
  await symlink(victim, join(dataDir, 'credentials.jsonl'));
  await expect(openFileCredentialStore(dataDir)).rejects.toThrow(/symbolic link/);
  expect(await readFile(victim, 'utf8')).toBe('precious content\nsecond line without newline');
});
