import { Router, type Request, type RequestHandler } from 'express';
import { createApiKeyMatcher } from '../../auth/api-keys';
import { ConflictError, UnauthorizedError } from '../../domain/errors';
import type { SyncCustomerResult, UserCommands } from '../../commands/users';
import { AUTH_MESSAGES, type AuthCommands } from '../../commands/auth';
import type { ClientInfo } from '../../commands/sessions';
import type { Tokens } from '../../auth/tokens';
import { parseInput } from '../validation';
import {
  loginBody,
  loginResponse,
  messageResponse,
  passwordResetConfirmBody,
  passwordResetRequestBody,
  refreshBody,
  syncConflictResponse,
  syncCustomerBody,
  syncCustomerResponse,
  tokenPairResponse,
} from '../schemas';
import { requestContext } from '../context';
import { documentRoute } from '../openapi-registry';
import { caller, requireAccessToken } from '../auth-middleware';

export interface AuthDeps {
  readonly internalApiKeys: readonly string[];
  readonly users: Pick<UserCommands, 'syncCustomer'>;
  readonly auth: AuthCommands;
  readonly tokens: Tokens;
}

/** Accepts any configured key (see createApiKeyMatcher); the key is then known by its id only. */
export function internalApiKey(keys: readonly string[]): RequestHandler {
  const match = createApiKeyMatcher(keys);
  return (req, res, next) => {
    const keyId = match(req.get('X-Internal-Api-Key'));
    if (keyId === null) throw new UnauthorizedError('Invalid API key');
    res.locals.apiKeyId = keyId;
    next();
  };
}

function syncResponse(result: SyncCustomerResult): Record<string, unknown> {
  const u = result.user;
  return {
    success: true,
    user: {
      id: u.userId,
      sync_id: u.syncId,
      email: u.email,
      firstName: u.firstName,
      lastName: u.lastName,
      isActive: u.isActive,
      createdAt: u.createdAt,
    },
    created: result.created,
  };
}

documentRoute({
  method: 'post',
  path: '/auth/sync-customer',
  tag: 'auth',
  summary: 'Create or update a user from a CRM customer record',
  security: 'internalApiKey',
  body: syncCustomerBody,
  responses: {
    200: { description: 'Updated: `{success, user, created: false}`', schema: syncCustomerResponse },
    201: { description: 'Created: `{success, user, created: true}`', schema: syncCustomerResponse },
    400: { description: 'Validation failure' },
    401: { description: 'Invalid API key' },
    409: { description: 'E-mail held by another customer: `{success: false, error, code: "CONFLICT"}`', schema: syncConflictResponse },
  },
});

documentRoute({
  method: 'post',
  path: '/auth/login',
  tag: 'auth',
  summary: 'Log in with e-mail and password; opens a new refresh-token family',
  security: 'none',
  body: loginBody,
  responses: {
    201: { description: 'Tokens and the user summary', schema: loginResponse },
    400: { description: 'Validation failure' },
    401: { description: '`Invalid email or password`' },
    403: { description: '`Account is inactive`' },
  },
});
documentRoute({
  method: 'post',
  path: '/auth/refresh',
  tag: 'auth',
  summary: 'Rotate a refresh token: the presented one is spent, a new pair is issued',
  security: 'none',
  body: refreshBody,
  responses: {
    201: { description: 'A new token pair', schema: tokenPairResponse },
    400: { description: 'Validation failure' },
    401: {
      description:
        '`Invalid refresh token`, `Refresh token has expired`, or `Refresh token has been revoked` (revoked, or rotated already: presenting a rotated token again revokes its whole family)',
    },
  },
});
documentRoute({
  method: 'post',
  path: '/auth/logout',
  tag: 'auth',
  summary: "Revoke the session's refresh-token family (all of the user's when the token names none); the access token lives on until it expires",
  security: 'access',
  responses: {
    200: { description: '`{message: "Logged out successfully"}`', schema: messageResponse },
    401: { description: '`Unauthorized`, `Invalid token` or `Token has expired`' },
  },
});
documentRoute({
  method: 'post',
  path: '/auth/password-reset/request',
  tag: 'auth',
  summary: 'Mail a single-use reset token (valid one hour); the answer is the same whether or not the address exists',
  security: 'none',
  body: passwordResetRequestBody,
  responses: {
    202: { description: 'Accepted', schema: messageResponse },
    400: { description: 'Validation failure' },
  },
});
documentRoute({
  method: 'post',
  path: '/auth/password-reset/confirm',
  tag: 'auth',
  summary: 'Set a new password (8–128 characters) with a reset token; revokes every refresh-token family of the user',
  security: 'none',
  body: passwordResetConfirmBody,
  responses: {
    200: { description: 'Password set', schema: messageResponse },
    400: { description: 'Validation failure, or `Invalid or expired reset token`' },
  },
});

/** Recorded with a session's tokens (decisions §3: `ip`, `userAgent`). */
function clientInfo(req: Request): ClientInfo {
  const userAgent = req.get('User-Agent');
  return { ip: req.ip ?? null, userAgent: userAgent === undefined ? null : userAgent.slice(0, 255) };
}

export function authRoutes(deps: AuthDeps): Router {
  const router = Router();
  const { auth } = deps;

  router.post('/login', async (req, res) => {
    const body = parseInput(loginBody, req.body);
    res.status(201).json(await auth.login(body, clientInfo(req), String(res.locals.requestId)));
  });

  router.post('/refresh', async (req, res) => {
    const { refreshToken } = parseInput(refreshBody, req.body);
    res.status(201).json(await auth.refresh(refreshToken, clientInfo(req), String(res.locals.requestId)));
  });

  router.post('/logout', requireAccessToken(deps.tokens), async (_req, res) => {
    await auth.logout(caller(res), String(res.locals.requestId));
    res.status(200).json({ message: AUTH_MESSAGES.loggedOut });
  });

  router.post('/password-reset/request', (req, res) => {
    const { email } = parseInput(passwordResetRequestBody, req.body);
    // Answered before the lookup: the same answer, in the same time, for any address.
    auth.requestPasswordReset(email, String(res.locals.requestId));
    res.status(202).json({ message: AUTH_MESSAGES.resetRequested });
  });

  router.post('/password-reset/confirm', async (req, res) => {
    const body = parseInput(passwordResetConfirmBody, req.body);
    await auth.confirmPasswordReset(body, String(res.locals.requestId));
    res.status(200).json({ message: AUTH_MESSAGES.resetDone });
  });

  router.post('/sync-customer', internalApiKey(deps.internalApiKeys), async (req, res) => {
    const body = parseInput(syncCustomerBody, req.body);
    const ctx = requestContext(res, { type: 'crm', id: String(res.locals.apiKeyId) });
    try {
      const result = await deps.users.syncCustomer(body, ctx);
      res.status(result.created ? 201 : 200).json(syncResponse(result));
    } catch (error) {
      // The CRM's conflict body has its own shape (interface: Errors).
      if (!(error instanceof ConflictError)) throw error;
      res.status(409).json({ success: false, error: error.message, code: 'CONFLICT' });
    }
  });
  return router;
}
