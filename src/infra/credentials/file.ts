import { constants, promises as fs } from 'node:fs';
import { join } from 'node:path';
import { assertCredentialKey, assertHash, DATA_KEY_TOMBSTONE, isTombstone, tombstoneSubject, type CredentialStore, type StoredDataKey } from './port';

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

interface HashLine {
  readonly u: string;
  readonly v: number;
  readonly h: string;
}

/** A data key: subject, key id, wrapped key. */
interface KeyLine {
  readonly k: string;
  readonly i: string;
  readonly w: string;
}

type Line = HashLine | KeyLine;

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
    const { u, v, h, k, i, w } = value as Record<string, unknown>;
    if (typeof k === 'string' && typeof i === 'string' && typeof w === 'string') return { k, i, w };
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
  let hashes = new Map<string, string>();
  let dataKeys = new Map<string, StoredDataKey>();

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
        if ('k' in line) dataKeys.set(line.k, { id: line.i, wrapped: line.w });
        else hashes.set(key(line.u, line.v), line.h);
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

  let opened = handle;
  let end = size;
  let closed = false;
  // Appends run one after the other, each acknowledged after its sync.
  let tail: Promise<unknown> = Promise.resolve();

  const appendLine = (line: Line, onDurable: () => void): Promise<void> => {
    if (closed) return Promise.reject(new Error('credential store is closed'));
    const bytes = Buffer.from(`${JSON.stringify(line)}\n`, 'utf8');
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
      onDurable();
    });
    tail = write.catch(() => undefined);
    return write;
  };

  /**
   * Writes what is to be kept to a new file and renames it over the old one: the removed lines
   * are in no file. `renamed` is called once the new file is the store's (whatever fails after
   * that): what is kept in memory changes then, never before, so a rewrite that fails leaves the
   * service answering what the data directory holds.
   */
  const rewrite = async (keptHashes: ReadonlyMap<string, string>, keptKeys: ReadonlyMap<string, StoredDataKey>, renamed: () => void): Promise<void> => {
    const lines: string[] = [];
    for (const [k, h] of keptHashes) {
      const [u, v] = k.split('\u0000') as [string, string];
      lines.push(JSON.stringify({ u, v: Number(v), h }));
    }
    for (const [subject, stored] of keptKeys) lines.push(JSON.stringify({ k: subject, i: stored.id, w: stored.wrapped }));
    const bytes = Buffer.from(lines.length > 0 ? `${lines.join('\n')}\n` : '', 'utf8');
    const temporary = `${file}.tmp`;
    const out = await fs.open(temporary, 'w', 0o600);
    try {
      await out.chmod(0o600);
      await out.writeFile(bytes);
      await out.sync();
    } finally {
      await out.close();
    }
    await fs.rename(temporary, file);
    renamed();
    const dir = await fs.open(dataDir, 'r');
    try {
      await dir.sync();
    } finally {
      await dir.close();
    }
    await opened.close();
    opened = await fs.open(file, 'r+');
    end = bytes.length;
  };

  /** The subject's key, its tombstone, or undefined. */
  const keptFor = (subject: string): StoredDataKey | undefined => dataKeys.get(subject) ?? (dataKeys.has(tombstoneSubject(subject)) ? DATA_KEY_TOMBSTONE : undefined);

  const forgetKeys = (subjects: readonly string[], tombstones: readonly string[], userId?: string): Promise<void> => {
    const work = tail.then(async () => {
      const keptHashes = new Map(hashes);
      if (userId !== undefined) {
        for (const k of [...keptHashes.keys()]) if (k.startsWith(`${userId}\u0000`)) keptHashes.delete(k);
      }
      const keptKeys = new Map(dataKeys);
      for (const subject of [...subjects, ...tombstones]) keptKeys.delete(subject);
      for (const subject of tombstones) keptKeys.set(tombstoneSubject(subject), DATA_KEY_TOMBSTONE);
      await rewrite(keptHashes, keptKeys, () => {
        hashes = keptHashes;
        dataKeys = keptKeys;
      });
    });
    tail = work.catch(() => undefined);
    return work;
  };

  return {
    getDataKey(subject) {
      return Promise.resolve(keptFor(subject) ?? null);
    },
    async putDataKey(subject, stored) {
      const known = keptFor(subject);
      if (known !== undefined) return known;
      // Appends and rewrites run in order: a second put for the subject queued behind this one
      // finds it kept; one queued behind its erasure finds the tombstone and stores nothing.
      let kept: StoredDataKey = stored;
      await appendLine({ k: subject, i: stored.id, w: stored.wrapped }, () => {
        const existing = keptFor(subject);
        if (existing !== undefined) kept = existing;
        else dataKeys.set(subject, stored);
      });
      if (kept !== stored && isTombstone(kept)) await forgetKeys([subject], []);
      return kept;
    },
    forget({ userId, dataKeySubjects, tombstones = [] }) {
      if (closed) return Promise.reject(new Error('credential store is closed'));
      return forgetKeys(dataKeySubjects, tombstones, userId);
    },
    put(userId, passwordVersion, hash) {
      try {
        assertCredentialKey(userId, passwordVersion);
        assertHash(hash);
      } catch (error) {
        return Promise.reject(error);
      }
      return appendLine({ u: userId, v: passwordVersion, h: hash }, () => hashes.set(key(userId, passwordVersion), hash));
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
