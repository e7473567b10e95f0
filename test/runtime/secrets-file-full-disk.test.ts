import fs, { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { EmbeddedConfig } from '../../src/config';
import { loadConfig } from '../../src/config';
import { resolveEmbeddedSecrets } from '../../src/secrets';

/**
 * A DATA_DIR on a full disk: the first start cannot write `secrets.json`. It must fail without
 * leaving an empty or partial file behind, so that once space is freed the next start works
 * (instead of failing at every start with "Unexpected end of JSON input" until someone deletes
 * the file). A start that finds the file never reads a half-written one either (simultaneous
 * first starts), and the file is owner-only (decisions §1).
 */

let parent: string;
let config: EmbeddedConfig;
beforeEach(() => {
  parent = mkdtempSync(join(tmpdir(), 'hhc-secrets-'));
  const loaded = loadConfig({ DATA_DIR: join(parent, 'data') });
  if (loaded.mode !== 'embedded') throw new Error('expected an embedded configuration');
  config = loaded;
});
afterEach(() => {
  jest.restoreAllMocks();
  rmSync(parent, { recursive: true, force: true });
});

const enospc = (): never => {
  throw Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC', errno: -28, syscall: 'write' });
};

test('a secrets file that could not be written (full disk) leaves nothing behind, and the next start generates and keeps one', () => {
  jest.spyOn(fs, 'writeSync').mockImplementation(enospc);
  expect(() => resolveEmbeddedSecrets(config)).toThrow(/ENOSPC/);
  expect(readdirSync(config.dataDir)).toEqual([]);
  jest.restoreAllMocks();

  const first = resolveEmbeddedSecrets(config);
  expect(first.secrets.jwtAccessSecret.length).toBeGreaterThanOrEqual(32);
  expect(resolveEmbeddedSecrets(config).secrets).toEqual(first.secrets);
  expect(readdirSync(config.dataDir)).toEqual(['secrets.json']);
  expect(statSync(first.file).mode & 0o777).toBe(0o600);
});

test('a write cut short after some bytes leaves no partial secrets file either', () => {
  const real = fs.writeSync.bind(fs) as (fd: number, buffer: Uint8Array | string, ...rest: unknown[]) => number;
  jest.spyOn(fs, 'writeSync').mockImplementation(((fd: number, buffer: Uint8Array | string) => {
    // Some bytes reach the file, then the disk is full.
    real(fd, typeof buffer === 'string' ? buffer.slice(0, 10) : buffer.subarray(0, 10));
    enospc();
  }) as typeof fs.writeSync);
  expect(() => resolveEmbeddedSecrets(config)).toThrow(/ENOSPC/);
  expect(readdirSync(config.dataDir)).toEqual([]);
  jest.restoreAllMocks();
  expect(() => resolveEmbeddedSecrets(config)).not.toThrow();
});
