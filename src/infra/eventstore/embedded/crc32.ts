import * as zlib from 'node:zlib';

/** CRC-32 (IEEE), the checksum of every record, segment index and header of the log. */

const CRC32_TABLE = buildCrc32Table();

function buildCrc32Table(): Int32Array {
  const table = new Int32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let bit = 0; bit < 8; bit++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c;
  }
  return table;
}

/** CRC-32 (IEEE) for Node versions whose zlib lacks crc32 (before 20.15). */
export function crc32Portable(bytes: Uint8Array): number {
  let c = -1;
  for (let i = 0; i < bytes.length; i++) c = (CRC32_TABLE[(c ^ (bytes[i] ?? 0)) & 0xff] ?? 0) ^ (c >>> 8);
  return (c ^ -1) >>> 0;
}

export const crc32: (bytes: Uint8Array) => number =
  typeof zlib.crc32 === 'function' ? (bytes) => zlib.crc32(bytes) : crc32Portable;
