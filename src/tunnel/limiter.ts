import type { RateLimiter, Tier } from '../ratelimit/limiter';
/**
 * The hook for the per-socket limits of `tunnel:message` and `tunnel:subscribe`
 * (interface: 50 messages per 10 s, 10 subscribes per 60 s; decisions §6: per socket
 * principal, counters shared through Redis in distributed mode). The tunnel asks before
 * it relays or subscribes; a refusal is answered with `tunnel:error {code: 'RATE_LIMITED',
 * retryAfter}` and nothing is relayed.
 */

export type TunnelLimitKind = 'message' | 'subscribe';

/** Who is counted: the user behind an app socket, or the device. */
export interface TunnelPrincipal {
  readonly type: 'user' | 'device';
  readonly id: string;
}

export interface LimitDecision {
  readonly allowed: boolean;
  /** Seconds until a refused call may succeed; ignored when allowed. */
  readonly retryAfter: number;
}

export interface TunnelLimiter {
  /** May answer synchronously (an in-memory window) or not (a Redis counter). */
  consume(kind: TunnelLimitKind, principal: TunnelPrincipal): LimitDecision | Promise<LimitDecision>;
}

const ALLOWED: LimitDecision = Object.freeze({ allowed: true, retryAfter: 0 });

/** Until the rate-limit issue lands: everything is allowed. */
export const unlimited: TunnelLimiter = { consume: () => ALLOWED };

/** The tunnel tiers of the service's rate limiter: counted per principal, in Redis when distributed. */
export function tunnelLimiterFrom(limiter: RateLimiter, onRejected?: (tier: Tier) => void): TunnelLimiter {
  return {
    async consume(kind, principal) {
      const tier: Tier = kind === 'message' ? 'tunnelMessage' : 'tunnelSubscribe';
      const decision = await limiter.consume(tier, `${principal.type}:${principal.id}`);
      if (!decision.allowed) onRejected?.(tier);
      return { allowed: decision.allowed, retryAfter: decision.retryAfter };
    },
  };
}
