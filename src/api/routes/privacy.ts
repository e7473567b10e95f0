import { Router } from 'express';
import type { Tokens } from '../../auth/tokens';
import type { AccountCommands } from '../../commands/account';
import type { ErasureCommands } from '../../commands/erasure';
import { NotFoundError } from '../../domain/errors';
import { USER_MESSAGES } from '../../domain/user';
import { caller, requireAccessToken } from '../auth-middleware';
import { requestContext } from '../context';
import { documentRoute } from '../openapi-registry';
import { accountExportResponse, eraseCustomerBody, eraseCustomerResponse, eraseSelfBody, successResponse } from '../schemas/privacy';
import { parseInput } from '../validation';
import { internalApiKey } from './auth';

/** Erasure and export (decisions §11): `POST /auth/erase-customer`, `DELETE /users/me`, `GET /users/me/export`. */
export interface PrivacyDeps {
  readonly tokens: Tokens;
  readonly internalApiKeys: readonly string[];
  readonly erasure: ErasureCommands;
  readonly account: AccountCommands;
}

documentRoute({
  method: 'post',
  path: '/auth/erase-customer',
  tag: 'auth',
  summary: "Erase a CRM customer's user: tokens refused, links ended, personal data unreadable everywhere (idempotent)",
  security: 'internalApiKey',
  body: eraseCustomerBody,
  responses: {
    200: { description: '`{erased: true, userId}`, also for a customer erased before', schema: eraseCustomerResponse },
    400: { description: 'Validation failure' },
    401: { description: 'Invalid API key' },
    404: { description: '`User not found`' },
  },
});

documentRoute({
  method: 'delete',
  path: '/users/me',
  tag: 'users',
  summary: "Erase the caller's account, confirmed with their password",
  security: 'access',
  body: eraseSelfBody,
  responses: {
    200: { description: '`{success: true}`', schema: successResponse },
    400: { description: 'Validation failure' },
    401: { description: '`Invalid email or password`, or a token error' },
  },
});

documentRoute({
  method: 'get',
  path: '/users/me/export',
  tag: 'users',
  summary: 'Everything the service holds about the caller, decrypted, as one JSON document (at most 5 per hour)',
  security: 'access',
  responses: {
    200: { description: 'The export', schema: accountExportResponse },
    401: { description: 'A token error' },
    404: { description: '`User not found`' },
    429: { description: 'More than 5 exports within an hour' },
  },
});

/** Mounted at the API root: its paths span `/auth` and `/users`. */
export function privacyRoutes(deps: PrivacyDeps): Router {
  const router = Router();
  router.post('/auth/erase-customer', internalApiKey(deps.internalApiKeys), async (req, res) => {
    const body = parseInput(eraseCustomerBody, req.body);
    const ctx = requestContext(res, { type: 'crm', id: String(res.locals.apiKeyId) });
    const { userId } = await deps.erasure.eraseCustomer(body.id, ctx);
    res.status(200).json({ erased: true, userId });
  });
  router.delete('/users/me', requireAccessToken(deps.tokens), async (req, res) => {
    const body = parseInput(eraseSelfBody, req.body);
    const userId = caller(res).sub;
    await deps.account.eraseSelf(userId, body.password, requestContext(res, { type: 'user', id: userId }));
    res.status(200).json({ success: true });
  });
  router.get('/users/me/export', requireAccessToken(deps.tokens), async (_req, res) => {
    const document = await deps.account.exportData(caller(res).sub);
    if (document === null) throw new NotFoundError(USER_MESSAGES.notFound);
    res.status(200).json(document);
  });
  return router;
}
