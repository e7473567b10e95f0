import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import type { EmbeddedConfig, Secrets } from './config';

const storedSecrets = z.object({
  jwtAccessSecret: z.string().min(32),
  jwtRefreshSecret: z.string().min(32),
  jwtDeviceSecret: z.string().min(32),
  internalApiKeys: z.array(z.string().min(1)).min(1),
});

function generate(): Secrets {
  const secret = (): string => randomBytes(48).toString('base64url');
  return { jwtAccessSecret: secret(), jwtRefreshSecret: secret(), jwtDeviceSecret: secret(), internalApiKeys: [secret()] };
}

/**
 * Embedded mode needs no configuration: secrets not given in the environment are
 * generated once and kept in DATA_DIR (readable by the owner only), so tokens stay
 * valid across restarts. Values from the environment always win.
 */
export function resolveEmbeddedSecrets(config: EmbeddedConfig): { secrets: Secrets; file: string } {
  mkdirSync(config.dataDir, { recursive: true, mode: 0o700 });
  const file = join(config.dataDir, 'secrets.json');
  let stored: Secrets;
  if (existsSync(file)) {
    const parsed = storedSecrets.safeParse(JSON.parse(readFileSync(file, 'utf8')));
    if (!parsed.success) throw new Error(`${file} is not a valid secrets file; remove it to generate new secrets`);
    stored = parsed.data;
  } else {
    stored = generate();
    writeFileSync(file, JSON.stringify(stored, null, 2), { mode: 0o600, flag: 'wx' });
  }
  return { secrets: { ...stored, ...config.secrets }, file };
}
