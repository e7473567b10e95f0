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

function parametersOf(location: 'path' | 'query', object: z.ZodObject | undefined): JsonSchema[] {
  if (object === undefined) return [];
  const schema = schemaOf(object);
  const properties = (schema.properties ?? {}) as Record<string, JsonSchema>;
  const required = new Set((schema.required ?? []) as string[]);
  return Object.entries(properties).map(([name, property]) => ({
    name,
    in: location,
    required: location === 'path' || required.has(name),
    schema: property,
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
    message: { oneOf: [{ type: 'string' }, { type: 'array', items: { type: 'string' } }] },
    error: { type: 'string' },
    details: { type: 'array', items: { type: 'object', properties: { field: { type: 'string' }, message: { type: 'string' } } } },
    retryAfter: { type: 'integer' },
  },
};

/** OpenAPI 3.1, generated from the zod schemas that validate the requests. */
export function buildOpenApiDocument(): JsonSchema {
  const paths: Record<string, Record<string, JsonSchema>> = {};
  for (const route of documentedRoutes()) {
    const path = route.path.replace(/:([A-Za-z]+)/g, '{$1}');
    const responses: Record<string, JsonSchema> = {};
    for (const [status, response] of Object.entries(route.responses)) {
      const code = Number(status);
      const isError = code >= 400;
      const schema = response.schema !== undefined ? schemaOf(response.schema) : isError ? { $ref: '#/components/schemas/Error' } : undefined;
      responses[status] = {
        description: response.description || statusText(code),
        ...(schema !== undefined ? { content: { 'application/json': { schema } } } : {}),
      };
    }
    if (route.security !== 'none' && responses['401'] === undefined) {
      responses['401'] = { description: 'Missing, invalid or expired credentials', content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } };
    }
    responses['429'] ??= { description: 'Rate limit exceeded', content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } };
    const operation: JsonSchema = {
      tags: [route.tag],
      summary: route.summary,
      operationId: `${route.method}${route.path.replace(/[/:-]+(\w)/g, (_m, c: string) => c.toUpperCase())}`,
      security: SECURITY[route.security],
      parameters: [...parametersOf('path', route.params), ...parametersOf('query', route.query)],
      responses,
      ...(route.body !== undefined
        ? { requestBody: { required: true, content: { 'application/json': { schema: schemaOf(route.body) } } } }
        : {}),
    };
    paths[path] = { ...(paths[path] ?? {}), [route.method]: operation };
  }
  return {
    openapi: '3.1.0',
    info: { title: 'Home Hub Cloud API', version: '1.0.0' },
    servers: [{ url: '/api/v1' }],
    paths,
    components: {
      schemas: { Error: ERROR_BODY },
      securitySchemes: {
        accessToken: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' },
        deviceToken: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'A device token from POST /devices/auth/{uuid}' },
        internalApiKey: { type: 'apiKey', in: 'header', name: 'X-Internal-Api-Key' },
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
