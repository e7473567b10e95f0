import { documentRoute } from '../openapi-registry';
import { Router } from 'express';
import { healthResponse, readinessResponse } from '../schemas';

/** The fixed words a readiness check answers with (decisions §8); the detail is logged. */
export const CHECK_STATES = ['ok', 'down', 'lagging', 'failed'] as const;
export type CheckState = (typeof CHECK_STATES)[number];

export interface ReadinessReport {
  readonly ready: boolean;
  readonly checks: Readonly<Record<string, { readonly status: CheckState }>>;
}

export interface HealthDeps {
  readonly readiness: () => Promise<ReadinessReport>;
}

documentRoute({
  method: 'get',
  path: '/health',
  tag: 'operations',
  summary: 'Liveness: `{status: "ok", service: "home-hub-cloud"}`',
  security: 'none',
  responses: { 200: { description: 'The process lives', schema: healthResponse } },
});
documentRoute({
  method: 'get',
  path: '/health/ready',
  tag: 'operations',
  summary: 'Readiness of every dependency: `{status, checks}`',
  security: 'none',
  responses: {
    200: { description: 'Every dependency answers', schema: readinessResponse },
    503: { description: 'Names what is not ready', schema: readinessResponse },
  },
});

/** Liveness needs nothing; readiness asks every dependency (decisions §8). */
export function healthRoutes(deps: HealthDeps): Router {
  const router = Router();
  router.get('/health', (_req, res) => {
    res.status(200).json({ status: 'ok', service: 'home-hub-cloud' });
  });
  router.get('/health/ready', async (_req, res) => {
    const report = await deps.readiness();
    res.status(report.ready ? 200 : 503).json({ status: report.ready ? 'ok' : 'unavailable', checks: report.checks });
  });
  return router;
}
