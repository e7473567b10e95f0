import { promises as fs } from 'node:fs';
import path from 'node:path';
import { comparePositions, parsePosition, type EventStore, type GlobalPosition } from '../infra/eventstore/port';
import type { MemoryStoreState } from '../infra/readstore/memory';
import { errnoCode, readSnapshotFile, temporaryFile, writeSnapshotFile, type SnapshotHeader } from '../infra/snapshot/file';
import type { Logger } from '../logger';
import { allProjections, READ_MODEL_VERSION } from '../projections';
import { CHECKPOINT_NAME } from '../projections/projector';

/**
 * Start snapshots (embedded mode): what a start would otherwise rebuild by replaying the
 * whole log, saved in DATA_DIR with the log position it covers, so that a start loads it and
 * applies only the events after that position.
 *
 * What a start rebuilds, and where each part comes from with a snapshot:
 * - the read models (users, sessions, devices, access revocations) and the projector's
 *   checkpoint: in the snapshot; the API's in-memory access revocations
 *   (src/auth/access-revocations.ts) start from their read model at that checkpoint, so they
 *   follow from the log alone, with a snapshot or without;
 * - the presence deadlines (src/presence/timer-scheduler.ts): not stored: the expiry role
 *   derives them from the devices read model at its checkpoint, exactly as after a replay;
 * - the tunnel's device folds (token generations, links) and the command side's state cache:
 *   not stored: they are read from the device streams on first use, never replayed at start
 *   (from the device's newest snapshot in the log, src/commands/snapshots.ts).
 *
 * The snapshot is a cache, never the source of truth: a missing, stale or damaged one only
 * costs a full replay, and `npm run replay -- rebuild` and the rebuild endpoint ignore it.
 */

export const SNAPSHOT_FILE_NAME = 'read-models.snapshot';

export interface SnapshotBody {
  readonly readModels: MemoryStoreState;
}

/** The embedded read models' side of it: what was restored, and how to take the current state. */
export interface StartSnapshot {
  readonly file: string;
  readonly restored: SnapshotBody | null;
  readonly exportReadModels: () => MemoryStoreState | null;
}

export function snapshotFile(dataDir: string): string {
  return path.join(dataDir, SNAPSHOT_FILE_NAME);
}

/**
 * What produced the read models: a snapshot of another version is stale. The build's version
 * is part of it, so an upgrade replays once even if a projection changed without
 * READ_MODEL_VERSION being bumped.
 */
export function snapshotVersion(appVersion: string): string {
  return `read-models ${READ_MODEL_VERSION} (${allProjections().map((p) => p.name).join(',')}); build ${appVersion}`;
}

function positionOf(body: SnapshotBody): string | null {
  return body.readModels.checkpoints[CHECKPOINT_NAME] ?? null;
}

/** The log position up to which the restored read models have applied every event. */
export function restoredPosition(body: SnapshotBody): GlobalPosition | null {
  const position = positionOf(body);
  return position === null ? null : parsePosition(position);
}

/** Whether every position the body holds is within the log (a snapshot ahead of its log belongs to another one). */
async function beyondLog(body: SnapshotBody, eventStore: EventStore): Promise<string | null> {
  let head: GlobalPosition | null;
  try {
    head = await eventStore.headPosition();
  } catch (error) {
    // An embedded log opened read-only (a full disk) cannot say: the whole log is replayed instead.
    return `the log's head could not be read to check it (${error instanceof Error ? error.message : String(error)})`;
  }
  for (const position of [positionOf(body)]) {
    if (position === null) continue;
    if (head === null || comparePositions(parsePosition(position), head) > 0) {
      return `it covers the log up to ${position}, but the log ends at ${head === null ? 'its start' : `${head.commit}/${head.prepare}`}`;
    }
  }
  return null;
}

function isBody(value: unknown): value is SnapshotBody {
  if (typeof value !== 'object' || value === null) return false;
  const { readModels } = value as { readModels?: unknown };
  if (typeof readModels !== 'object' || readModels === null) return false;
  const { checkpoints, collections } = readModels as { checkpoints?: unknown; collections?: unknown };
  return typeof checkpoints === 'object' && checkpoints !== null && typeof collections === 'object' && collections !== null;
}

/**
 * The snapshot a start can use, or null (then the start replays the whole log): says which
 * in one log line either way. A `.tmp` left by a crash during a write is removed.
 */
export async function loadStartSnapshot(file: string, version: string, eventStore: EventStore, logger: Logger): Promise<SnapshotBody | null> {
  await removeLeftover(file, logger);
  const started = Date.now();
  const read = await readSnapshotFile(file);
  if (read.kind === 'missing') {
    logger.info({ file }, 'start snapshot: none; replaying the whole log');
    return null;
  }
  const unusable = (reason: string, detail: string): null => {
    logger.warn({ file, reason, detail }, `start snapshot: ${reason}; replaying the whole log`);
    return null;
  };
  if (read.kind === 'unusable') return unusable(read.reason, read.detail);
  if (read.header.version !== version) return unusable('stale', `written by ${read.header.version}, this is ${version}`);
  if (!isBody(read.body) || positionOf(read.body) !== read.header.position) return unusable('damaged', 'the body does not match its header');
  const beyond = await beyondLog(read.body, eventStore);
  if (beyond !== null) return unusable('stale', beyond);
  const documents = Object.values(read.body.readModels.collections).reduce((sum, docs) => sum + docs.length, 0);
  logger.info(
    { file, position: read.header.position, writtenAt: read.header.writtenAt, documents, bytes: read.bytes, ms: Date.now() - started },
    'start snapshot: loaded; applying the events after it',
  );
  return read.body;
}

async function removeLeftover(file: string, logger: Logger): Promise<void> {
  try {
    await fs.unlink(temporaryFile(file));
    logger.info({ file: temporaryFile(file) }, 'start snapshot: removed a snapshot write interrupted by a crash');
  } catch (error) {
    if (errnoCode(error) !== 'ENOENT') throw error;
  }
}

export async function writeStartSnapshot(file: string, version: string, body: SnapshotBody): Promise<number> {
  const header: SnapshotHeader = { version, position: positionOf(body), writtenAt: new Date().toISOString() };
  return writeSnapshotFile(file, header, body);
}
