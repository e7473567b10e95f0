import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rename, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EventStoreLockedError, LOCK_FILE_NAME, openEmbeddedEventStore } from '../../src/infra/eventstore/embedded';
import { acquireLock } from '../../src/infra/eventstore/embedded/lock';
import { newEvent } from '../contract/eventstore.contract';

/**
 * One process per DATA_DIR, also when `events.lock` is removed or replaced while held (a
 * cleanup of `*.lock`, a tmp cleaner, an operator): the lock lives on the file, starters find it
 * by its name, so the holder must keep the name leading to a file it has locked. Otherwise the
 * next starter creates a new `events.lock`, locks it, and runs beside the holder.
 */

const directories: string[] = [];

async function dataDirectory(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'hhc-lock-name-'));
  directories.push(dir);
  return dir;
}

/** Waits for a condition the holder's periodic check brings about (bounded, so that a failure shows). */
async function eventually(condition: () => boolean | Promise<boolean>, what: string): Promise<void> {
  for (let waited = 0; waited < 15_000; waited += 50) {
    if (await condition()) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`never happened: ${what}`);
}

afterAll(async () => {
  for (const dir of directories) await rm(dir, { recursive: true, force: true });
});

const event = newEvent('DeviceUpdated');

test('events.lock removed while held: the holder locks it again, and the next start is refused', async () => {
  const dir = await dataDirectory();
  const holder = await openEmbeddedEventStore(dir);
  try {
    await rm(join(dir, LOCK_FILE_NAME));
    await eventually(() => existsSync(join(dir, LOCK_FILE_NAME)), 'events.lock created again by its holder');
    expect((await stat(join(dir, LOCK_FILE_NAME))).mode & 0o777).toBe(0o600);
    await expect(openEmbeddedEventStore(dir)).rejects.toBeInstanceOf(EventStoreLockedError);
    // The holder still writes.
    await expect(holder.append('device-1', [event], 'any')).resolves.toBeDefined();
  } finally {
    await holder.close();
  }
  // Once closed, the directory opens again.
  const next = await openEmbeddedEventStore(dir);
  await next.close();
});

test('events.lock replaced by another file while held: the holder locks the new one, and the next start is refused', async () => {
  const dir = await dataDirectory();
  const holder = await openEmbeddedEventStore(dir);
  try {
    const before = (await stat(join(dir, LOCK_FILE_NAME))).ino;
    await writeFile(join(dir, 'replacement'), '');
    await rename(join(dir, 'replacement'), join(dir, LOCK_FILE_NAME));
    expect((await stat(join(dir, LOCK_FILE_NAME))).ino).not.toBe(before);
    await eventually(async () => (await readFile(join(dir, LOCK_FILE_NAME), 'utf8')).includes(`"pid":${process.pid}`), 'the new events.lock locked by its holder');
    await expect(openEmbeddedEventStore(dir)).rejects.toBeInstanceOf(EventStoreLockedError);
  } finally {
    await holder.close();
  }
});

test('a holder whose events.lock another process locked after a removal stops writing and says so', async () => {
  const dir = await dataDirectory();
  const messages: string[] = [];
  const holder = await openEmbeddedEventStore(dir, { log: (message) => messages.push(message) });
  let intruder: (() => Promise<void>) | null = null;
  try {
    await rm(join(dir, LOCK_FILE_NAME));
    // A starter that gets in before the holder's next check.
    intruder = await acquireLock(dir, () => undefined, 3_600_000);
    await eventually(() => messages.some((message) => message.includes('another process')), 'the holder told that it lost the lock');
    await expect(holder.append('device-1', [event], 'any')).rejects.toThrow(/events\.lock was removed or replaced/);
  } finally {
    await holder.close();
    await intruder?.();
  }
});

test('a symbolic link planted as events.lock is refused, and the file it points to is left as it was', async () => {
  const dir = await dataDirectory();
  const victim = join(await dataDirectory(), 'precious');
  await writeFile(victim, 'precious content\n');
  await symlink(victim, join(dir, LOCK_FILE_NAME));
  await expect(openEmbeddedEventStore(dir)).rejects.toThrow(/symbolic link/);
  expect(await readFile(victim, 'utf8')).toBe('precious content\n');
});
