import { api, startTestService, type TestService } from '../support/harness';

interface OpenApiDoc {
  openapi: string;
  paths: Record<string, Record<string, { requestBody?: { content: { 'application/json': { schema: { required?: string[] } } } }; responses: Record<string, unknown>; security: unknown[] }>>;
}

const EXPECTED: ReadonlyArray<[string, string]> = [
  ['post', '/auth/login'],
  ['post', '/auth/refresh'],
  ['post', '/auth/logout'],
  ['post', '/auth/sync-customer'],
  ['post', '/auth/password-reset/request'],
  ['post', '/auth/password-reset/confirm'],
  ['get', '/users/me'],
  ['post', '/devices/register'],
  ['get', '/devices'],
  ['get', '/devices/{id}'],
  ['put', '/devices/{id}'],
  ['delete', '/devices/{id}'],
  ['post', '/devices/{id}/link'],
  ['delete', '/devices/{id}/users/{userId}'],
  ['post', '/devices/auth/{uuid}'],
  ['post', '/devices/heartbeat/{uuid}'],
  ['get', '/health'],
  ['get', '/health/ready'],
];

describe('GET /api/v1/openapi.json', () => {
  let service: TestService;
  let doc: OpenApiDoc;

  beforeAll(async () => {
    service = await startTestService('embedded');
    const res = await api(service, 'GET', '/openapi.json');
    expect(res.status).toBe(200);
    doc = res.body as OpenApiDoc;
  });
  afterAll(() => service.stop());

  test('is OpenAPI 3.1 and documents every endpoint of the interface', () => {
    expect(doc.openapi).toBe('3.1.0');
    for (const [method, path] of EXPECTED) {
      expect({ method, path, documented: doc.paths[path]?.[method] !== undefined }).toEqual({ method, path, documented: true });
    }
  });

  test('request bodies come from the validating zod schemas, named in components', () => {
    const sync = doc.paths['/auth/sync-customer']?.post;
    const ref = (sync?.requestBody?.content['application/json'].schema as { $ref?: string }).$ref ?? '';
    expect(ref).toMatch(/^#\/components\/schemas\/\w+$/);
    const schema = (doc as unknown as { components: { schemas: Record<string, { required?: string[] }> } }).components.schemas[ref.split('/').at(-1) ?? ''];
    expect(schema?.required).toEqual(expect.arrayContaining(['id', 'first_name', 'last_name', 'email', 'active']));
  });

  test('error responses are documented, including 401 on authenticated routes and 429 everywhere', () => {
    for (const [method, path] of EXPECTED) {
      const op = doc.paths[path]?.[method];
      expect(op?.responses['429']).toBeDefined();
      if (op !== undefined && op.security.length > 0) expect(op.responses['401']).toBeDefined();
    }
  });
});
