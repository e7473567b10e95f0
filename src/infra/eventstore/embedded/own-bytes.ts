/**
 * `bytes` in a buffer of their own, for a cache that keeps them. A small buffer is often a
 * view into a larger one: one of Node's shared 8 KB pool slabs (`Buffer.from`, `concat` and
 * `allocUnsafe` below 4 KB take their bytes from it) or a read's buffer. Kept as it is, a
 * view keeps all of its buffer: the two caches of the log, 4 MB each, held about 8 KB for
 * every record or commit of a few hundred bytes (bench/README.md).
 */
export function ownBytes(bytes: Buffer): Buffer {
  if (bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength) return bytes;
  // Never from the pool: a buffer with an ArrayBuffer of exactly this size.
  const own = Buffer.allocUnsafeSlow(bytes.length);
  bytes.copy(own);
  return own;
}
