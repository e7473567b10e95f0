import type { TunnelNamespace } from './context';
import { handshakeError } from './connection';
import { RATE_LIMITED_HANDSHAKE } from './events';

/**
 * Handshake admission: the hubs of a fleet that lost the service at once (a crash, a deploy)
 * come back at a pace this process can serve without making people wait. Device handshakes
 * are admitted at `perSecond`, with a burst of one second's worth; the others are refused
 * before any token check with `connect_error` `rate_limited` and `data: {retryAfter}`
 * (decisions §5), each refused hub given its own later second, so the fleet returns spread
 * over the time it needs instead of all at the next second. App handshakes (a user access
 * token) are never held back by hubs: people first.
 */

export const RATE_LIMITED = RATE_LIMITED_HANDSHAKE;
export const ADMISSION_MESSAGE = 'Too many connections at once, retry later';

export interface AdmissionOptions {
  /** Device handshakes admitted per second by this process (0: no admission control). */
  readonly perSecond: number;
  /** The latest second a refused hub is sent to (default 60). */
  readonly maxRetryAfterSeconds?: number;
  readonly now?: () => number;
}

export interface Admission {
  /** Null when admitted; else the seconds to wait. */
  readonly decide: () => number | null;
  readonly stats: () => { readonly admitted: number; readonly refused: number };
}

export function createAdmission(options: AdmissionOptions): Admission {
  const now = options.now ?? (() => Date.now());
  const rate = options.perSecond;
  const maxWait = options.maxRetryAfterSeconds ?? 60;
  let tokens = rate;
  let refilledAt = now();
  // The appointment book: the moment the last refused hub was told to come back.
  let booked = 0;
  let admitted = 0;
  let refused = 0;
  return {
    decide: () => {
      if (rate <= 0) return null;
      const t = now();
      tokens = Math.min(rate, tokens + ((t - refilledAt) / 1000) * rate);
      refilledAt = t;
      if (tokens >= 1) {
        tokens -= 1;
        admitted++;
        return null;
      }
      refused++;
      booked = Math.min(Math.max(booked, t) + 1000 / rate, t + maxWait * 1000);
      return Math.max(1, Math.ceil((booked - t) / 1000));
    },
    stats: () => ({ admitted, refused }),
  };
}

/** Whether the handshake presents a user access token (read without verifying: only for ordering; the handshake verifies it). */
function presentsAccessToken(token: unknown): boolean {
  if (typeof token !== 'string' || token.length > 8192) return false;
  const payload = token.split('.')[1];
  if (payload === undefined) return false;
  try {
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as { type?: unknown };
    return claims.type === 'access';
  } catch {
    return false;
  }
}

/** Installs admission as the namespace's first handshake step. */
export function admitHandshakes(nsp: TunnelNamespace, admission: Admission): void {
  nsp.use((socket, next) => {
    const token: unknown = (socket.handshake.auth as Record<string, unknown> | undefined)?.token;
    if (presentsAccessToken(token)) {
      next();
      return;
    }
    const retryAfter = admission.decide();
    if (retryAfter === null) next();
    else next(Object.assign(handshakeError(RATE_LIMITED, ADMISSION_MESSAGE), { data: { message: ADMISSION_MESSAGE, retryAfter } }));
  });
}
