import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { buildOpenApiDocument } from '../../src/api/routes/openapi';
import { createApp } from '../../src/api/app';

/**
 * The OpenAPI document as input for client generators: named components, numeric query
 * parameters, every response body and header. `openapi-typescript` generates types from
 * it and a small client written against them type-checks; `@redocly/cli lint` passes.
 */

// Every route module registers its documentation when the app is assembled.
void createApp;

const ROOT = resolve(__dirname, '../..');
const BIN = join(ROOT, 'node_modules', '.bin');

interface Doc {
  paths: Record<string, Record<string, { parameters: Array<{ name: string; in: string; schema: { type?: string } }>; requestBody?: { required: boolean }; responses: Record<string, { headers?: Record<string, unknown>; content?: { 'application/json': { schema: { $ref?: string } } } }> }>>;
  components: { schemas: Record<string, unknown>; headers: Record<string, unknown> };
}

describe('the OpenAPI document for client generators', () => {
  let dir: string;
  let doc: Doc;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'hhc-openapi-'));
    doc = buildOpenApiDocument() as unknown as Doc;
    writeFileSync(join(dir, 'openapi.json'), JSON.stringify(doc, null, 2));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  test('paging parameters are integers; the heartbeat body is optional', () => {
    const types = (path: string, method: string) => Object.fromEntries(doc.paths[path]?.[method]?.parameters.filter((p) => p.in === 'query').map((p) => [p.name, p.schema.type]) ?? []);
    expect(types('/devices', 'get')).toMatchObject({ page: 'integer', limit: 'integer' });
    expect(types('/devices/{id}/history', 'get')).toMatchObject({ after: 'integer', limit: 'integer', heartbeatAfter: 'integer' });
    expect(doc.paths['/devices/heartbeat/{uuid}']?.post?.requestBody?.required).toBe(false);
    expect(doc.paths['/devices/register']?.post?.requestBody?.required).toBe(true);
  });

  test('every response names its body and the request-id and rate-limit headers; 429 adds Retry-After', () => {
    for (const [path, methods] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(methods)) {
        for (const [status, response] of Object.entries(op.responses)) {
          const where = `${method} ${path} ${status}`;
          expect({ where, headers: Object.keys(response.headers ?? {}) }).toEqual({
            where,
            headers: expect.arrayContaining(['X-Request-Id', 'X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset', ...(status === '429' ? ['Retry-After'] : [])]),
          });
          if (status !== '204') expect({ where, ref: response.content?.['application/json'].schema.$ref }).toEqual({ where, ref: expect.stringMatching(/^#\/components\/schemas\//) });
        }
        expect(Object.keys(op.responses)).toEqual(expect.arrayContaining(['429', '500']));
      }
    }
    const sync = doc.paths['/auth/sync-customer']?.post?.responses ?? {};
    expect(Object.keys(sync)).toEqual(expect.arrayContaining(['200', '201', '400', '401', '409', '413', '415', '429', '500']));
    expect(doc.paths['/health/ready']?.get?.responses['503']?.content).toBeDefined();
  });

  test('openapi-typescript generates types that a small client type-checks against', () => {
    execFileSync(join(BIN, 'openapi-typescript'), [join(dir, 'openapi.json'), '-o', join(dir, 'api.d.ts')], { stdio: 'pipe' });
    writeFileSync(
      join(dir, 'client.ts'),
      `import type { paths, components } from './api';
type Json<P extends keyof paths, M extends keyof paths[P], S extends number> =
  paths[P][M] extends { responses: { [K in S]: { content: { 'application/json': infer B } } } } ? B : never;
type ListQuery = NonNullable<paths['/devices']['get']['parameters']['query']>;
const query: ListQuery = { page: 2, limit: 50, sort: 'name', order: 'asc' };
const login: Json<'/auth/login', 'post', 201> = { accessToken: 'a', refreshToken: 'r', expiresIn: 900, user: { id: '00000000-0000-4000-8000-000000000000', email: 'a@b.c', firstName: 'A', lastName: 'B', role: 'user' } };
const synced: Json<'/auth/sync-customer', 'post', 201> = { success: true, created: true, user: { id: 'x', sync_id: 1, email: 'a@b.c', firstName: 'A', lastName: 'B', isActive: true, createdAt: '2026-01-01T00:00:00.000Z' } };
const conflict: Json<'/auth/sync-customer', 'post', 409> = { success: false, error: 'Email already exists', code: 'CONFLICT' };
const limited: components['schemas']['RateLimited'] = { statusCode: 429, message: 'Rate limit exceeded', error: 'Too Many Requests', retryAfter: 3 };
const beat: NonNullable<paths['/devices/heartbeat/{uuid}']['post']['requestBody']> | undefined = undefined;
// @ts-expect-error page is a number, not a string
const wrong: ListQuery = { page: '2' };
export { query, login, synced, conflict, limited, beat, wrong };
`,
    );
    execFileSync(join(BIN, 'tsc'), ['--noEmit', '--strict', '--skipLibCheck', '--target', 'es2022', '--moduleResolution', 'node', join(dir, 'client.ts')], { stdio: 'pipe' });
  }, 60_000);

  test('@redocly/cli lint passes', () => {
    const out = execFileSync(join(BIN, 'redocly'), ['lint', join(dir, 'openapi.json'), '--config', join(ROOT, 'redocly.yaml'), '--format', 'stylish'], { stdio: 'pipe', encoding: 'utf8', env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' } });
    // Exit code 0 (execFileSync throws otherwise), and not even a warning left.
    expect(out).not.toMatch(/\b(error|warning)\b/);
  }, 60_000);
});
