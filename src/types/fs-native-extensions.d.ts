/** The part of `fs-native-extensions` (native, prebuilt binaries in the package) that the embedded log's lock uses. */
declare module 'fs-native-extensions' {
  /**
   * Takes an exclusive (or shared) lock on the whole file open on `fd`, without waiting: false
   * when another open file description holds a conflicting one. Linux: an open file description
   * lock (`fcntl(F_OFD_SETLK)`); macOS: `flock`; Windows: `LockFileEx`. Released when the
   * descriptor is closed, including by the kernel when the process dies.
   */
  export function tryLock(fd: number, options?: { readonly shared?: boolean }): boolean;
  export function unlock(fd: number): void;
}
