import type { z } from 'zod';

/**
 * Every route declares itself here next to its handler, with the same zod schemas that
 * validate it; `GET /api/v1/openapi.json` is generated from this list (one source of truth).
 */
export type Security = 'none' | 'access' | 'device' | 'internalApiKey';

export interface RouteDoc {
  readonly method: 'get' | 'post' | 'put' | 'delete' | 'patch';
  /** Express-style path under /api/v1, e.g. `/devices/:id`. */
  readonly path: string;
  readonly summary: string;
  readonly tag: string;
  readonly security: Security;
  readonly params?: z.ZodObject;
  readonly query?: z.ZodObject;
  readonly body?: z.ZodType;
  /** The body may be left out (a heartbeat without changes). */
  readonly bodyOptional?: boolean;
  /** Status → description, and the response schema when the body is not the default error body. */
  readonly responses: Readonly<Record<number, { readonly description: string; readonly schema?: z.ZodType }>>;
}

const routes: RouteDoc[] = [];

export function documentRoute(doc: RouteDoc): void {
  if (!routes.some((r) => r.method === doc.method && r.path === doc.path)) routes.push(doc);
}

export function documentedRoutes(): readonly RouteDoc[] {
  return routes;
}
