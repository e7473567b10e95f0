import { createHash } from 'node:crypto';
import { promises as fs } from 'node:fs';
import path from 'node:path';

/**
 * A checksummed snapshot file: one header line of JSON, then the body.
 *
 *   {"magic":"hhc-snapshot","format":1,"version":"…","position":"…","bodyBytes":N,"sha256":"…"}\n
 *   <body: N bytes of JSON>
 *
 * Written to `<file>.tmp`, fsynced, renamed over `<file>`, and the directory fsynced: a crash
 * at any point leaves either the previous snapshot or the new one, never half of one (a
 * `.tmp` left behind is ignored and overwritten by the next write). Reading checks the
 * declared length (a truncated file) and the SHA-256 of the body (a damaged one) before
 * anything of it is trusted. What the body holds is the caller's (src/runtime/snapshot.ts).
 */

const MAGIC = 'hhc-snapshot';
/** The layout of the file itself; a file of another format is stale. */
export const SNAPSHOT_FILE_FORMAT = 1;

export interface SnapshotHeader {
  /** What produced the body (projections and their version): a different one makes the file stale. */
  readonly version: string;
  /** The log position the body covers (formatted), or null for an empty log. */
  readonly position: string | null;
  /** When it was written (ISO 8601), for whoever reads the logs. */
  readonly writtenAt: string;
}

export type SnapshotRead =
  | { readonly kind: 'ok'; readonly header: SnapshotHeader; readonly body: unknown; readonly bytes: number }
  | { readonly kind: 'missing' }
  | { readonly kind: 'unusable'; readonly reason: 'truncated' | 'damaged' | 'stale'; readonly detail: string };

/** The `code` of a file-system error (checked by shape: errors may come from another realm). */
export function errnoCode(error: unknown): string | undefined {
  if (typeof error !== 'object' || error === null || !('code' in error)) return undefined;
  return typeof error.code === 'string' ? error.code : undefined;
}

export function temporaryFile(file: string): string {
  return `${file}.tmp`;
}

/** What a snapshot write needs of the file it writes (a FileHandle; tests pass one that fails). */
export interface SnapshotSink {
  write(buffer: Uint8Array, offset: number, length: number, position: number): Promise<{ bytesWritten: number }>;
  sync(): Promise<void>;
  close(): Promise<void>;
}

/** Creates (or empties) the temporary file, owner-only: it holds personal data (decisions §1). */
const openTemporary = (file: string): Promise<SnapshotSink> => fs.open(file, 'w', 0o600);

/**
 * Writes the snapshot atomically (see the top of this file); returns the bytes written. Every
 * byte count is checked: a write that stops short (a full disk can end one with a partial
 * count and no error) is continued, and one that makes no progress fails. On any failure the
 * temporary file is removed and the previous snapshot stays as it was.
 */
export async function writeSnapshotFile(file: string, header: SnapshotHeader, body: unknown, open: (file: string) => Promise<SnapshotSink> = openTemporary): Promise<number> {
  const bodyBytes = Buffer.from(JSON.stringify(body), 'utf8');
  const sha256 = createHash('sha256').update(bodyBytes).digest('hex');
  const headerLine = Buffer.from(
    `${JSON.stringify({ magic: MAGIC, format: SNAPSHOT_FILE_FORMAT, ...header, bodyBytes: bodyBytes.length, sha256 })}\n`,
    'utf8',
  );
  const temporary = temporaryFile(file);
  try {
    const handle = await open(temporary);
    try {
      await writeAll(handle, headerLine, 0);
      await writeAll(handle, bodyBytes, headerLine.length);
      await handle.sync();
    } finally {
      await handle.close();
    }
  } catch (error) {
    await fs.rm(temporary, { force: true }).catch(() => undefined);
    throw error;
  }
  await fs.rename(temporary, file);
  await syncDirectory(path.dirname(file));
  return headerLine.length + bodyBytes.length;
}

