import express, { type Express, type RequestHandler } from 'express';
import type { Logger } from '../logger';
import type { Metrics } from '../metrics';
import { observeRequests, rememberRouteBase } from './observe';
import { metricsRoutes } from './routes/metrics';
import { errorMiddleware, notFoundHandler } from './http-errors';
import { cors, requestId, requireJsonBody } from './middleware';
import { healthRoutes, type HealthDeps } from './routes/health';
import { authRoutes, type AuthDeps } from './routes/auth';
import { deviceRoutes, type DeviceDeps } from './routes/devices';
import { auditRoutes, type AuditDeps } from './routes/audit';
import { adminRoutes, type AdminDeps } from './routes/admin';
import { openApiRoutes } from './routes/openapi';
import { docsRoutes } from './routes/docs';
import { userRoutes, type UserRouteDeps } from './routes/users';

export const BODY_LIMIT_BYTES = 64 * 1024;

export interface AppDeps {
  readonly logger: Logger;
  readonly appOrigin: string | undefined;
  readonly trustProxy: boolean | number | string | undefined;
  readonly health: HealthDeps;
  readonly auth: AuthDeps;
  readonly users: UserRouteDeps;
  readonly devices: DeviceDeps;
  /** Device history and state at an instant (decisions §9). */
  readonly audit: AuditDeps;
  readonly admin: AdminDeps;
  /** Counts every request against its tier before anything else can answer it. */
  readonly rateLimit: RequestHandler;
  readonly metrics: Metrics;
}

/** The HTTP API: every route lives under /api/v1; unknown routes answer 404 JSON. */
export function createApp(deps: AppDeps): Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.set('trust proxy', deps.trustProxy ?? false);

  app.use(requestId);
  app.use(observeRequests(deps.logger, deps.metrics));
  // Before the limiter: preflights are not counted, and a 429 still carries the CORS headers.
  app.use(cors(deps.appOrigin));
  app.use(deps.rateLimit);
  app.use(requireJsonBody);
  app.use(express.json({ limit: BODY_LIMIT_BYTES, strict: false }));

  const v1 = express.Router();
  v1.use(rememberRouteBase, healthRoutes(deps.health));
  v1.use(rememberRouteBase, openApiRoutes());
  v1.use(rememberRouteBase, docsRoutes());
  v1.use('/auth', rememberRouteBase, authRoutes(deps.auth));
  v1.use('/users', rememberRouteBase, userRoutes(deps.users));
  v1.use('/devices', rememberRouteBase, deviceRoutes(deps.devices));
  v1.use('/devices', rememberRouteBase, auditRoutes(deps.audit));
  v1.use('/admin', rememberRouteBase, adminRoutes(deps.admin));
  app.use('/api/v1', v1);
  // Liveness at the root too, for probes and people who try it first.
  app.use(rememberRouteBase, healthRoutes(deps.health));
  app.use(metricsRoutes(deps.metrics.registry));

  app.use(notFoundHandler);
  app.use(errorMiddleware(deps.logger));
  return app;
}

/**
 * A process without the `api` role (projector, expiry) still answers its operator on PORT:
 * health, readiness and metrics, nothing else. No rate limit: nothing here reaches a client.
 */
export function createOperationsApp(deps: { readonly logger: Logger; readonly metrics: Metrics; readonly health: HealthDeps }): Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('etag', false);
  app.use(requestId);
  app.use(observeRequests(deps.logger, deps.metrics));
  const v1 = express.Router();
  v1.use(rememberRouteBase, healthRoutes(deps.health));
  app.use('/api/v1', v1);
  app.use(metricsRoutes(deps.metrics.registry));
  app.use(notFoundHandler);
  app.use(errorMiddleware(deps.logger));
  return app;
}
