/**
 * The lock that keeps a data directory to one process: `events.lock`, held with a kernel file
 * lock (a whole-file exclusive lock on an open file description: `fcntl(F_OFD_SETLK)` on Linux,
 * `flock` on macOS, `LockFileEx` on Windows, through `fs-native-extensions`, whose prebuilt
 * binaries ship in its npm package).
 *
 * - What decides is the kernel lock alone, taken in one atomic step: of any number of
 *   simultaneous starters exactly one gets it, whichever pid namespace (container) each runs
 *   in, as long as they see the same file on the same kernel (or a file system that passes
 *   locks on, as NFSv4 does).
 * - The kernel drops the lock when its holder's descriptor closes, and so when the holder dies
 *   in any way (kill -9, OOM): the next start takes it at once, with no stale lock to judge.
 *   A killed process not yet reaped by its parent (a zombie) has already closed its files.
 * - The file is never removed, so every starter locks the same inode (removing it while held
 *   would let a second starter lock a new file of the same name). Should something else remove
 *   or replace it, the holder locks the file the name leads to at its next check (keepName).
 * - Its content (pid, host name, start time of the holder) is only for the message a refused
 *   starter prints: a pid says nothing across pid namespaces and is never used to decide.
 *
 * Open file description locks belong to one `open()`, not to the process: a second open of
 * the same directory in the same process is refused as well, and closing another descriptor
 * of the file (as POSIX `fcntl` locks would) does not drop it. Child processes never inherit
 * the descriptor (Node opens files close-on-exec).
 */
import { constants } from 'node:fs';
import * as fs from 'node:fs/promises';
import { hostname } from 'node:os';
import * as path from 'node:path';
import { tryLock } from 'fs-native-extensions';
import { EventStoreLockedError, LOCK_FILE_NAME } from './errors';
import { errorCode } from './files';

/** Owner-only: files of the data directory hold personal data (decisions §1). */
export const DATA_FILE_MODE = 0o600;
export const DATA_DIRECTORY_MODE = 0o700;

/** How often the holder checks that `events.lock` still names the file it locked (see keepName). */
export const LOCK_RECHECK_MS = 1000;

/** Told to the holder when another process holds the lock on the file its name leads to now. */
export type LockLostHandler = (error: Error) => void;

/**
 * Takes the directory's lock or throws EventStoreLockedError; the function returned releases it.
 * While held, the name is checked every `recheckMs`: see keepName.
 */
export async function acquireLock(
  directory: string,
  onLost: LockLostHandler = (error) => console.error(error.message),
  recheckMs: number = LOCK_RECHECK_MS,
): Promise<() => Promise<void>> {
  const lockFile = path.join(directory, LOCK_FILE_NAME);
  const handle = await openLockFile(lockFile);
  let locked: boolean;
  try {
    locked = tryLock(handle.fd);
  } catch (error) {
    await handle.close();
    throw new Error(
      `Cannot lock ${lockFile} (${errorCode(error) ?? String(error)}): the data directory must be on a file system with file locks, ` +
        'so that only one process uses it.',
    );
  }
  if (!locked) {
    const holder = await describeHolder(handle);
    await handle.close();
    throw new EventStoreLockedError(directory, holder);
  }
  let held: HeldFile[];
  try {
    held = [{ handle, identity: identity(await handle.stat()) }];
    await tightenDataDirectory(directory);
    await recordHolder(handle);
  } catch (error) {
    await handle.close();
    throw error;
  }
  let released = false;
  let lost = false;
  let checking: Promise<void> = Promise.resolve();
  const timer = setInterval(() => {
    checking = checking.then(async () => {
      if (released || lost) return;
      const outcome = await keepName(lockFile, held).catch((error: unknown) => ({ kind: 'unknown' as const, error }));
      if (outcome.kind === 'retaken') {
        console.warn(`${lockFile} was removed or replaced while this process held it: locked it again (never delete it while the service runs).`);
      } else if (outcome.kind === 'lost') {
        lost = true;
        onLost(
          new Error(
            `${lockFile} was removed or replaced while this process held it, and another process (${outcome.holder}) has locked the new one: ` +
              'two processes may be using this data directory; this one stops writing to it.',
          ),
        );
      }
    });
  }, recheckMs);
  timer.unref();
  return async () => {
    if (released) return;
    released = true;
    clearInterval(timer);
    await checking;
    // Closing the descriptors drops the lock; the file stays (see the top of this file).
    for (const file of held) await file.handle.close();
  };
}

