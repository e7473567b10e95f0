import type { StoreFile } from './io';

/** Small file helpers shared by the log, its segment indexes and compaction. */

export async function readFully(handle: StoreFile, offset: number, length: number): Promise<Buffer> {
  const buffer = Buffer.allocUnsafe(length);
  let filled = 0;
  while (filled < length) {
    const { bytesRead } = await handle.read(buffer, filled, length - filled, offset + filled);
    if (bytesRead === 0) break;
    filled += bytesRead;
  }
  return filled === length ? buffer : buffer.subarray(0, filled);
}

export async function writeFully(handle: StoreFile, bytes: Buffer, offset: number): Promise<void> {
  let written = 0;
  while (written < bytes.length) {
    const result = await handle.write(bytes, written, bytes.length - written, offset + written);
    written += result.bytesWritten;
  }
}

export function errorCode(error: unknown): string | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const withCode: { code?: unknown } = error;
  return typeof withCode.code === 'string' ? withCode.code : undefined;
}

export function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
