import { Router } from 'express';
import { z } from 'zod';
import { documentedRoutes, type RouteDoc } from '../openapi-registry';
import { statusText } from '../http-errors';

type JsonSchema = Record<string, unknown>;

function schemaOf(type: z.ZodType): JsonSchema {
  const schema = z.toJSONSchema(type, { io: 'input', target: 'draft-2020-12', unrepresentable: 'any' }) as JsonSchema;
  delete schema.$schema;
  return schema;
}

/**
 * A query parameter as a client sends it, typed by what the service reads from it: a
 * string that the validator turns into an integer is documented as an integer (with its
 * bounds), so generated clients pass numbers.
 */
function queryParameterSchema(property: z.ZodType): JsonSchema {
  const input = schemaOf(property);
  const output = z.toJSONSchema(property, { io: 'output', target: 'draft-2020-12', unrepresentable: 'any' }) as JsonSchema;
  delete output.$schema;
  if (input.type === 'string' && (output.type === 'integer' || output.type === 'number')) {
    return { ...output, ...(input.description !== undefined ? { description: input.description } : {}), ...(input.default !== undefined ? { default: Number(input.default) } : {}) };
  }
  return input;
}

function parametersOf(location: 'path' | 'query', object: z.ZodObject | undefined): JsonSchema[] {
  if (object === undefined) return [];
  const required = new Set((schemaOf(object).required ?? []) as string[]);
  return Object.entries(object.shape as Record<string, z.ZodType>).map(([name, property]) => ({
    name,
    in: location,
    required: location === 'path' || required.has(name),
    schema: location === 'query' ? queryParameterSchema(property) : schemaOf(property),
  }));
}

const SECURITY: Record<RouteDoc['security'], JsonSchema[]> = {
  none: [],
  access: [{ accessToken: [] }],
  device: [{ deviceToken: [] }],
  internalApiKey: [{ internalApiKey: [] }],
};

const ERROR_BODY: JsonSchema = {
  type: 'object',
  required: ['statusCode', 'message', 'error'],
  properties: {
    statusCode: { type: 'integer' },
    message: { type: 'string' },
    error: { type: 'string' },
  },
};

const VALIDATION_ERROR_BODY: JsonSchema = {
  type: 'object',
  required: ['statusCode', 'message', 'error'],
  properties: {
    statusCode: { type: 'integer', const: 400 },
    message: { oneOf: [{ type: 'string' }, { type: 'array', items: { type: 'string' } }] },
    error: { type: 'string' },
    details: { type: 'array', items: { type: 'object', required: ['field', 'message'], properties: { field: { type: 'string' }, message: { type: 'string' } } } },
  },
};

const RATE_LIMITED_BODY: JsonSchema = {
  type: 'object',
  required: ['statusCode', 'message', 'error', 'retryAfter'],
  properties: {
    statusCode: { type: 'integer', const: 429 },
    message: { type: 'string', const: 'Rate limit exceeded' },
    error: { type: 'string', const: 'Too Many Requests' },
    retryAfter: { type: 'integer', description: 'Seconds to wait; also in the Retry-After header' },
  },
};

const HEADERS: Record<string, JsonSchema> = {
  'X-Request-Id': { description: 'The id of this request, unique (a well-formed one set by a trusted proxy, TRUST_PROXY, is kept)', schema: { type: 'string' } },
  'X-RateLimit-Limit': { description: 'The ceiling of the tier that applied', schema: { type: 'integer' } },
  'X-RateLimit-Remaining': { description: 'Requests left in the window', schema: { type: 'integer' } },
  'X-RateLimit-Reset': { description: 'When the window resets (Unix time, seconds)', schema: { type: 'integer' } },
  'Retry-After': { description: 'Seconds to wait before trying again', schema: { type: 'integer' } },
};

const EVERY_RESPONSE_HEADERS = ['X-Request-Id', 'X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset'];
const headerRefs = (names: readonly string[]): JsonSchema => Object.fromEntries(names.map((name) => [name, { $ref: `#/components/headers/${name}` }]));

/** The errors any route can answer besides its own: what the middleware in front of every route does. */
function standardErrors(route: RouteDoc): Record<number, { description: string; schema: string }> {
  const errors: Record<number, { description: string; schema: string }> = {};
  if (route.body !== undefined || route.params !== undefined || route.query !== undefined) {
    errors[400] = { description: 'Validation failure (`message` lists what is wrong, `details` per field)', schema: 'ValidationError' };
  }
  if (route.security !== 'none') errors[401] = { description: 'Missing, invalid, expired or revoked credentials', schema: 'Error' };
  if (route.body !== undefined) {
    errors[413] = { description: 'Body over 64 KiB', schema: 'Error' };
    errors[415] = { description: 'A body that is not `application/json`', schema: 'Error' };
  }
  errors[429] = { description: 'Rate limit exceeded', schema: 'RateLimited' };
  errors[500] = { description: 'Internal error (never with a stack trace or internal message)', schema: 'Error' };
  return errors;
}

