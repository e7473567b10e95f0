import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readSnapshotFile, temporaryFile, writeSnapshotFile, type SnapshotHeader, type SnapshotSink } from '../../src/infra/snapshot/file';

/**
 * A snapshot write that stops short never replaces the good snapshot: on a disk that fills up
 * during the write, libuv ends a write with a partial byte count and no error (the next one
 * fails with ENOSPC); every count is checked, and only a temporary file written whole and
 * fsynced is renamed over the snapshot.
 */

const oldHeader: SnapshotHeader = { version: 'v1', position: '100/100', writtenAt: '2026-11-25T00:00:00.000Z' };
const newHeader: SnapshotHeader = { version: 'v1', position: '200/200', writtenAt: '2026-11-25T01:00:00.000Z' };
const oldBody = { readModels: { checkpoints: { projector: '100/100' }, collections: { devices: [{ doc: { id: 'd1' }, guard: 'g1' }] } }, revocations: null };
const newBody = {
  readModels: { checkpoints: { projector: '200/200' }, collections: { devices: Array.from({ length: 50 }, (_, i) => ({ doc: { id: `d${i}`, name: 'x'.repeat(40) }, guard: `g${i}` })) } },
  revocations: null,
};

let dir: string;
let file: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'hhc-snapshort-'));
  file = join(dir, 'read-models.snapshot');
});
afterEach(() => {
  jest.restoreAllMocks();
  rmSync(dir, { recursive: true, force: true });
});

function enospc(): NodeJS.ErrnoException {
  return Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC', errno: -28, syscall: 'write' });
}

/**
 * Every FileHandle of this process writes to a disk with `room` bytes left: a write that does
 * not fit writes what fits and returns that count without an error; once full, writes fail
 * with ENOSPC (what libuv does on a real full disk).
 */
async function diskWithRoomFor(room: number): Promise<void> {
  const probe = await open(join(dir, 'probe'), 'w');
  const prototype = Object.getPrototypeOf(probe) as FileHandle;
  await probe.close();
  rmSync(join(dir, 'probe'));
  const originalWrite = prototype.write as (this: FileHandle, buffer: Uint8Array, offset: number, length: number, position: number | null) => Promise<{ bytesWritten: number }>;
  let left = room;
  const writeSome = async (handle: FileHandle, bytes: Uint8Array, position: number | null): Promise<number> => {
    if (left === 0) throw enospc();
    const n = Math.min(left, bytes.length);
    left -= n;
    const { bytesWritten } = await originalWrite.call(handle, bytes, 0, n, position);
    return bytesWritten;
  };
  jest.spyOn(prototype, 'writev').mockImplementation(async function (this: FileHandle, buffers: readonly NodeJS.ArrayBufferView[], position?: number | null) {
    const whole = Buffer.concat(buffers.map((b) => Buffer.from(b.buffer, b.byteOffset, b.byteLength)));
    const bytesWritten = await writeSome(this, whole, position ?? null);
    return { bytesWritten, buffers: buffers as NodeJS.ArrayBufferView[] };
  });
  jest.spyOn(prototype, 'write').mockImplementation(async function (this: FileHandle, ...args: unknown[]) {
    const [buffer, offset, length, position] = args as [Uint8Array, number | undefined, number | undefined, number | null | undefined];
    const from = offset ?? 0;
    const bytes = buffer.subarray(from, from + (length ?? buffer.length - from));
    const bytesWritten = await writeSome(this, bytes, position ?? null);
    return { bytesWritten, buffer };
  } as FileHandle['write']);
}

test('a disk that fills up during the write: the write fails, the good snapshot stays, no temporary file is left', async () => {
  await writeSnapshotFile(file, oldHeader, oldBody);
  const good = readFileSync(file);

  await diskWithRoomFor(300);
  await expect(writeSnapshotFile(file, newHeader, newBody)).rejects.toThrow(/ENOSPC|stopped short/);
  jest.restoreAllMocks();

  expect(readFileSync(file).equals(good)).toBe(true);
  expect(await readSnapshotFile(file)).toMatchObject({ kind: 'ok', header: oldHeader, body: oldBody });
  expect(existsSync(temporaryFile(file))).toBe(false);
});

test('a write that returns 0 bytes without an error fails instead of looping or renaming', async () => {
  await writeSnapshotFile(file, oldHeader, oldBody);
  let calls = 0;
  const stuck = async (path: string): Promise<SnapshotSink> => {
    const handle = await open(path, 'w', 0o600);
    return {
      write: async () => {
        calls++;
        return { bytesWritten: 0 };
      },
      sync: () => handle.sync(),
      close: () => handle.close(),
    };
  };

  await expect(writeSnapshotFile(file, newHeader, newBody, stuck)).rejects.toThrow(/stopped short/);

  expect(calls).toBe(1);
  expect(await readSnapshotFile(file)).toMatchObject({ kind: 'ok', header: oldHeader });
  expect(existsSync(temporaryFile(file))).toBe(false);
});

test('partial writes are continued until every byte is written', async () => {
  let calls = 0;
  const dribbling = async (path: string): Promise<SnapshotSink> => {
    const handle = await open(path, 'w', 0o600);
    return {
      // At most 7 bytes per call, as a file system under pressure may do.
      write: async (buffer, offset, length, position) => {
        calls++;
        return handle.write(buffer, offset, Math.min(7, length), position);
      },
      sync: () => handle.sync(),
      close: () => handle.close(),
    };
  };

  const bytes = await writeSnapshotFile(file, newHeader, newBody, dribbling);

  expect(calls).toBeGreaterThanOrEqual(Math.ceil(bytes / 7));
  expect(readFileSync(file).length).toBe(bytes);
  expect(await readSnapshotFile(file)).toMatchObject({ kind: 'ok', header: newHeader, body: newBody });
});

test('an fsync that fails (EIO) does not replace the good snapshot', async () => {
  await writeSnapshotFile(file, oldHeader, oldBody);
  const failingSync = async (path: string): Promise<SnapshotSink> => {
    const handle = await open(path, 'w', 0o600);
    return {
      write: (buffer, offset, length, position) => handle.write(buffer, offset, length, position),
      sync: () => Promise.reject(Object.assign(new Error('EIO: i/o error, fsync'), { code: 'EIO' })),
      close: () => handle.close(),
    };
  };

  await expect(writeSnapshotFile(file, newHeader, newBody, failingSync)).rejects.toThrow(/EIO/);

  expect(await readSnapshotFile(file)).toMatchObject({ kind: 'ok', header: oldHeader });
  expect(existsSync(temporaryFile(file))).toBe(false);
});
