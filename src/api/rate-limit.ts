import type { Request, RequestHandler, Response } from 'express';
import type { ApiKeyMatcher } from '../auth/api-keys';
import { bearerToken, type Tokens } from '../auth/tokens';
import { flatJoin } from '../infra/flat-string';
import type { RateLimiter, Tier } from '../ratelimit/limiter';
import { tieredRouteOf } from '../ratelimit/routes';
import { errorBody } from './http-errors';

/**
 * Which tier a request counts against, and under which key (decisions §6): the
 * authentication endpoints per client IP, sync-customer per API key, register per user,
 * heartbeat per device (and token generation), everything else per user when authenticated, else per IP.
 * A request whose credentials do not check out counts per IP, so floods of bad tokens
 * are limited too. Runs before body parsing, so every response carries the headers.
 */
export interface Accounting {
  readonly tier: Tier;
  readonly key: string;
}

export interface RateLimitDeps {
  readonly limiter: RateLimiter;
  readonly tokens: Tokens;
  readonly matchApiKey: ApiKeyMatcher;
  /** Told of every refusal, for metrics. */
  readonly onRejected?: (tier: Tier) => void;
}

function token(req: Request): string | null {
  try {
    return bearerToken(req.get('Authorization'));
  } catch {
    return null;
  }
}

/** The caller's user id from a valid access token (kept for the route, so it is verified once). */
function accessUser(req: Request, res: Response, tokens: Tokens): string | null {
  const t = token(req);
  if (t === null) return null;
  try {
    const claims = tokens.verifyAccess(t);
    res.locals.caller = claims;
    return claims.sub;
  } catch {
    return null;
  }
}

export function accountingFor(req: Request, res: Response, deps: Pick<RateLimitDeps, 'tokens' | 'matchApiKey'>): Accounting {
  const ip = `ip:${req.ip ?? req.socket.remoteAddress ?? 'unknown'}`;
  // The route that will answer, matched as Express matches it (letter case, trailing slash).
  const route = tieredRouteOf(req.method, req.path);
  switch (route?.tier) {
    case 'ops':
    case 'login':
    case 'refresh':
    case 'auth':
      return { tier: route.tier, key: ip };
    case 'sync': {
      const keyId = deps.matchApiKey(req.get('X-Internal-Api-Key'));
      return keyId === null ? { tier: 'auth', key: ip } : { tier: 'sync', key: `key:${keyId}` };
    }
    case 'heartbeat': {
      // A hub's own request (heartbeat, renewal): its token is answered before its body (jsonBody, routes/devices.ts).
      res.locals.hubRequest = true;
      const t = token(req);
      if (t !== null) {
        try {
          const claims = deps.tokens.verifyDevice(t);
          res.locals.deviceClaims = claims;
          // Per token generation: a newer issue revokes the older tokens (decisions §4), so a
          // stolen one's flood of 401s never spends the budget of the hub's current token.
          // Flat: the first key of each window is kept with it, for every hub.
          return { tier: 'heartbeat', key: flatJoin('device:', claims.deviceUuid, ':', String(claims.gen)) };
        } catch {
          // an invalid device token counts per IP
        }
      }
      return { tier: 'general', key: ip };
    }
    default:
      break;
  }
  const userId = accessUser(req, res, deps.tokens);
  if (route?.tier === 'register' && userId !== null) return { tier: 'register', key: `user:${userId}` };
  if (route?.tier === 'export' && userId !== null) return { tier: 'export', key: `user:${userId}` };
  return { tier: 'general', key: userId !== null ? `user:${userId}` : ip };
}

export function rateLimit(deps: RateLimitDeps): RequestHandler {
  return async (req, res, next) => {
    const { tier, key } = accountingFor(req, res, deps);
    const decision = await deps.limiter.consume(tier, key);
    res.setHeader('X-RateLimit-Limit', String(decision.limit));
    res.setHeader('X-RateLimit-Remaining', String(decision.remaining));
    res.setHeader('X-RateLimit-Reset', String(decision.resetAt));
    if (decision.allowed) {
      next();
      return;
    }
    deps.onRejected?.(tier);
    res.setHeader('Retry-After', String(decision.retryAfter));
    res.status(429).json({ ...errorBody(429, 'Rate limit exceeded'), retryAfter: decision.retryAfter });
  };
}
