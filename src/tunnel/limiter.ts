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
