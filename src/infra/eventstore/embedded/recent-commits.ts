/**
 * The last group commits, as written (oldest first), by global position: subscribers that
 * keep up (the projector, the expiry feed) and reads of what was just appended decode
 * from memory, in the same turn of the event loop as the commit, instead of a file read
 * through the thread pool. That turn is what a write's read-your-writes wait would
 * otherwise cost. Only bytes of segments that were never compacted are served (where a
 * record's bytes sit at its position); compaction forgets what it rewrites.
 */
const RECENT_COMMITS_BYTES = 4 * 1024 * 1024;

interface Commit {
  readonly start: number;
  readonly bytes: Buffer;
}

export class RecentCommits {
  private commits: Commit[] = [];
  private bytes = 0;

  remember(start: number, bytes: Buffer): void {
    this.commits.push({ start, bytes });
    this.bytes += bytes.length;
    while (this.bytes > RECENT_COMMITS_BYTES && this.commits.length > 1) {
      this.bytes -= (this.commits.shift() as Commit).bytes.length;
    }
  }

  forget(): void {
    this.commits = [];
    this.bytes = 0;
  }

  /** Forgets commits that start in [from, to). */
  forgetRange(from: number, to: number): void {
    this.commits = this.commits.filter((commit) => commit.start < from || commit.start >= to);
    this.bytes = this.commits.reduce((sum, commit) => sum + commit.bytes.length, 0);
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
