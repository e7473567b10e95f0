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

/**
 * One structured log line and one metric sample per request: method, route, status,
 * duration and request id. Headers and bodies are never logged.
 */
export function observeRequests(logger: Logger, metrics: Metrics): RequestHandler {
  return (req, res, next) => {
    const started = process.hrtime.bigint();
    metrics.httpInFlight.inc();
    // 'close' comes after 'finish', and also when the client went away first.
    res.once('close', () => metrics.httpInFlight.dec());
    res.once('finish', () => {
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      const labels = { method: req.method, route: routeOf(req, res.locals.routeBase), status: String(res.statusCode) };
      metrics.httpRequests.inc(labels);
      metrics.httpDuration.observe(labels, seconds);
      logger.info(
        { method: labels.method, route: labels.route, status: res.statusCode, durationMs: Math.round(seconds * 1e4) / 10, requestId: res.locals.requestId },
        'request',
      );
    });
    next();
  };
}
