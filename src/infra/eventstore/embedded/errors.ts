import * as path from 'node:path';

export const LOCK_FILE_NAME = 'events.lock';

/** The log cannot be trusted: something other than a torn tail is damaged. */
export class CorruptEventLogError extends Error {
  constructor(
    readonly file: string,
    readonly offset: number,
    detail: string,
  ) {
    super(`Event log ${file} is corrupt at byte ${offset}: ${detail}. Refusing to open; restore it from a backup.`);
    this.name = 'CorruptEventLogError';
  }
}

export class EventStoreLockedError extends Error {
  constructor(
    readonly dataDir: string,
    /** Who holds it, as its lock file says (e.g. `process 12 on host a1b2, since …`), or `another process`. */
    readonly holder: string,
  ) {
    super(
      `Event store in ${dataDir} is already open by ${holder}: a data directory is used by one process at a time. ` +
        `Stop that process first (its lock, ${path.join(dataDir, LOCK_FILE_NAME)}, is released by the system when it exits; there is nothing to delete).`,
    );
    this.name = 'EventStoreLockedError';
  }
}

/**
 * Appends are refused for now: a write or its fsync failed (ENOSPC, EIO), or the store was
 * opened read-only (a full disk at start). Reads are still served, and appends resume by
 * themselves once a write succeeds again. Transient: the API answers 503.
 */
export class EventStoreUnavailableError extends Error {
  readonly statusCode = 503;
  readonly transient = true;

  constructor(options?: { cause?: unknown }) {
    super('Event store unavailable: writes failed; reads are served', options);
    this.name = 'EventStoreUnavailableError';
  }
}
