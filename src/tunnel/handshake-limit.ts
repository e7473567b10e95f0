import type { IncomingMessage } from 'node:http';
import type { RateLimiter, Tier } from '../ratelimit/limiter';
import { RATE_LIMITED_HANDSHAKE } from './events';
import type { LimitDecision } from './limiter';

/**
 * Failed tunnel handshakes count per client IP in the general tier, like failed HTTP
 * authentication (decisions §5, §6). A handshake takes its point before its token is
 * checked, so past the limit it is refused without any token check (`connect_error`
 * `rate_limited`, `data: {retryAfter}`); one that succeeds gives its point back, so only
 * failures count. Taking the point first keeps a burst of bad tokens sent at once within the
 * limit too.
 *
 * Separate from any pacing of handshakes a process applies for its own sake, which asks
 * `check` first so that an address past its limit takes no place of the pace other hubs are
 * admitted at. `check` asks no store: it answers from the refusals `admit` met in this process
 * (each until its `retryAfter`, or until a handshake of the address admitted earlier gives its
 * point back). An address that another process (or failed HTTP requests)
 * took past its limit is refused by `admit` at its first handshake here, and by `check` from
 * then on: it takes one place of this process's pace per window, or as many as it starts at
 * once before that first refusal is answered (at most the pace's burst). Asking the store
 * instead cost every device handshake one more Redis round trip in distributed mode.
 */
export interface HandshakeLimiter {
  /** Whether `ip` is known here to be past its limit now (refused by `admit` within its window); counts nothing, asks nothing. */
  check(ip: string): LimitDecision;
  /** Counts a handshake from `ip`; refused when the IP is past its limit. */
  admit(ip: string): Promise<LimitDecision>;
  /** The handshake from `ip` succeeded (or failed for the service's own reasons): it does not count. */
  release(ip: string): void;
  /** Forgets every address remembered as refused (an erasure: a session's address is personal data, decisions §11). */
  forgetAddresses?(): void;
}

const TIER: Tier = 'general';

const ALLOWED: LimitDecision = Object.freeze({ allowed: true, retryAfter: 0 });

/** Addresses remembered as past their limit, at most (the oldest forgotten first: they are then asked of the store again). */
export const REFUSED_ADDRESSES_KEPT = 10_000;
/**
 * The longest address remembered (an IPv6 address with a zone is under 64 characters). With
 * TRUST_PROXY trusting every hop, the address is what a client wrote in X-Forwarded-For, up to
 * the size of a header: such a one is not remembered, and each of its handshakes asks the store.
 */
export const REMEMBERED_ADDRESS_MAX_LENGTH = 64;

export const unlimitedHandshakes: HandshakeLimiter = {
  check: () => ALLOWED,
  admit: () => Promise.resolve(ALLOWED),
  release: () => undefined,
};

/**
 * Handshakes in the service's general tier, keyed like unauthenticated HTTP requests (`ip:<address>`).
 * Refusals are remembered on a monotonic clock (`now`, default `performance.now()`): on the
 * wall clock, one stepped back kept an address refused by `check` for the step's length beyond
 * its window (nothing asks the store again), and one stepped forward ended every refusal early.
 */
export function handshakeLimiterFrom(
  limiter: RateLimiter,
  onRejected?: (tier: Tier) => void,
  now: () => number = () => performance.now(),
): HandshakeLimiter & { readonly remembered: () => number } {
  /** Address → when its refusal ends (ms), in the order refused. */
  const refusedUntil = new Map<string, number>();
  // Refusals ended at the front go at each handshake: an address is not kept long past its
  // refusal (it is personal data), and the front is nearly always the first to end.
  const dropEnded = (): void => {
    const t = now();
    for (const [ip, until] of refusedUntil) {
      if (until > t) return;
      refusedUntil.delete(ip);
    }
  };
  return {
    forgetAddresses: () => refusedUntil.clear(),
    /** How many addresses are remembered as refused now. */
    remembered: () => refusedUntil.size,
    check(ip) {
      dropEnded();
      const until = refusedUntil.get(ip);
      if (until === undefined) return ALLOWED;
      const left = until - now();
      if (left <= 0) {
        refusedUntil.delete(ip);
        return ALLOWED;
      }
      onRejected?.(TIER);
      return { allowed: false, retryAfter: Math.ceil(left / 1000) };
    },
    async admit(ip) {
      dropEnded();
      const decision = await limiter.consume(TIER, `ip:${ip}`);
      refusedUntil.delete(ip);
      if (!decision.allowed) {
        onRejected?.(TIER);
        if (ip.length <= REMEMBERED_ADDRESS_MAX_LENGTH) refusedUntil.set(ip, now() + decision.retryAfter * 1000);
        if (refusedUntil.size > REFUSED_ADDRESSES_KEPT) refusedUntil.delete(refusedUntil.keys().next().value as string);
      }
      return { allowed: decision.allowed, retryAfter: decision.retryAfter };
    },
    release(ip) {
      // A handshake admitted before a refusal gave its point back: the store may have room for
      // the address again (it counts only failures), so its next handshake is the store's to decide.
      refusedUntil.delete(ip);
      void limiter.refund(TIER, `ip:${ip}`);
    },
  };
}

/** The client address of a handshake: its TCP peer unless the HTTP side's proxy trust says otherwise. */
export type ClientIp = (request: IncomingMessage) => string;

export const peerAddress: ClientIp = (request) => request.socket.remoteAddress ?? 'unknown';

/** The `connect_error` of a refused handshake: message `rate_limited`, `data: {retryAfter}` (seconds). */
export class RateLimitedHandshake extends Error {
  readonly data: { readonly retryAfter: number };

  constructor(retryAfter: number) {
    super(RATE_LIMITED_HANDSHAKE);
    this.name = 'RateLimitedHandshake';
    this.data = { retryAfter: Math.max(1, Math.ceil(retryAfter)) };
  }
}
