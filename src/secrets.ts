import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, fsyncSync, linkSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import type { EmbeddedConfig, Secrets } from './config';
import { CREDENTIALS_FILE } from './infra/credentials/file';

const storedSecrets = z.object({
  jwtAccessSecret: z.string().min(32),
  jwtRefreshSecret: z.string().min(32),
  jwtDeviceSecret: z.string().min(32),
  internalApiKeys: z.array(z.string().min(1)).min(1),
  // Added later: a secrets file of an earlier version gets one at its next start.
  dataKeyEncryptionKey: z.string().min(32).optional(),
});

function generate(): Secrets {
  const secret = (): string => randomBytes(48).toString('base64url');
  return {
    jwtAccessSecret: secret(),
    jwtRefreshSecret: secret(),
    jwtDeviceSecret: secret(),
    internalApiKeys: [secret()],
    dataKeyEncryptionKey: secret(),
  };
}

/**
 * Embedded mode needs no configuration: secrets not given in the environment are
 * generated once and kept in DATA_DIR (readable by the owner only), so tokens stay
 * valid across restarts. Values from the environment always win.
 */
export function resolveEmbeddedSecrets(config: EmbeddedConfig): { secrets: Secrets; file: string } {
  mkdirSync(config.dataDir, { recursive: true, mode: 0o700 });
  const file = join(config.dataDir, 'secrets.json');
  if (!existsSync(file)) writeSecretsFile(config.dataDir, file, generate());
  const parsed = storedSecrets.safeParse(JSON.parse(readFileSync(file, 'utf8')));
  if (!parsed.success) throw new Error(`${file} is not a valid secrets file; remove it to generate new secrets`);
  let stored: Secrets = parsed.data;
  if (stored.dataKeyEncryptionKey === undefined && config.secrets.dataKeyEncryptionKey === undefined) {
    // A key store holding data keys was written with a key-encryption key: a new one would open
    // none of them (everyone's personal data unreadable) and wrap new keys the lost one cannot.
    if (holdsDataKeys(join(config.dataDir, CREDENTIALS_FILE))) {
      throw new Error(
        `${file} has no dataKeyEncryptionKey, but ${CREDENTIALS_FILE} holds data keys wrapped by one: ` +
          'restore it (from a backup of secrets.json, or set DATA_KEY_ENCRYPTION_KEY); a new key would leave every person\'s data unreadable',
      );
    }
    // A secrets file of a version before crypto-shredding: the key is added once, the rest kept.
    stored = { ...stored, dataKeyEncryptionKey: randomBytes(48).toString('base64url') };
    writeSecretsFile(config.dataDir, file, stored, 'replace');
  }
  return { secrets: { ...stored, ...config.secrets }, file };
}

/** Whether the embedded key store has a data-key line (`{"k": subject, ...}`); a torn or unreadable line is not one. */
function holdsDataKeys(credentials: string): boolean {
  if (!existsSync(credentials)) return false;
  return readFileSync(credentials, 'utf8')
    .split('\n')
    .some((line) => {
      try {
        const parsed: unknown = JSON.parse(line);
        return typeof parsed === 'object' && parsed !== null && 'k' in parsed;
      } catch {
        return false;
      }
    });
}

/**
 * Writes the secrets whole or not at all: into a temporary file of this process, fsynced, then
 * linked to its name (which fails if another first start got there first: its secrets are then
 * the ones read). A write that fails (a full disk) leaves no empty or partial file that would
 * stop every later start.
 */
function writeSecretsFile(directory: string, file: string, secrets: Secrets, mode: 'create' | 'replace' = 'create'): void {
  const temporary = `${file}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`;
  try {
    const fd = openSync(temporary, 'wx', 0o600);
    try {
      const bytes = Buffer.from(JSON.stringify(secrets, null, 2), 'utf8');
      for (let written = 0; written < bytes.length; ) {
        const count = writeSync(fd, bytes, written, bytes.length - written);
        if (count <= 0) throw new Error(`Could not write ${temporary}: no progress (is the disk full?)`);
        written += count;
      }
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    if (mode === 'replace') {
      renameSync(temporary, file);
    } else {
      try {
        linkSync(temporary, file);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      }
    }
    const dir = openSync(directory, 'r');
    try {
      fsyncSync(dir);
    } finally {
      closeSync(dir);
    }
  } finally {
    rmSync(temporary, { force: true });
  }
}
