import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

/** Every file under `dir`, recursively: what a byte scan of a data directory reads. */
export function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? filesUnder(path) : [path];
  });
}

/** The needles whose UTF-8 bytes occur in `haystack`. */
export function foundIn(haystack: string | Buffer, needles: readonly string[]): string[] {
  const bytes = typeof haystack === 'string' ? Buffer.from(haystack, 'utf8') : haystack;
  return needles.filter((n) => bytes.includes(Buffer.from(n, 'utf8')));
}
