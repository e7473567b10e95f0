import { Router } from 'express';
import type { Tokens } from '../../auth/tokens';
import { ConflictError, ForbiddenError } from '../../domain/errors';
import { RebuildInProgressError, type RebuildReport } from '../../projections/read-models';
import type { AdminCheck } from '../admin-check';
import { requireAccessToken } from '../auth-middleware';
import { documentRoute } from '../openapi-registry';
import { rebuildResponse } from '../schemas/audit';

export interface AdminDeps {
  readonly tokens: Tokens;
  /** Rebuilds every read model into a fresh generation and switches once it has caught up. */
  readonly rebuildReadModels: () => Promise<RebuildReport>;
  readonly isAdmin: AdminCheck;
}

export const ADMIN_MESSAGES = {
  adminOnly: 'Admin role required',
  rebuildRunning: 'A read-model rebuild is already running',
} as const;

documentRoute({
  method: 'post',
  path: '/admin/read-models/rebuild',
  tag: 'admin',
  summary:
    'Rebuild every read model from the event store into a fresh generation while the current one keeps serving; ' +
    'switches once the new one has caught up and answers then (admin only). What `npm run replay -- rebuild` does, ' +
    'from inside a running service: the way to rebuild a running embedded service, whose read models live in its memory.',
  security: 'access',
  responses: {
    200: { description: 'The generation now served, with document counts', schema: rebuildResponse },
    403: { description: '`Admin role required`' },
    409: { description: '`A read-model rebuild is already running`' },
  },
});

export function adminRoutes(deps: AdminDeps): Router {
  const router = Router();
  router.post('/read-models/rebuild', requireAccessToken(deps.tokens), async (_req, res) => {
    if (!(await deps.isAdmin(res))) throw new ForbiddenError(ADMIN_MESSAGES.adminOnly);
    try {
      res.status(200).json(await deps.rebuildReadModels());
    } catch (error) {
      if (error instanceof RebuildInProgressError) throw new ConflictError(ADMIN_MESSAGES.rebuildRunning);
      throw error;
    }
  });
  return router;
}
