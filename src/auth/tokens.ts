import { createSecretKey, randomUUID, type KeyObject } from 'node:crypto';
import jwt, { type JwtPayload } from 'jsonwebtoken';
import { UnauthorizedError } from '../domain/errors';
import type { Secrets } from '../config';
import type { UserRole } from '../domain/user';
import { VerifiedTokens } from './verified-tokens';

/**
 * JWTs of the three kinds (decisions §3, §7). Keys are built once, `alg` is pinned to
 * HS256, and the `type` claim is checked, so no kind of token is accepted where another
 * is expected. A verified token never tells more than its claims: revocation (device
 * generation, refresh status) is checked by the caller against state.
 */

export const ACCESS_TOKEN_TTL_SECONDS = 900;
export const REFRESH_TOKEN_TTL_SECONDS = 30 * 24 * 60 * 60;
export const DEVICE_TOKEN_TTL_SECONDS = 86_400;

const ALGORITHM = 'HS256';

export const TOKEN_MESSAGES = {
  missing: 'Unauthorized',
  invalid: 'Invalid token',
  expired: 'Token has expired',
  revoked: 'Token has been revoked',
  invalidRefresh: 'Invalid refresh token',
  expiredRefresh: 'Refresh token has expired',
  revokedRefresh: 'Refresh token has been revoked',
} as const;

/**
 * What a verified access token says that the service reads. The token carries the user's
 * `email` too (decisions §3), checked to be there, but it is not part of what a verification
 * answers: verified claims are remembered until the token expires (`VerifiedTokens`), and an
 * e-mail remembered there would outlive the person's erasure (decisions §11). Nothing reads it:
 * every use of an address reads the users read model.
 */
export interface AccessClaims {
  readonly sub: string;
  readonly role: UserRole;
  readonly type: 'access';
  readonly fam?: string;
  readonly iat: number;
  readonly exp: number;
}

export interface RefreshClaims {
  readonly sub: string;
  readonly jti: string;
  readonly fam: string;
  readonly type: 'refresh';
  readonly iat: number;
  readonly exp: number;
}

/**
 * What a verified device token says that the service reads. The token's `sub` (the device's
 * internal id) and `iat` are checked when it is verified but not kept: nothing reads them, and
 * a hub's claims are remembered for as long as its token lives (VerifiedTokens).
 */
export interface DeviceClaims {
  readonly deviceUuid: string;
  readonly type: 'device';
  /** Token generation: a newer issue revokes every older token. */
  readonly gen: number;
  readonly exp: number;
}

export interface Tokens {
  signAccess(claims: { sub: string; email: string; role: UserRole; fam?: string }): string;
  signRefresh(claims: { sub: string; fam: string; jti?: string }): { token: string; jti: string };
  signDevice(claims: { sub: string; deviceUuid: string; gen: number }): string;
  /** Throws UnauthorizedError with the spec's message. */
  verifyAccess(token: string): AccessClaims;
  verifyRefresh(token: string): RefreshClaims;
  verifyDevice(token: string): DeviceClaims;
}

type Messages = { readonly invalid: string; readonly expired: string };

function verifyWith(key: KeyObject, token: string, messages: Messages): JwtPayload {
  try {
    const payload = jwt.verify(token, key, { algorithms: [ALGORITHM] });
    if (typeof payload === 'string') throw new UnauthorizedError(messages.invalid);
    return payload;
  } catch (error) {
    if (error instanceof UnauthorizedError) throw error;
    if (error instanceof jwt.TokenExpiredError) throw new UnauthorizedError(messages.expired);
    throw new UnauthorizedError(messages.invalid);
  }
}

/** How many verified access tokens, and device tokens, a process remembers (a few MB each at most). */
export const VERIFIED_TOKENS_KEPT = 10_000;

const isString = (v: unknown): v is string => typeof v === 'string' && v.length > 0;
const isNumber = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

