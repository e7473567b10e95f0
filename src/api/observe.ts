import type { Request, RequestHandler } from 'express';
import type { Logger } from '../logger';
import type { Metrics } from '../metrics';

/** The route template (`/api/v1/devices/:id`), never the raw path: ids would explode the label set. */
function routeOf(req: Request, base: unknown): string {
  const route = req.route as { path?: unknown } | undefined;
  if (route === undefined || typeof route.path !== 'string') return 'unmatched';
  return `${typeof base === 'string' ? base : req.baseUrl}${route.path}`;
}

/**
 * Mounted in front of each router: keeps the router's mount path, which Express takes off
 * `req.baseUrl` again when an error leaves the router, so failed requests are labelled with
 * the same template as successful ones.
 */
export const rememberRouteBase: RequestHandler = (req, res, next) => {
  res.locals.routeBase = req.baseUrl;
  next();
};

/** The status recorded for a request whose connection closed before its answer was written. */
const CLIENT_CLOSED_REQUEST = 499;

/**
 * One structured log line and one metric sample per request: method, route, status,
 * duration and request id. Headers and bodies are never logged.
 */
export function observeRequests(logger: Logger, metrics: Metrics): RequestHandler {
  return (req, res, next) => {
    const started = process.hrtime.bigint();
    metrics.httpInFlight.inc();
    // 'close' comes after 'finish', and also when the connection went away before the answer
    // was written: such a request is counted and logged with status 499 (client closed request).
    res.once('close', () => {
      metrics.httpInFlight.dec();
      const status = res.writableFinished ? res.statusCode : CLIENT_CLOSED_REQUEST;
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      const labels = { method: req.method, route: routeOf(req, res.locals.routeBase), status: String(status) };
      metrics.httpRequests.inc(labels);
      metrics.httpDuration.observe(labels, seconds);
      logger.info({ method: labels.method, route: labels.route, status, durationMs: Math.round(seconds * 1e4) / 10, requestId: res.locals.requestId }, 'request');
    });
    next();
  };
}
