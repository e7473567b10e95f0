import type { Request, RequestHandler, Response } from 'express';
import type { ApiKeyMatcher } from '../auth/api-keys';
import { bearerToken, type Tokens } from '../auth/tokens';
import type { RateLimiter, Tier } from '../ratelimit/limiter';
import { errorBody } from './http-errors';

/**
 * Which tier a request counts against, and under which key (decisions §6): the
 * authentication endpoints per client IP, sync-customer per API key, register per user,
 * heartbeat per device, everything else per user when authenticated, else per IP.
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

const PER_IP_AUTH: Readonly<Record<string, Tier>> = {
  '/api/v1/auth/login': 'login',
  '/api/v1/auth/refresh': 'refresh',
  '/api/v1/auth/logout': 'auth',
  '/api/v1/auth/password-reset/request': 'auth',
  '/api/v1/auth/password-reset/confirm': 'auth',
};

const OPS_PATHS = new Set(['/api/v1/health', '/api/v1/health/ready', '/health', '/health/ready', '/metrics']);
/** A hub's own requests, counted per device in the heartbeat tier: heartbeats and token renewals. */
const HEARTBEAT = /^\/api\/v1\/devices\/(?:heartbeat\/[^/]+|auth\/[^/]+\/renew)\/?$/;

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
  const path = req.path.length > 1 && req.path.endsWith('/') ? req.path.slice(0, -1) : req.path;
  if (OPS_PATHS.has(path)) return { tier: 'ops', key: ip };
  const authTier = req.method === 'POST' ? PER_IP_AUTH[path] : undefined;
  if (authTier !== undefined) return { tier: authTier, key: ip };

  // Erasure by the person counts as authentication (a password is checked), per IP (decisions §11).
  if (req.method === 'DELETE' && path === '/api/v1/users/me') return { tier: 'auth', key: ip };
  if (req.method === 'POST' && (path === '/api/v1/auth/sync-customer' || path === '/api/v1/auth/erase-customer')) {
    const keyId = deps.matchApiKey(req.get('X-Internal-Api-Key'));
    return keyId === null ? { tier: 'auth', key: ip } : { tier: 'sync', key: `key:${keyId}` };
  }
  if (req.method === 'POST' && HEARTBEAT.test(path)) {
    const t = token(req);
    if (t !== null) {
      try {
        const claims = deps.tokens.verifyDevice(t);
        res.locals.deviceClaims = claims;
        return { tier: 'heartbeat', key: `device:${claims.deviceUuid}` };
      } catch {
        // an invalid device token counts per IP
      }
    }
    return { tier: 'general', key: ip };
  }
  const userId = accessUser(req, res, deps.tokens);
  if (req.method === 'GET' && path === '/api/v1/users/me/export' && userId !== null) {
    return { tier: 'export', key: `user:${userId}` };
  }
  if (req.method === 'POST' && path === '/api/v1/devices/register' && userId !== null) {
    return { tier: 'register', key: `user:${userId}` };
  }
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
