import { mkdir, mkdtemp, rm, rmdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openFileCredentialStore } from '../../src/infra/credentials/file';

/**
 * A forget (an erasure's step) rewrites `credentials.jsonl` through a temporary file. When
 * that rewrite fails (a full disk, an unwritable directory; here a directory stands where the
 * temporary file goes), nothing was forgotten on disk, so nothing is forgotten in memory either:
 * the running store answers what a restart would read. Asking again once the fault is gone
 * forgets it, in memory and on disk.
 */

let dataDir: string;
beforeEach(async () => {
  dataDir = await mkdtemp(join(tmpdir(), 'hhc-cred-forget-'));
});
afterEach(async () => {
  await rm(dataDir, { recursive: true, force: true });
});

const KEY = { id: 'key-1', wrapped: 'd3JhcHBlZA' };

test('a forget whose rewrite fails leaves the hash and the data keys as they are on disk; asked again, it forgets them', async () => {
  const store = await openFileCredentialStore(dataDir);
  await store.put('user-1', 1, '$argon2id$v=19$m=1,t=1,p=1$c2FsdA$aGFzaA');
  await store.putDataKey('user:user-1', KEY);

  const blocker = join(dataDir, 'credentials.jsonl.tmp');
  await mkdir(blocker);
  await expect(store.forget({ userId: 'user-1', dataKeySubjects: ['user:user-1'], tombstones: ['user:user-1'] })).rejects.toThrow();
  expect(await store.get('user-1', 1)).not.toBeNull();
  expect(await store.getDataKey('user:user-1')).toEqual(KEY);
  // What a restart reads agrees.
  await store.close();
  const reopened = await openFileCredentialStore(dataDir);
  expect(await reopened.get('user-1', 1)).not.toBeNull();
  expect(await reopened.getDataKey('user:user-1')).toEqual(KEY);

  await rmdir(blocker);
  await reopened.forget({ userId: 'user-1', dataKeySubjects: ['user:user-1'], tombstones: ['user:user-1'] });
  expect(await reopened.get('user-1', 1)).toBeNull();
  expect(await reopened.getDataKey('user:user-1')).not.toEqual(KEY);
  await reopened.close();
  const again = await openFileCredentialStore(dataDir);
  expect(await again.get('user-1', 1)).toBeNull();
  expect(await again.getDataKey('user:user-1')).not.toEqual(KEY);
  await again.close();
});