const TAGS: Readonly<Record<string, string>> = {
  auth: 'Sign-in, refresh-token rotation, logout, password reset, and the CRM sync',
  users: 'The signed-in user',
  devices: 'Hubs: registration, sharing, device tokens and heartbeats',
  audit: "A device's history and its state at an instant, read from the event store",
  admin: 'Operators: read-model rebuilds',
  operations: 'Health and readiness',
};

const pascal = (text: string): string => text.replace(/(^|[^A-Za-z0-9]+)([A-Za-z0-9])/g, (_m, _sep: string, c: string) => c.toUpperCase());

/** OpenAPI 3.1, generated from the zod schemas that validate the requests; every schema named in components. */
export function buildOpenApiDocument(): JsonSchema {
  const schemas: Record<string, JsonSchema> = { Error: ERROR_BODY, ValidationError: VALIDATION_ERROR_BODY, RateLimited: RATE_LIMITED_BODY };
  const named = new Map<z.ZodType, string>();
  /** The component a zod schema is documented as: one name per schema, however many routes use it. */
  const component = (type: z.ZodType, name: string): JsonSchema => {
    let ref = named.get(type);
    if (ref === undefined) {
      ref = name;
      named.set(type, ref);
      schemas[ref] = schemaOf(type);
    }
    return { $ref: `#/components/schemas/${ref}` };
  };

  const paths: Record<string, Record<string, JsonSchema>> = {};
  for (const route of documentedRoutes()) {
    const path = route.path.replace(/:([A-Za-z]+)/g, '{$1}');
    const operationId = `${route.method}${pascal(route.path.replace(/:/g, ''))}`;
    const responses: Record<string, JsonSchema> = {};
    const defaults = standardErrors(route);
    for (const status of [...new Set([...Object.keys(route.responses), ...Object.keys(defaults)].map(Number))].sort((a, b) => a - b)) {
      const own = route.responses[status];
      const fallback = defaults[status];
      const schema =
        own?.schema !== undefined
          ? component(own.schema, `${pascal(operationId)}Response${status}`)
          : status >= 400
            ? { $ref: `#/components/schemas/${fallback?.schema ?? (status === 400 ? 'ValidationError' : status === 429 ? 'RateLimited' : 'Error')}` }
            : undefined;
      responses[String(status)] = {
        description: own?.description || fallback?.description || statusText(status),
        headers: headerRefs(status === 429 ? [...EVERY_RESPONSE_HEADERS, 'Retry-After'] : EVERY_RESPONSE_HEADERS),
        ...(schema !== undefined ? { content: { 'application/json': { schema } } } : {}),
      };
    }
    const operation: JsonSchema = {
      tags: [route.tag],
      summary: route.summary,
      operationId,
      security: SECURITY[route.security],
      parameters: [...parametersOf('path', route.params), ...parametersOf('query', route.query)],
      responses,
      ...(route.body !== undefined
        ? { requestBody: { required: route.bodyOptional !== true, content: { 'application/json': { schema: component(route.body, `${pascal(operationId)}Request`) } } } }
        : {}),
    };
    paths[path] = { ...(paths[path] ?? {}), [route.method]: operation };
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'Home Hub Cloud API',
      version: '1.0.0',
      description: 'The cloud side of a home hub. Every response carries X-Request-Id and the rate-limit headers of the tier that applied.',
      license: { name: 'Proprietary', identifier: 'LicenseRef-Proprietary' },
    },
    servers: [{ url: '/api/v1' }],
    tags: [...new Set(documentedRoutes().map((r) => r.tag))].map((name) => ({ name, description: TAGS[name] ?? name })),
    paths,
    components: {
      schemas,
      headers: HEADERS,
      securitySchemes: {
        accessToken: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'A user access token from POST /auth/login' },
        deviceToken: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'A device token from POST /devices/auth/{uuid}' },
        internalApiKey: { type: 'apiKey', in: 'header', name: 'X-Internal-Api-Key', description: 'A CRM key from INTERNAL_API_KEYS' },
      },
    },
  };
}

export function openApiRoutes(): Router {
  const router = Router();
  let document: JsonSchema | undefined;
  router.get('/openapi.json', (_req, res) => {
    // Built on first request, when every route module has registered itself.
    document ??= buildOpenApiDocument();
    res.json(document);
  });
  return router;
}
