import type { RequestHandler, Response } from 'express';
import { bearerToken, type AccessClaims, type Tokens } from '../auth/tokens';

/** Requires a valid access token; its claims are then at `caller(res)`. */
export function requireAccessToken(tokens: Tokens): RequestHandler {
  return (req, res, next) => {
    // The rate limiter may already have verified this request's token.
    if (res.locals.caller === undefined) res.locals.caller = tokens.verifyAccess(bearerToken(req.get('Authorization')));
    next();
  };
}

/** The verified access-token claims of the request (after requireAccessToken). */
export function caller(res: Response): AccessClaims {
  const claims = res.locals.caller as AccessClaims | undefined;
  if (claims === undefined) throw new Error('caller() used on a route without requireAccessToken');
  return claims;
}
