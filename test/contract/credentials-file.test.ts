import { appendFile, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CREDENTIALS_FILE, openFileCredentialStore } from '../../src/infra/credentials/file';
import type { CredentialStore } from '../../src/infra/credentials/port';
import { credentialStoreContract } from './credentials.contract';

credentialStoreContract('durable file (embedded)', async () => {
  const dataDir = await mkdtemp(join(tmpdir(), 'hhc-credentials-'));
  const opened: CredentialStore[] = [await openFileCredentialStore(dataDir)];
  return {
    store: opened[0] as CredentialStore,
    reopen: async () => {
      const store = await openFileCredentialStore(dataDir);
      opened.push(store);
      return store;
    },
    cleanup: async () => {
      for (const store of opened) await store.close();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
});

describe('file credential store: crash recovery', () => {
  let dataDir: string;

  beforeEach(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'hhc-credentials-'));
  });

  afterEach(async () => {
    await rm(dataDir, { recursive: true, force: true });
  });

  it('is readable by its owner only', async () => {
    const store = await openFileCredentialStore(dataDir);
    await store.close();
    expect((await stat(join(dataDir, CREDENTIALS_FILE))).mode & 0o077).toBe(0);
  });

  it('cuts off a torn last line and keeps appending after the intact ones', async () => {
    let store = await openFileCredentialStore(dataDir);
    await store.put('u1', 1, '$argon2id$one');
    await store.close();
    await appendFile(join(dataDir, CREDENTIALS_FILE), '{"u":"u2","v":1,"h":"$argon2id$to');

    store = await openFileCredentialStore(dataDir);
    expect(await store.get('u1', 1)).toBe('$argon2id$one');
    expect(await store.get('u2', 1)).toBeNull();
    await store.put('u3', 1, '$argon2id$three');
    await store.close();

    store = await openFileCredentialStore(dataDir);
    expect(await store.get('u3', 1)).toBe('$argon2id$three');
    await store.close();
    const lines = (await readFile(join(dataDir, CREDENTIALS_FILE), 'utf8')).split('\n');
    expect(lines.filter((l) => l.length > 0)).toHaveLength(2);
  });

  it('keeps a complete last line whose newline was lost', async () => {
    await writeFile(join(dataDir, CREDENTIALS_FILE), '{"u":"u1","v":1,"h":"$argon2id$one"}', { mode: 0o600 });
    let store = await openFileCredentialStore(dataDir);
    await store.put('u2', 1, '$argon2id$two');
    await store.close();
    store = await openFileCredentialStore(dataDir);
    expect(await store.get('u1', 1)).toBe('$argon2id$one');
    expect(await store.get('u2', 1)).toBe('$argon2id$two');
    await store.close();
  });

  it('refuses to start on damage followed by intact lines (acknowledged data)', async () => {
    await writeFile(
      join(dataDir, CREDENTIALS_FILE),
      '{"u":"u1","v":1,"h":"a"}\n{"u":"u2",#garbage\n{"u":"u3","v":1,"h":"c"}\n',
      { mode: 0o600 },
    );
    await expect(openFileCredentialStore(dataDir)).rejects.toThrow(/line 2 is damaged/);
  });
});
