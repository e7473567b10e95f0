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
    readonly ownerPid: number,
  ) {
    super(
      `Event store in ${dataDir} is already open (process ${ownerPid}). ` +
        `If that process is gone, delete ${path.join(dataDir, LOCK_FILE_NAME)}.`,
    );
    this.name = 'EventStoreLockedError';
  }
}
