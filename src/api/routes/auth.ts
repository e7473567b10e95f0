import { timingSafeEqual, createHash } from 'node:crypto';
import { Router, type RequestHandler } from 'express';
import { ConflictError, UnauthorizedError } from '../../domain/errors';
import type { SyncCustomerResult, UserCommands } from '../../commands/users';
import { parseInput } from '../validation';
import { syncCustomerBody } from '../schemas';
import { requestContext } from '../context';
import { documentRoute } from '../openapi-registry';

export interface AuthDeps {
  readonly internalApiKeys: readonly string[];
  readonly users: Pick<UserCommands, 'syncCustomer'>;
}

function digest(s: string): Buffer {
  return createHash('sha256').update(s).digest();
}

/** Accepts any configured key; compares digests in constant time so length leaks nothing. */
export function internalApiKey(keys: readonly string[]): RequestHandler {
  const digests = keys.map(digest);
  return (req, res, next) => {
    const given = req.get('X-Internal-Api-Key');
    const givenDigest = digest(given ?? '');
    const ok = given !== undefined && digests.some((d) => timingSafeEqual(d, givenDigest));
    if (!ok) throw new UnauthorizedError('Invalid API key');
    res.locals.apiKeyId = givenDigest.subarray(0, 8).toString('hex');
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
    200: { description: 'Updated: `{success, user, created: false}`' },
    201: { description: 'Created: `{success, user, created: true}`' },
    400: { description: 'Validation failure' },
    401: { description: 'Invalid API key' },
    409: { description: 'E-mail held by another customer: `{success: false, error, code: "CONFLICT"}`' },
  },
});

export function authRoutes(deps: AuthDeps): Router {
  const router = Router();
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
