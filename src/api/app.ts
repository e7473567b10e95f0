import express, { type Express, type RequestHandler } from 'express';
import type { Logger } from '../logger';
import type { Metrics } from '../metrics';
import { observeRequests, rememberRouteBase } from './observe';
import { metricsRoutes } from './routes/metrics';
import { errorMiddleware, notFoundHandler } from './http-errors';
import { cors, jsonBody, requestId } from './middleware';
import { healthRoutes, type HealthDeps } from './routes/health';
import { authRoutes, type AuthDeps } from './routes/auth';
import { deviceRoutes, type DeviceDeps } from './routes/devices';
import { auditRoutes, type AuditDeps } from './routes/audit';
import { adminRoutes, type AdminDeps } from './routes/admin';
import { openApiRoutes } from './routes/openapi';
import { docsRoutes } from './routes/docs';
import { userRoutes, type UserRouteDeps } from './routes/users';
import { privacyRoutes, type PrivacyDeps } from './routes/privacy';

export const BODY_LIMIT_BYTES = 64 * 1024;

/** Every route of the interface lives under this prefix. */
const V1 = '/api/v1';

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
  /** Erasure and export (decisions §11). */
  readonly privacy?: PrivacyDeps;
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
  app.use(jsonBody(BODY_LIMIT_BYTES));

  // Each router is mounted on the app at its full path, most frequent first: Express tries
  // them in turn, and entering a router costs about 20 µs of CPU even when nothing in it
  // matches, which is what a nested `/api/v1` router, or a router mounted without a path
  // (health, OpenAPI, docs) placed before the others, would add to every request (bench:read).
  app.use(`${V1}/devices`, rememberRouteBase, deviceRoutes(deps.devices));
  app.use(`${V1}/devices`, rememberRouteBase, auditRoutes(deps.audit));
  app.use(`${V1}/auth`, rememberRouteBase, authRoutes(deps.auth));
  app.use(`${V1}/users`, rememberRouteBase, userRoutes(deps.users));
  app.use(`${V1}/admin`, rememberRouteBase, adminRoutes(deps.admin));
  if (deps.privacy !== undefined) app.use(V1, rememberRouteBase, privacyRoutes(deps.privacy));
  app.use(V1, rememberRouteBase, healthRoutes(deps.health));
  app.use(V1, rememberRouteBase, openApiRoutes());
  app.use(V1, rememberRouteBase, docsRoutes());
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
  app.use(V1, rememberRouteBase, healthRoutes(deps.health));
  app.use(metricsRoutes(deps.metrics.registry));
  app.use(notFoundHandler);
  app.use(errorMiddleware(deps.logger));
  return app;
}
