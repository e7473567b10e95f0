/**
 * The last group commits, as written (oldest first), by global position: subscribers that
 * keep up (the projector, the expiry feed) and reads of what was just appended decode
 * from memory, in the same turn of the event loop as the commit, instead of a file read
 * through the thread pool. That turn is what a write's read-your-writes wait would
 * otherwise cost. Only bytes of segments that were never compacted are served (where a
 * record's bytes sit at its position); compaction forgets what it rewrites.
 *
 * A record of these commits is decoded (checksum and header) once, by the first reader that
 * asks for it, and that decoded record is handed to every later reader: each subscription
 * (the projector, the revocation feed, the live feed, presence expiry, ...) would otherwise
 * check and decode every committed record again. A decoded record is a view of bytes that
 * never change, so sharing it is safe.
 */
import { ownBytes } from './own-bytes';
import { decodeRecord, type RawRecord } from './record-format';

const RECENT_COMMITS_BYTES = 4 * 1024 * 1024;

interface Commit {
  readonly start: number;
  readonly bytes: Buffer;
}

export class RecentCommits {
  private commits: Commit[] = [];
  private bytes = 0;
  /** Records of these commits decoded so far, by the global position where their bytes start (in that order). */
  private decoded = new Map<number, RawRecord>();
  private newestDecoded = -1;

  remember(start: number, written: Buffer): void {
    const bytes = ownBytes(written);
    this.commits.push({ start, bytes });
    this.bytes += bytes.length;
    while (this.bytes > RECENT_COMMITS_BYTES && this.commits.length > 1) {
      this.bytes -= (this.commits.shift() as Commit).bytes.length;
    }
    const oldest = (this.commits[0] as Commit).start;
    for (const at of this.decoded.keys()) {
      if (at >= oldest) break;
      this.decoded.delete(at);
    }
  }

  forget(): void {
    this.commits = [];
    this.bytes = 0;
    this.decoded.clear();
    this.newestDecoded = -1;
  }

  /** Forgets commits that start in [from, to). */
  forgetRange(from: number, to: number): void {
    const forgotten = this.commits.filter((commit) => commit.start >= from && commit.start < to);
    this.commits = this.commits.filter((commit) => commit.start < from || commit.start >= to);
    this.bytes = this.commits.reduce((sum, commit) => sum + commit.bytes.length, 0);
    for (const commit of forgotten) {
      for (const at of [...this.decoded.keys()]) if (at >= commit.start && at < commit.start + commit.bytes.length) this.decoded.delete(at);
    }
  }

  /**
   * The record whose bytes start at global position `start` (file offset `start - segmentBase`
   * of a segment never compacted), decoded once and shared; undefined when its bytes are not
   * all here or do not decode (the caller then reads as before and reports what it finds).
   */
  record(segmentBase: number, start: number, durableEnd: number): RawRecord | undefined {
    const known = this.decoded.get(start);
    if (known !== undefined) return start + known.size <= durableEnd ? known : undefined;
    const commit = this.commitHolding(start);
    if (commit === undefined) return undefined;
    const result = decodeRecord(commit.bytes, start - commit.start, start - segmentBase, segmentBase);
    if (result.kind !== 'ok' || start + result.record.size > durableEnd) return undefined;
    // Kept in position order (what `remember` prunes by): a record older than the newest kept is not kept.
    if (start > this.newestDecoded) {
      this.decoded.set(start, result.record);
      this.newestDecoded = start;
    }
    return result.record;
  }

  /** The commit whose bytes hold position `start`. */
  private commitHolding(start: number): Commit | undefined {
    const commits = this.commits;
    for (let i = commits.length - 1; i >= 0; i--) {
      const commit = commits[i] as Commit;
      if (commit.start <= start) return start < commit.start + commit.bytes.length ? commit : undefined;
    }
    return undefined;
  }

  /** `length` bytes at global position `start`, or null when they are not all here. */
  read(start: number, length: number, durableEnd: number): Promise<Buffer> | null {
    const commits = this.commits;
    const first = commits[0];
    if (first === undefined || start < first.start || start + length > durableEnd) return null;
    let i = commits.length - 1;
    while (i > 0 && (commits[i] as Commit).start > start) i--;
    const parts: Buffer[] = [];
    let at = start;
    for (; i < commits.length && at < start + length; i++) {
      const commit = commits[i] as Commit;
      const commitEnd = commit.start + commit.bytes.length;
      if (at < commit.start || at >= commitEnd) return null;
      const take = Math.min(commitEnd, start + length) - at;
      parts.push(commit.bytes.subarray(at - commit.start, at - commit.start + take));
      at += take;
    }
    if (at < start + length) return null;
    // Committed bytes never change: handing out views of them is safe.
    return Promise.resolve(parts.length === 1 ? (parts[0] as Buffer) : Buffer.concat(parts));
  }
}
