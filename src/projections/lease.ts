import { randomUUID } from 'node:crypto';
import type Redis from 'ioredis';

/**
 * One active projector at a time (decisions §1): whoever holds the lease key in Redis
 * projects; the others stand by and try again. The holder renews well before expiry and
 * gives up the moment a renewal fails, so two holders never overlap for long — and even
 * then the guarded, idempotent writes keep the read models right.
 */
export interface Lease {
  readonly owner: string;
  /** Resolves once this process holds the lease. */
  acquire(signal?: AbortSignal): Promise<void>;
  /** Resolves when the lease is lost (renewal failed or it was taken). */
  readonly lost: () => Promise<void>;
  release(): Promise<void>;
  isHeld(): boolean;
}

const RENEW = `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end`;
const RELEASE = `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end`;

/** Waits `ms`, or less when `signal` aborts; leaves no listener behind either way. */
export function delay(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}

export function createRedisLease(redis: Redis, key: string, ttlMs: number): Lease {
  const owner = randomUUID();
  let held = false;
  let renewTimer: NodeJS.Timeout | undefined;
  let onLost: (() => void) | undefined;
  let lostPromise: Promise<void> = new Promise((resolve) => (onLost = resolve));

  const markLost = (): void => {
    if (!held) return;
    held = false;
    if (renewTimer !== undefined) clearInterval(renewTimer);
    renewTimer = undefined;
    onLost?.();
  };

  const startRenewing = (): void => {
    renewTimer = setInterval(() => {
      redis
        .eval(RENEW, 1, key, owner, String(ttlMs))
        .then((result) => {
          if (result !== 1) markLost();
        })
        .catch(() => markLost());
    }, Math.max(50, Math.floor(ttlMs / 3)));
    renewTimer.unref();
  };

  return {
    owner,
    isHeld: () => held,
    lost: () => lostPromise,
    async acquire(signal) {
      for (;;) {
        if (signal?.aborted) throw new Error('Lease acquisition aborted');
        try {
          const ok = await redis.set(key, owner, 'PX', ttlMs, 'NX');
          if (ok === 'OK') {
            held = true;
            lostPromise = new Promise((resolve) => (onLost = resolve));
            startRenewing();
            return;
          }
        } catch {
          // Redis unreachable: keep standing by.
        }
        await delay(Math.max(50, Math.floor(ttlMs / 3)), signal);
      }
    },
    async release() {
      const wasHeld = held;
      markLost();
      // Redis away: the command would wait for it to come back; the lease expires by itself.
      if (wasHeld && redis.status === 'ready') await redis.eval(RELEASE, 1, key, owner).catch(() => undefined);
    },
  };
}