export function createTokens(secrets: Pick<Secrets, 'jwtAccessSecret' | 'jwtRefreshSecret' | 'jwtDeviceSecret'>): Tokens {
  const accessKey = createSecretKey(Buffer.from(secrets.jwtAccessSecret, 'utf8'));
  const refreshKey = createSecretKey(Buffer.from(secrets.jwtRefreshSecret, 'utf8'));
  const deviceKey = createSecretKey(Buffer.from(secrets.jwtDeviceSecret, 'utf8'));
  const accessMessages = { invalid: TOKEN_MESSAGES.invalid, expired: TOKEN_MESSAGES.expired };
  const refreshMessages = { invalid: TOKEN_MESSAGES.invalidRefresh, expired: TOKEN_MESSAGES.expiredRefresh };
  // Refresh tokens are used once each (they rotate): only access and device tokens come back.
  const verifiedAccess = new VerifiedTokens<AccessClaims>(VERIFIED_TOKENS_KEPT);
  const verifiedDevice = new VerifiedTokens<DeviceClaims>(VERIFIED_TOKENS_KEPT);

  const verifyAccess = (token: string): AccessClaims => {
    const p = verifyWith(accessKey, token, accessMessages);
    if (p.type !== 'access' || !isString(p.sub) || !isString(p.email) || (p.role !== 'user' && p.role !== 'admin')) {
      throw new UnauthorizedError(TOKEN_MESSAGES.invalid);
    }
    if (p.fam !== undefined && !isString(p.fam)) throw new UnauthorizedError(TOKEN_MESSAGES.invalid);
    return { sub: p.sub, role: p.role, type: 'access', ...(isString(p.fam) ? { fam: p.fam } : {}), iat: p.iat ?? 0, exp: p.exp ?? 0 };
  };
  const verifyDevice = (token: string): DeviceClaims => {
    const p = verifyWith(deviceKey, token, accessMessages);
    const gen: unknown = p.gen;
    if (p.type !== 'device' || !isString(p.sub) || !isString(p.deviceUuid) || !isNumber(gen)) {
      throw new UnauthorizedError(TOKEN_MESSAGES.invalid);
    }
    return { deviceUuid: p.deviceUuid, type: 'device', gen, exp: p.exp ?? 0 };
  };

  return {
    signAccess: ({ sub, email, role, fam }) =>
      jwt.sign({ sub, email, role, type: 'access', ...(fam !== undefined ? { fam } : {}) }, accessKey, {
        algorithm: ALGORITHM,
        expiresIn: ACCESS_TOKEN_TTL_SECONDS,
      }),
    signRefresh: ({ sub, fam, jti = randomUUID() }) => ({
      token: jwt.sign({ sub, fam, jti, type: 'refresh' }, refreshKey, { algorithm: ALGORITHM, expiresIn: REFRESH_TOKEN_TTL_SECONDS }),
      jti,
    }),
    signDevice: ({ sub, deviceUuid, gen }) =>
      jwt.sign({ sub, deviceUuid, gen, type: 'device' }, deviceKey, { algorithm: ALGORITHM, expiresIn: DEVICE_TOKEN_TTL_SECONDS }),

    verifyAccess: (token) => verifiedAccess.get(token) ?? verifiedAccess.remember(token, verifyAccess(token)),
    verifyRefresh(token) {
      const p = verifyWith(refreshKey, token, refreshMessages);
      if (p.type !== 'refresh' || !isString(p.sub) || !isString(p.jti) || !isString(p.fam)) {
        throw new UnauthorizedError(TOKEN_MESSAGES.invalidRefresh);
      }
      return { sub: p.sub, jti: p.jti, fam: p.fam, type: 'refresh', iat: p.iat ?? 0, exp: p.exp ?? 0 };
    },
    verifyDevice: (token) => verifiedDevice.get(token) ?? verifiedDevice.remember(token, verifyDevice(token)),
  };
}

/** The bearer token of an Authorization header, or a 401 `Unauthorized` when there is none. */
export function bearerToken(header: string | undefined): string {
  if (header === undefined) throw new UnauthorizedError(TOKEN_MESSAGES.missing);
  // The scheme's name is case-insensitive (RFC 9110 §11.1): `bearer` and `BEARER` are `Bearer`.
  const match = /^Bearer +([A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*)$/i.exec(header.trim());
  if (match === null || match[1] === undefined) throw new UnauthorizedError(TOKEN_MESSAGES.missing);
  return match[1];
}

/**
 * The `type` claim of a JWT, read WITHOUT verifying anything: only to pick which verification
 * to run (or to order work), never to trust. Undefined when the token does not parse.
 */
export function unverifiedTokenType(token: string): unknown {
  if (token.length > 8192) return undefined;
  const payload = token.split('.')[1];
  if (payload === undefined) return undefined;
  try {
    const claims: unknown = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8'));
    return typeof claims === 'object' && claims !== null ? (claims as { type?: unknown }).type : undefined;
  } catch {
    return undefined;
  }
}
