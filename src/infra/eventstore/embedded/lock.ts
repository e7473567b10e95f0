/**
 * The lock file that keeps two processes (or two opens in one process) off one data
 * directory, with takeover of locks left by processes that are gone.
 */
import { readFileSync } from 'node:fs';
import * as fs from 'node:fs/promises';
import * as path from 'node:path';
import { EventStoreLockedError, LOCK_FILE_NAME } from './errors';
import { errorCode } from './files';

/** Data directories this process holds open; tells our own stale lock from a live one. */
const openDataDirectories = new Set<string>();

export async function acquireLock(directory: string): Promise<() => Promise<void>> {
  const lockFile = path.join(directory, LOCK_FILE_NAME);
  if (openDataDirectories.has(directory)) throw new EventStoreLockedError(directory, process.pid);
  // Claimed before the first await, so two opens racing in this process cannot both win.
  openDataDirectories.add(directory);
  try {
    return await createLockFile(directory, lockFile);
  } catch (error) {
    openDataDirectories.delete(directory);
    throw error;
  }
}

async function createLockFile(directory: string, lockFile: string): Promise<() => Promise<void>> {
  for (let attempt = 0; ; attempt++) {
    try {
      const handle = await fs.open(lockFile, 'wx');
      try {
        await handle.writeFile(`${process.pid} ${processStartTime(process.pid) ?? ''}\n`);
      } finally {
        await handle.close();
      }
      return async () => {
        await fs.rm(lockFile, { force: true });
        openDataDirectories.delete(directory);
      };
    } catch (error) {
      if (errorCode(error) !== 'EEXIST') throw error;
    }
    const [pidText, startText] = (await fs.readFile(lockFile, 'utf8').catch(() => '')).trim().split(' ');
    const ownerPid = Number.parseInt(pidText ?? '', 10);
    // Another process took over the stale lock between our two attempts.
    if (attempt > 0) throw new EventStoreLockedError(directory, ownerPid);
    // A lock holding our own pid but not in our registry was left by an earlier process
    // that had the same pid (common in containers, where the service is often pid 1).
    if (Number.isInteger(ownerPid) && ownerPid !== process.pid && isLockOwnerAlive(ownerPid, startText)) {
      throw new EventStoreLockedError(directory, ownerPid);
    }
    await fs.rm(lockFile, { force: true });
  }
}

/**
 * Whether the process that wrote the lock still runs. A process killed with SIGKILL is a
 * zombie until its parent reaps it: it holds nothing any more, so it does not count (a
 * restart right after a crash must succeed at once). Where /proc tells the start time, a
 * pid reused by another process does not count either.
 */
function isLockOwnerAlive(pid: number, recordedStart: string | undefined): boolean {
  try {
    process.kill(pid, 0);
  } catch (error) {
    return errorCode(error) === 'EPERM';
  }
  const stat = procStat(pid);
  if (stat === null) return true;
  if (stat.state === 'Z' || stat.state === 'X' || stat.state === 'x') return false;
  return recordedStart === undefined || recordedStart === '' || recordedStart === stat.startTime;
}

/** State and start time (clock ticks since boot) of a process, from Linux's /proc; null elsewhere. */
function procStat(pid: number): { state: string; startTime: string } | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  // The command name (field 2) is in parentheses and may hold spaces: count from the last ')'.
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  const state = fields[0];
  const startTime = fields[19];
  return state === undefined || startTime === undefined ? null : { state, startTime };
}

function processStartTime(pid: number): string | null {
  return procStat(pid)?.startTime ?? null;
}
