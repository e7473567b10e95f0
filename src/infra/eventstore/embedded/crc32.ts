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
export function crc32Portable(bytes: Uint8Array, previous = 0): number {
  let c = ~previous;
  for (let i = 0; i < bytes.length; i++) c = (CRC32_TABLE[(c ^ (bytes[i] ?? 0)) & 0xff] ?? 0) ^ (c >>> 8);
  return (c ^ -1) >>> 0;
}

/** CRC-32 of `bytes`, or of what came before (`previous`, its CRC) followed by `bytes`. */
export const crc32: (bytes: Uint8Array, previous?: number) => number =
  typeof zlib.crc32 === 'function' ? (bytes, previous = 0) => zlib.crc32(bytes, previous) : crc32Portable;
