import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { EmbeddedConfig } from '../../src/config';
import { loadConfig } from '../../src/config';
import { CREDENTIALS_FILE } from '../../src/infra/credentials/file';
import { resolveEmbeddedSecrets } from '../../src/secrets';

/**
 * The key-encryption key of an embedded DATA_DIR (decisions §11, README "Personal data"): a
 * `secrets.json` written before crypto-shredding gets one at its next start. A `secrets.json`
 * that lost it while the key store holds data keys wrapped by it must not get a new one: the
 * new key would open none of them (everyone's personal data unreadable, every login of theirs
 * failing) and the keys made afterwards would be wrapped by a key the restored one cannot open.
 */

let parent: string;
let config: EmbeddedConfig;
const older = {
  jwtAccessSecret: 'a'.repeat(48),
  jwtRefreshSecret: 'b'.repeat(48),
  jwtDeviceSecret: 'c'.repeat(48),
  internalApiKeys: ['d'.repeat(48)],
};

beforeEach(() => {
  parent = mkdtempSync(join(tmpdir(), 'hhc-kek-'));
  const loaded = loadConfig({ DATA_DIR: join(parent, 'data') });
  if (loaded.mode !== 'embedded') throw new Error('expected an embedded configuration');
  config = loaded;
  mkdirSync(config.dataDir, { recursive: true, mode: 0o700 });
  writeFileSync(join(config.dataDir, 'secrets.json'), JSON.stringify(older), { mode: 0o600 });
});
afterEach(() => {
  rmSync(parent, { recursive: true, force: true });
});

test('a secrets file of a version before crypto-shredding, with no data keys kept, gets a key-encryption key once', () => {
  writeFileSync(join(config.dataDir, CREDENTIALS_FILE), `${JSON.stringify({ u: 'u1', v: 1, h: '$argon2id$x' })}\n`, { mode: 0o600 });
  const first = resolveEmbeddedSecrets(config);
  expect(first.secrets.dataKeyEncryptionKey?.length ?? 0).toBeGreaterThanOrEqual(32);
  expect(resolveEmbeddedSecrets(config).secrets.dataKeyEncryptionKey).toBe(first.secrets.dataKeyEncryptionKey);
});

test('a secrets file that lost its key-encryption key while data keys are kept refuses to start instead of generating a new one', () => {
  const keyLine = JSON.stringify({ k: 'user:11111111-1111-4111-8111-111111111111', i: 'abcdef012345', w: 'wrapped-by-the-lost-key' });
  writeFileSync(join(config.dataDir, CREDENTIALS_FILE), `${keyLine}\n`, { mode: 0o600 });
  expect(() => resolveEmbeddedSecrets(config)).toThrow(/dataKeyEncryptionKey/);
  expect(JSON.parse(readFileSync(join(config.dataDir, 'secrets.json'), 'utf8'))).toEqual(older);
});

test('the key given in DATA_KEY_ENCRYPTION_KEY is used when the secrets file has none, even with data keys kept', () => {
  writeFileSync(join(config.dataDir, CREDENTIALS_FILE), `${JSON.stringify({ k: 'user:x', i: 'abcdef012345', w: 'w' })}\n`, { mode: 0o600 });
  const given = loadConfig({ DATA_DIR: config.dataDir, DATA_KEY_ENCRYPTION_KEY: 'e'.repeat(48) });
  if (given.mode !== 'embedded') throw new Error('expected an embedded configuration');
  expect(resolveEmbeddedSecrets(given).secrets.dataKeyEncryptionKey).toBe('e'.repeat(48));
});