/**
 * Opens (or creates) the lock file itself, never what a symbolic link of that name points to:
 * the holder truncates and writes the file, and a link planted there (say, before the directory
 * was made owner-only) would have it overwrite any file the service's user may write.
 */
async function openLockFile(lockFile: string): Promise<fs.FileHandle> {
  try {
    return await fs.open(lockFile, constants.O_RDWR | constants.O_CREAT | (constants.O_NOFOLLOW ?? 0), DATA_FILE_MODE);
  } catch (error) {
    if (errorCode(error) === 'ELOOP') {
      throw new Error(`${lockFile} is a symbolic link: refusing to use it as the lock of the data directory; remove the link (the lock file is created again).`);
    }
    throw error;
  }
}

interface HeldFile {
  readonly handle: fs.FileHandle;
  readonly identity: string;
}

const identity = (stats: { dev: number; ino: number }): string => `${stats.dev}:${stats.ino}`;

/**
 * The lock lives on the file, the starters find it by its name: if `events.lock` is removed
 * (a cleanup of `*.lock`, a tmp cleaner, an operator) or replaced while held, the next starter
 * would create and lock a new file of the same name and run beside the holder. So the holder
 * checks the name now and then and, if it leads elsewhere, locks the file it leads to (creating
 * it if need be), keeping the old descriptor too. Only when another process already holds that
 * file is the lock lost: then the holder is told (and stops writing). A starter between the
 * removal and the next check can still get in; the check makes that window short, not absent.
 */
async function keepName(lockFile: string, held: HeldFile[]): Promise<{ kind: 'held' | 'retaken' } | { kind: 'lost'; holder: string }> {
  try {
    const current = identity(await fs.stat(lockFile));
    if (held.some((file) => file.identity === current)) return { kind: 'held' };
  } catch (error) {
    if (errorCode(error) !== 'ENOENT') throw error;
  }
  const handle = await openLockFile(lockFile);
  let locked: boolean;
  try {
    locked = tryLock(handle.fd);
  } catch (error) {
    await handle.close();
    throw error;
  }
  if (!locked) {
    const holder = await describeHolder(handle);
    await handle.close();
    return { kind: 'lost', holder };
  }
  await fs.chmod(lockFile, DATA_FILE_MODE).catch(() => undefined);
  held.push({ handle, identity: identity(await handle.stat()) });
  await recordHolder(handle);
  return { kind: 'retaken' };
}

/**
 * DATA_DIR is the owner's alone: the directory 0700, every file in it 0600, also those left
 * by earlier versions (0644 in a 0755 directory) or created under a lax umask. Done by the
 * holder of the lock, before anything is read.
 */
export async function tightenDataDirectory(directory: string): Promise<void> {
  const notOurs: string[] = [];
  const tighten = async (target: string, mode: number): Promise<void> => {
    try {
      await fs.chmod(target, mode);
    } catch (error) {
      const code = errorCode(error);
      // Owned by another user (e.g. a mounted directory): it cannot be ours to tighten; say so.
      if (code === 'EPERM') notOurs.push(target);
      else if (code !== 'ENOENT') throw error;
    }
  };
  await tighten(directory, DATA_DIRECTORY_MODE);
  for (const entry of await fs.readdir(directory, { withFileTypes: true })) {
    if (entry.isFile()) await tighten(path.join(directory, entry.name), DATA_FILE_MODE);
  }
  if (notOurs.length > 0) {
    console.warn(`Data directory ${directory}: could not make ${notOurs.join(', ')} owner-only (owned by another user); other local users may read them.`);
  }
}

/** Who holds the lock, for whoever is refused it. Writing it may fail (a full disk): the lock is held all the same. */
async function recordHolder(handle: fs.FileHandle): Promise<void> {
  const text = `${JSON.stringify({ pid: process.pid, host: hostname(), since: new Date().toISOString() })}\n`;
  try {
    await handle.truncate(0);
    await handle.write(text, 0, 'utf8');
  } catch {
    // Only the message of a refused starter is poorer for it.
  }
}

async function describeHolder(handle: fs.FileHandle): Promise<string> {
  let text = '';
  try {
    text = (await handle.readFile('utf8')).trim();
  } catch {
    // Unreadable (e.g. locked against reads on Windows): say what we can.
  }
  try {
    const { pid, host, since } = JSON.parse(text) as { pid?: unknown; host?: unknown; since?: unknown };
    if (typeof pid === 'number' && typeof host === 'string' && typeof since === 'string') {
      return `process ${pid} on host ${host}, since ${since}`;
    }
  } catch {
    // Still being written by the holder, or a file of an earlier version.
  }
  return 'another process';
}
