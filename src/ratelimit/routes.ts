import { match } from 'path-to-regexp';

/**
 * Which tier a request counts against is the tier of the route that answers it, however its
 * path is spelled (decisions §6). The limiter runs before Express routes the request, so it
 * matches the path exactly as Express's router will: the same `path-to-regexp`, case
 * insensitive, one optional trailing slash (`strict: false`), the path undecoded — so
 * `/auth/Login` and `/AUTH/LOGIN/` are login, while `//auth//login` and `/auth%2Flogin`,
 * which no route answers, are not (they get a 404 in the general tier).
 *
 * A route mounted on a router (`app.use('/api/v1/auth', router)` + `router.post('/login')`)
 * matches the same paths as its full template here: the mount takes no trailing slash of its
 * own (`/api/v1/auth//login` is not routed), and a parameter never spans a `/`.
 * `test/api/rate-limit-paths.test.ts` holds this table to the app's routes.
 */

/** The tiers a route decides; every other request is in the general tier. */
export type RouteTier = 'login' | 'refresh' | 'auth' | 'sync' | 'register' | 'heartbeat' | 'ops' | 'export';

export interface TieredRoute {
  /** `null`: any method (health and metrics are probed with GET and HEAD). */
  readonly method: string | null;
  /** The full Express route template. */
  readonly path: string;
  readonly tier: RouteTier;
}

export const TIERED_ROUTES: readonly TieredRoute[] = [
  { method: 'POST', path: '/api/v1/auth/login', tier: 'login' },
  { method: 'POST', path: '/api/v1/auth/refresh', tier: 'refresh' },
  { method: 'POST', path: '/api/v1/auth/logout', tier: 'auth' },
  { method: 'POST', path: '/api/v1/auth/password-reset/request', tier: 'auth' },
  { method: 'POST', path: '/api/v1/auth/password-reset/confirm', tier: 'auth' },
  { method: 'POST', path: '/api/v1/auth/sync-customer', tier: 'sync' },
  // Erasure and export (decisions §11): the CRM's erasure per API key, the person's own with a
  // password like the other authentication endpoints, the export per user (5 an hour).
  { method: 'POST', path: '/api/v1/auth/erase-customer', tier: 'sync' },
  { method: 'DELETE', path: '/api/v1/users/me', tier: 'auth' },
  { method: 'GET', path: '/api/v1/users/me/export', tier: 'export' },
  { method: 'POST', path: '/api/v1/devices/register', tier: 'register' },
  // A hub's own requests, per device: heartbeats and token renewals.
  { method: 'POST', path: '/api/v1/devices/heartbeat/:uuid', tier: 'heartbeat' },
  { method: 'POST', path: '/api/v1/devices/auth/:uuid/renew', tier: 'heartbeat' },
  { method: null, path: '/api/v1/health', tier: 'ops' },
  { method: null, path: '/api/v1/health/ready', tier: 'ops' },
  { method: null, path: '/health', tier: 'ops' },
  { method: null, path: '/health/ready', tier: 'ops' },
  { method: null, path: '/metrics', tier: 'ops' },
];

/** Express's own matching options for an app or router built with the defaults. */
export const EXPRESS_MATCH_OPTIONS = { sensitive: false, end: true, trailing: true, decode: false } as const;

const matchers = TIERED_ROUTES.map((route) => ({ ...route, matches: match(route.path, EXPRESS_MATCH_OPTIONS) }));

/**
 * The tiered route that answers `method` `path` (the request's undecoded pathname, as
 * `req.path` gives it), or null when the request falls to the general tier.
 */
export function tieredRouteOf(method: string, path: string): TieredRoute | null {
  // Every tiered path starts with one of these, in any letter case: most requests stop here.
  const head = path.slice(0, 8).toLowerCase();
  if (!head.startsWith('/api/v1/') && !head.startsWith('/health') && !head.startsWith('/metrics')) return null;
  // Express answers HEAD with the GET route of the path (no route here is HEAD's own).
  const routed = method === 'HEAD' ? 'GET' : method;
  for (const route of matchers) {
    if (route.method !== null && route.method !== routed) continue;
    if (route.matches(path) !== false) return route;
  }
  return null;
}