/** Writes every byte of `bytes` at `position`, continuing after partial writes; fails on one that writes nothing. */
async function writeAll(sink: SnapshotSink, bytes: Buffer, position: number): Promise<void> {
  let written = 0;
  while (written < bytes.length) {
    const { bytesWritten } = await sink.write(bytes, written, bytes.length - written, position + written);
    if (!Number.isSafeInteger(bytesWritten) || bytesWritten <= 0 || bytesWritten > bytes.length - written) {
      throw new Error(`snapshot write stopped short: ${written} of ${bytes.length} bytes at ${position} written, then ${bytesWritten} (is the disk full?)`);
    }
    written += bytesWritten;
  }
}

async function syncDirectory(directory: string): Promise<void> {
  const handle = await fs.open(directory, 'r');
  try {
    await handle.sync();
  } catch (error) {
    // Some file systems refuse fsync on a directory; the rename is then as durable as they make it.
    const code = errnoCode(error);
    if (code !== 'EINVAL' && code !== 'EPERM') throw error;
  } finally {
    await handle.close();
  }
}

interface RawHeader {
  readonly magic?: unknown;
  readonly format?: unknown;
  readonly version?: unknown;
  readonly position?: unknown;
  readonly writtenAt?: unknown;
  readonly bodyBytes?: unknown;
  readonly sha256?: unknown;
}

/** Reads and verifies a snapshot file; says why when it cannot be used. */
export async function readSnapshotFile(file: string): Promise<SnapshotRead> {
  let bytes: Buffer;
  try {
    bytes = await fs.readFile(file);
  } catch (error) {
    if (errnoCode(error) === 'ENOENT') return { kind: 'missing' };
    throw error;
  }
  const newline = bytes.indexOf(0x0a);
  if (newline < 0) return { kind: 'unusable', reason: 'truncated', detail: 'no complete header line' };
  let raw: RawHeader;
  try {
    raw = JSON.parse(bytes.subarray(0, newline).toString('utf8')) as RawHeader;
  } catch {
    return { kind: 'unusable', reason: 'damaged', detail: 'the header is not JSON' };
  }
  if (typeof raw !== 'object' || raw === null || raw.magic !== MAGIC) return { kind: 'unusable', reason: 'damaged', detail: 'not a snapshot file' };
  if (raw.format !== SNAPSHOT_FILE_FORMAT) {
    return { kind: 'unusable', reason: 'stale', detail: `file format ${String(raw.format)}, this build reads ${SNAPSHOT_FILE_FORMAT}` };
  }
  const header = checkHeader(raw);
  if (typeof header === 'string') return { kind: 'unusable', reason: 'damaged', detail: header };
  const body = bytes.subarray(newline + 1);
  const declared = raw.bodyBytes as number;
  if (body.length < declared) return { kind: 'unusable', reason: 'truncated', detail: `body of ${body.length} bytes, ${declared} declared` };
  if (body.length > declared) return { kind: 'unusable', reason: 'damaged', detail: `body of ${body.length} bytes, ${declared} declared` };
  if (createHash('sha256').update(body).digest('hex') !== raw.sha256) return { kind: 'unusable', reason: 'damaged', detail: 'checksum mismatch' };
  try {
    return { kind: 'ok', header, body: JSON.parse(body.toString('utf8')), bytes: bytes.length };
  } catch {
    return { kind: 'unusable', reason: 'damaged', detail: 'the body is not JSON' };
  }
}

/** The header's fields, or what is wrong with it. */
function checkHeader(raw: RawHeader): SnapshotHeader | string {
  if (typeof raw.version !== 'string' || typeof raw.writtenAt !== 'string') return 'the header lacks its version';
  if (raw.position !== null && typeof raw.position !== 'string') return 'the header lacks its position';
  if (typeof raw.bodyBytes !== 'number' || !Number.isSafeInteger(raw.bodyBytes) || raw.bodyBytes < 0) return 'the header lacks the body length';
  if (typeof raw.sha256 !== 'string') return 'the header lacks the checksum';
  return { version: raw.version, position: raw.position, writtenAt: raw.writtenAt };
}
