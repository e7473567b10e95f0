import type Redis from 'ioredis';
import type { Logger } from '../logger';

/**
 * Which API processes are alive, for the tunnel in distributed mode (decisions §5: a dead
 * process's hubs read as gone within 30 s). Each process keeps a liveness key in Redis,
 * `<prefix>:alive:<owner>`, renewed every few seconds; the records of the devices it holds
 * name it (src/tunnel/cluster.ts). A process whose key has expired is dead to the others:
 * - on the relay path, one question per process (cached a few seconds), however many of its
 *   devices are asked about;
 * - a sweep asks, in one pipeline, after every process holding devices this one knows of, and
 *   tells `onDead` of each one found dead, so their subscribers learn at once.
 * The Redis cost per period grows with the number of processes, not of hubs.
 *
 * A process that finds its own key gone when it renews (it was cut off from Redis for longer
 * than the key lives, or Redis lost its data) was taken for dead by the others: `onRevived`.
 */

export const DEFAULT_LIVENESS = { ttlMs: 12_000, renewMs: 3_000, sweepMs: 2_000, cacheMs: 4_000 } as const;

export interface LivenessOptions {
  readonly prefix: string;
  /** This process's id, which its device records name. */
  readonly owner: string;
  readonly logger: Logger;
  /** How long a process's key outlives its last renewal: a process silent this long is dead to the others. */
  readonly ttlMs?: number;
  /** How often a process renews its key. */
  readonly renewMs?: number;
  /** How often the processes holding known devices are checked (one command per process). */
  readonly sweepMs?: number;
  /** How long a liveness answer is trusted on the relay path. */
  readonly cacheMs?: number;
  /** The other processes holding devices this one knows of: what the sweep asks after. */
  readonly owners: () => readonly string[];
  /** A process found dead, by an answer to a question asked at `askedAt`. */
  readonly onDead: (who: string, askedAt: number) => void;
  /** This process's key had expired (the others took it for dead), or Redis came back (it may have lost the key). */
  readonly onRevived: (why: 'reconnected' | 'revived') => void;
}

export interface Liveness {
  /** Prefix of the liveness keys: `<alivePrefix><owner>`. */
  readonly alivePrefix: string;
  /** True for this process; otherwise what is known and still trusted (undefined: ask). */
  known(who: string | null): boolean | undefined;
  /** Records an answer asked at `askedAt` (a dead process goes to `onDead`). */
  learn(who: string, alive: boolean, askedAt: number): void;
  /** Asks Redis whether the process is alive (one question in flight per process). */
  check(who: string): Promise<boolean>;
  /** Stops renewing and sweeping, and deletes this process's key (gone at once for the others). */
  close(): Promise<void>;
}

/** Renews this process's liveness key; answers whether it was still there (0: it expired, or Redis lost it). */
const ALIVE_SCRIPT = `
local existed = redis.call('EXISTS', KEYS[1])
redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
return existed
`;

/** Writes this process's key, then renews it and sweeps on timers until closed. */
export async function startLiveness(pub: Redis, options: LivenessOptions): Promise<Liveness> {
  const { owner, logger } = options;
  const ttlMs = options.ttlMs ?? DEFAULT_LIVENESS.ttlMs;
  const renewMs = options.renewMs ?? DEFAULT_LIVENESS.renewMs;
  const sweepMs = options.sweepMs ?? DEFAULT_LIVENESS.sweepMs;
  const cacheMs = options.cacheMs ?? DEFAULT_LIVENESS.cacheMs;
  const alivePrefix = `${options.prefix}:alive:`;
  const aliveKey = `${alivePrefix}${owner}`;
  const answers = new Map<string, { readonly alive: boolean; readonly until: number }>();
  const checks = new Map<string, Promise<boolean>>();

  const known = (who: string | null): boolean | undefined => {
    if (who === null) return undefined;
    if (who === owner) return true;
    const entry = answers.get(who);
    return entry !== undefined && entry.until > Date.now() ? entry.alive : undefined;
  };
  const learn = (who: string, alive: boolean, askedAt: number): void => {
    if (who === owner) return;
    answers.set(who, { alive, until: askedAt + cacheMs });
    if (!alive) options.onDead(who, askedAt);
  };
  const check = (who: string): Promise<boolean> => {
    const pending = checks.get(who);
    if (pending !== undefined) return pending;
    const askedAt = Date.now();
    const asked = pub
      .exists(`${alivePrefix}${who}`)
      .then((found) => {
        learn(who, found === 1, askedAt);
        return found === 1;
      })
      .finally(() => checks.delete(who));
    checks.set(who, asked);
    return asked;
  };

  // 'ready' again after the first time: Redis was away, and may have come back empty (this
  // process's key too: written again at once, before the others sweep).
  pub.on('ready', () => {
    pub.set(aliveKey, '1', 'PX', ttlMs).catch(() => undefined);
    options.onRevived('reconnected');
  });
  await pub.set(aliveKey, '1', 'PX', ttlMs);

  let renewing = false;
  const renew = setInterval(() => {
    if (renewing) return; // the previous renewal is still waiting (Redis away or cut off)
    renewing = true;
    pub
      .eval(ALIVE_SCRIPT, 1, aliveKey, String(ttlMs))
      .then((existed) => {
        // The key had expired: the others took this process for dead and told their subscribers so.
        if (existed !== 1) options.onRevived('revived');
      })
      .catch((error: unknown) => logger.warn({ err: error instanceof Error ? error.message : String(error) }, 'tunnel liveness renewal failed'))
      .finally(() => (renewing = false));
  }, renewMs);
  renew.unref();

  let sweeping = false;
  const sweep = setInterval(() => {
    const owners = options.owners().filter((who) => who !== owner);
    if (sweeping || owners.length === 0) return;
    sweeping = true;
    const askedAt = Date.now();
    const pipeline = pub.pipeline();
    for (const who of owners) pipeline.exists(`${alivePrefix}${who}`);
    pipeline
      .exec()
      .then((results) => {
        owners.forEach((who, i) => {
          const [error, found] = results?.[i] ?? [new Error('no answer'), 0];
          if (error === null) learn(who, found === 1, askedAt);
        });
      })
      .catch(() => undefined)
      .finally(() => (sweeping = false));
  }, sweepMs);
  sweep.unref();

  return {
    alivePrefix,
    known,
    learn,
    check,
    async close() {
      clearInterval(renew);
      clearInterval(sweep);
      if (pub.status === 'ready') await Promise.race([pub.del(aliveKey).catch(() => undefined), new Promise((resolve) => setTimeout(resolve, 1000).unref())]);
    },
  };
}
