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

/** The samples of one (method, route, status). */
interface Series {
  readonly requests: ReturnType<Metrics['httpRequests']['labels']>;
  readonly duration: ReturnType<Metrics['httpDuration']['labels']>;
}

/** The status recorded for a request whose connection closed before its answer was written. */
const CLIENT_CLOSED_REQUEST = 499;

/**
 * One structured log line and one metric sample per request: method, route, status,
 * duration and request id. Headers and bodies are never logged.
 */
export function observeRequests(logger: Logger, metrics: Metrics): RequestHandler {
  // The counter and histogram of each (method, route, status), looked up once: prom-client
  // hashes a label object on every call. Bounded: Node accepts only the known methods, and
  // routes are templates.
  const series = new Map<string, Series>();
  const seriesOf = (method: string, route: string, status: string): Series => {
    const key = `${method} ${route} ${status}`;
    let found = series.get(key);
    if (found === undefined) {
      const labels = { method, route, status };
      found = { requests: metrics.httpRequests.labels(labels), duration: metrics.httpDuration.labels(labels) };
      series.set(key, found);
    }
    return found;
  };
  return (req, res, next) => {
    const started = process.hrtime.bigint();
    metrics.httpInFlight.inc();
    // 'close' comes after 'finish', and also when the connection went away before the answer
    // was written: such a request is counted and logged with status 499 (client closed request).
    res.once('close', () => {
      metrics.httpInFlight.dec();
      const status = res.writableFinished ? res.statusCode : CLIENT_CLOSED_REQUEST;
      const seconds = Number(process.hrtime.bigint() - started) / 1e9;
      const route = routeOf(req, res.locals.routeBase);
      const { requests, duration } = seriesOf(req.method, route, String(status));
      requests.inc();
      duration.observe(seconds);
      logger.info({ method: req.method, route, status, durationMs: Math.round(seconds * 1e4) / 10, requestId: res.locals.requestId }, 'request');
    });
    next();
  };
}
