import type { Request, RequestHandler } from 'express';
import type { Logger } from '../logger';
import type { Metrics } from '../metrics';

/** The route template (`/api/v1/devices/:id`), never the raw path: ids would explode the label set. */
function routeOf(req: Request): string {
  const route = req.route as { path?: unknown } | undefined;
  if (route === undefined || typeof route.path !== 'string') return 'unmatched';
  return `${req.baseUrl}${route.path}`;
}

/**
 * One structured log line and one metric sample per request: method, route, status,
 * duration and request id. Headers and bodies are never logged.
 */
export function observeRequests(logger: Logger, metrics: Metrics): RequestHandler {
  return (req, res, next) => {
    const started = process.hrtime.bigint();
    res.once('finish', () => {
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      const labels = { method: req.method, route: routeOf(req), status: String(res.statusCode) };
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
