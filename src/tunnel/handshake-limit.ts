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
 * limit too. Separate from any pacing of handshakes a process applies for its own sake, which
 * asks `check` first: an IP already past its limit is refused by it, and takes no place of
 * the pace other hubs are admitted at.
 */
export interface HandshakeLimiter {
  /** Whether `ip` is past its limit now, counting nothing (refused: what `admit` would answer). */
  check(ip: string): Promise<LimitDecision>;
  /** Counts a handshake from `ip`; refused when the IP is past its limit. */
  admit(ip: string): Promise<LimitDecision>;
  /** The handshake from `ip` succeeded (or failed for the service's own reasons): it does not count. */
  release(ip: string): void;
}

const TIER: Tier = 'general';

const ALLOWED: LimitDecision = Object.freeze({ allowed: true, retryAfter: 0 });

export const unlimitedHandshakes: HandshakeLimiter = {
  check: () => Promise.resolve(ALLOWED),
  admit: () => Promise.resolve(ALLOWED),
  release: () => undefined,
};

/** Handshakes in the service's general tier, keyed like unauthenticated HTTP requests (`ip:<address>`). */
export function handshakeLimiterFrom(limiter: RateLimiter, onRejected?: (tier: Tier) => void): HandshakeLimiter {
  return {
    async check(ip) {
      const decision = await limiter.peek(TIER, `ip:${ip}`);
      if (!decision.allowed) onRejected?.(TIER);
      return { allowed: decision.allowed, retryAfter: decision.retryAfter };
    },
    async admit(ip) {
      const decision = await limiter.consume(TIER, `ip:${ip}`);
      if (!decision.allowed) onRejected?.(TIER);
      return { allowed: decision.allowed, retryAfter: decision.retryAfter };
    },
    release(ip) {
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
