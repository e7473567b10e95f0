import { availableParallelism } from 'node:os';
import { randomBytes } from 'node:crypto';
import { Algorithm, hash as argon2Hash, verify as argon2Verify } from '@node-rs/argon2';

/**
 * Password hashing (decisions §3): argon2id at OWASP's minimum, m = 19 MiB, t = 2, p = 1.
 * One hash costs tens of milliseconds of a core and 19 MiB of memory, so at most
 * `concurrency` run at once and the rest wait their turn (`stats().waiting` is the gauge);
 * only login, password reset and a password change call this.
 *
 * A login for an address nobody has verifies against a dummy hash built once with the same
 * parameters, so it costs what a wrong password costs.
 *
 * The binding is `@node-rs/argon2` (Rust), about twice as fast as `argon2` (node-argon2) at
 * these parameters on the same machine (bench/README.md, `npm run bench:login`). Both write
 * and read standard PHC strings (`$argon2id$v=19$m=…,t=…,p=…$salt$hash`), so hashes stored
 * by either verify with the other; a hash's own parameters are read from its string.
 */
export const PASSWORD_MIN_LENGTH = 8;
export const PASSWORD_MAX_LENGTH = 128;

export const ARGON2_OPTIONS = {
  algorithm: Algorithm.Argon2id,
  memoryCost: 19_456,
  timeCost: 2,
  parallelism: 1,
} as const;

export interface PasswordHasherStats {
  /** Hashes or verifications running now. */
  readonly running: number;
  /** Calls waiting for a slot. */
  readonly waiting: number;
}

export interface PasswordHasher {
  hash(password: string): Promise<string>;
  /** True when `password` matches `hash`; a malformed hash counts as no match. */
  verify(hash: string, password: string): Promise<boolean>;
  /** Spends the time of a verification and answers false: for unknown users. */
  verifyNothing(password: string): Promise<false>;
  stats(): PasswordHasherStats;
}

/** A counting semaphore: `run` waits for one of `slots`, first come first served. */
export function createSemaphore(slots: number): {
  run<T>(task: () => Promise<T>): Promise<T>;
  stats(): PasswordHasherStats;
} {
  if (!Number.isSafeInteger(slots) || slots < 1) throw new RangeError('a semaphore needs at least one slot');
  let running = 0;
  const queue: Array<() => void> = [];
  const release = (): void => {
    const next = queue.shift();
    if (next === undefined) running--;
    else next();
  };
  return {
    async run(task) {
      if (running < slots) running++;
      else await new Promise<void>((resolve) => queue.push(resolve));
      try {
        return await task();
      } finally {
        release();
      }
    },
    stats: () => ({ running, waiting: queue.length }),
  };
}

/** How many hashes run at once unless told otherwise: one per core. */
export function defaultHashConcurrency(): number {
  return Math.max(1, availableParallelism());
}

export function createPasswordHasher(options: { readonly concurrency?: number } = {}): PasswordHasher {
  const semaphore = createSemaphore(options.concurrency ?? defaultHashConcurrency());
  const hash = (password: string): Promise<string> => semaphore.run(() => argon2Hash(password, ARGON2_OPTIONS));
  const verify = (digest: string, password: string): Promise<boolean> =>
    semaphore.run(async () => {
      try {
        return await argon2Verify(digest, password);
      } catch {
        return false;
      }
    });

  // Built once, in the background from the start, from a password nobody knows.
  let dummy: Promise<string> | null = null;
  const dummyHash = (): Promise<string> => (dummy ??= hash(randomBytes(32).toString('base64url')));
  dummyHash().catch(() => {
    dummy = null;
  });

  return {
    hash,
    verify,
    async verifyNothing(password) {
      await verify(await dummyHash(), password);
      return false;
    },
    stats: semaphore.stats,
  };
}
