import { constants, promises as fs } from 'node:fs';
import { join } from 'node:path';
import { assertCredentialKey, assertHash, type CredentialStore } from './port';

/**
 * The embedded credential store: one JSON line per stored hash, appended to
 * `DATA_DIR/credentials.jsonl` (owner-only) and acknowledged after `fdatasync`; the whole
 * file is read into memory at start (a line is ~150 bytes per password change).
 *
 * A crash can leave the last line torn (no newline, or not JSON): it was never
 * acknowledged, so it is cut off at start. A damaged line followed by others was
 * acknowledged and is refused as corruption instead of being dropped.
 */
export const CREDENTIALS_FILE = 'credentials.jsonl';

interface Line {
  readonly u: string;
  readonly v: number;
  readonly h: string;
}

export class CorruptCredentialFileError extends Error {
  constructor(file: string, lineNumber: number) {
    super(`${file}: line ${lineNumber} is damaged, yet intact lines follow it; restore the file from a backup`);
    this.name = 'CorruptCredentialFileError';
  }
}

function parseLine(text: string): Line | null {
  try {
    const value: unknown = JSON.parse(text);
    if (typeof value !== 'object' || value === null) return null;
    const { u, v, h } = value as Record<string, unknown>;
    if (typeof u !== 'string' || typeof v !== 'number' || typeof h !== 'string') return null;
    return { u, v, h };
  } catch {
    return null;
  }
}

const key = (userId: string, version: number): string => `${userId}\u0000${version}`;

export async function openFileCredentialStore(dataDir: string): Promise<CredentialStore> {
  await fs.mkdir(dataDir, { recursive: true, mode: 0o700 });
  const file = join(dataDir, CREDENTIALS_FILE);
  const hashes = new Map<string, string>();

  let created = false;
  let handle: fs.FileHandle;
  try {
    // The file itself, never what a link of that name points to: opening may truncate a torn tail.
    handle = await fs.open(file, constants.O_RDWR | (constants.O_NOFOLLOW ?? 0));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ELOOP') throw new Error(`${file} is a symbolic link: refusing to follow it; the credential store must be a file in the data directory.`);
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    handle = await fs.open(file, 'wx+', 0o600);
    created = true;
  }

  let size: number;
  try {
    const content = (await handle.readFile()).toString('utf8');
    size = Buffer.byteLength(content);
    const lines = content.split('\n');
    let offset = 0;
    let lastIntactEnd = 0;
    let needsNewline = false;
    for (let i = 0; i < lines.length; i++) {
      const text = lines[i] as string;
      const isLast = i === lines.length - 1;
      const end = offset + Buffer.byteLength(text) + (isLast ? 0 : 1);
      if (text.length > 0) {
        const line = parseLine(text);
        if (line === null) {
          if (lines.slice(i + 1).some((rest) => parseLine(rest) !== null)) throw new CorruptCredentialFileError(file, i + 1);
          break;
        }
        hashes.set(key(line.u, line.v), line.h);
        // A complete line whose newline was torn off is kept; the next write starts a new line.
        needsNewline = isLast;
      }
      lastIntactEnd = end;
      offset = end;
    }
    if (lastIntactEnd < size) {
      await handle.truncate(lastIntactEnd);
      await handle.datasync();
      size = lastIntactEnd;
    }
    if (needsNewline) {
      await handle.write('\n', size);
      await handle.datasync();
      size += 1;
    }
    if (created) {
      // The new file's directory entry must be durable too.
      const dir = await fs.open(dataDir, 'r');
      try {
        await dir.sync();
      } finally {
        await dir.close();
      }
    }
  } catch (error) {
    await handle.close();
    throw error;
  }

  const opened = handle;
  let end = size;
  let closed = false;
  // Appends run one after the other, each acknowledged after its sync.
  let tail: Promise<unknown> = Promise.resolve();

  return {
    put(userId, passwordVersion, hash) {
      try {
        assertCredentialKey(userId, passwordVersion);
        assertHash(hash);
      } catch (error) {
        return Promise.reject(error);
      }
      if (closed) return Promise.reject(new Error('credential store is closed'));
      const bytes = Buffer.from(`${JSON.stringify({ u: userId, v: passwordVersion, h: hash })}\n`, 'utf8');
      const write = tail.then(async () => {
        try {
          let written = 0;
          while (written < bytes.length) {
            const { bytesWritten } = await opened.write(bytes, written, bytes.length - written, end + written);
            written += bytesWritten;
          }
          await opened.datasync();
        } catch (error) {
          // Leave no partial line behind for the next append to follow.
          await opened.truncate(end).catch(() => undefined);
          throw error;
        }
        end += bytes.length;
        hashes.set(key(userId, passwordVersion), hash);
      });
      tail = write.catch(() => undefined);
      return write;
    },
    async get(userId, passwordVersion) {
      assertCredentialKey(userId, passwordVersion);
      return hashes.get(key(userId, passwordVersion)) ?? null;
    },
    async ping() {
      if (closed) throw new Error('credential store is closed');
    },
    async close() {
      if (closed) return;
      closed = true;
      await tail;
      await opened.close();
    },
  };
}
