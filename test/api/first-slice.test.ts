import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startStack, type Stack } from '../support/stack';
import { startServerProcess, TEST_SECRETS, type ServerProcess, PROCESS_TEST_TIMEOUT_MS } from '../support/server';

type Mode = 'embedded' | 'distributed';

const CRM_KEY = 'test-crm-key-1';

function customer(id: number, overrides: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    id,
    user_id: 7,
    company_name: 'Acme',
    first_name: 'Ada',
    last_name: 'Lovelace',
    email: `ada.${id}@example.com`,
    user_type: 1,
    mrr: 99.5,
    active: true,
    contract_language: 'de',
    created_by: 3,
    status: 1,
    ...overrides,
  };
}

async function sync(base: string, body: unknown, key: string = CRM_KEY): Promise<Response> {
  return fetch(`${base}/api/v1/auth/sync-customer`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'X-Internal-Api-Key': key },
    body: JSON.stringify(body),
  });
}

describe.each<Mode>(['embedded', 'distributed'])('first slice end to end (%s mode)', (mode) => {
  let stack: Stack | undefined;
  let dataDir: string;
  let env: Record<string, string>;
  let server: ServerProcess;

  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'hhc-slice-'));
    if (mode === 'distributed') {
      stack = await startStack();
      env = { ...TEST_SECRETS, ...stack.env };
    } else {
      env = { DATA_DIR: dataDir, INTERNAL_API_KEYS: TEST_SECRETS.INTERNAL_API_KEYS };
    }
    server = await startServerProcess(env);
  }, PROCESS_TEST_TIMEOUT_MS);

  afterAll(async () => {
    await server?.stop();
    await stack?.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  test('GET /health answers ok with the service name and a request id', async () => {
    const res = await fetch(`${server.baseUrl}/api/v1/health`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: 'ok', service: 'home-hub-cloud' });
    expect(res.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
  });

  test('GET /health/ready reports every dependency', async () => {
    const res = await fetch(`${server.baseUrl}/api/v1/health/ready`);
    const body = (await res.json()) as { status: string; checks: Record<string, { status: string }> };
    expect(res.status).toBe(200);
    expect(body.status).toBe('ok');
    const expected = mode === 'distributed' ? ['credentials', 'eventStore', 'projector', 'readStore', 'redis'] : ['credentials', 'eventStore', 'projector', 'readStore'];
    expect(Object.keys(body.checks).sort()).toEqual(expected);
    for (const name of expected) expect(body.checks[name]?.status).toBe('ok');
  });

  test('sync-customer creates a user (201) and then updates it (200)', async () => {
    const created = await sync(server.baseUrl, customer(1001));
    expect(created.status).toBe(201);
    expect(created.headers.get('x-request-id')).toBeTruthy();
    const body = (await created.json()) as { success: boolean; created: boolean; user: Record<string, unknown> };
    expect(body.success).toBe(true);
    expect(body.created).toBe(true);
    expect(body.user).toEqual({
      id: expect.stringMatching(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/),
      sync_id: 1001,
      email: 'ada.1001@example.com',
      firstName: 'Ada',
      lastName: 'Lovelace',
      isActive: true,
      createdAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
    });

    const updated = await sync(server.baseUrl, customer(1001, { first_name: 'Augusta', active: false }));
    expect(updated.status).toBe(200);
    const again = (await updated.json()) as { created: boolean; user: Record<string, unknown> };
    expect(again.created).toBe(false);
    expect(again.user).toMatchObject({ id: body.user.id, firstName: 'Augusta', isActive: false, createdAt: body.user.createdAt });
  });

  test('a wrong or missing API key is 401 Invalid API key', async () => {
    const wrong = await sync(server.baseUrl, customer(1002), 'not-a-key');
    expect(wrong.status).toBe(401);
    expect(await wrong.json()).toEqual({ statusCode: 401, message: 'Invalid API key', error: 'Unauthorized' });
    const missing = await fetch(`${server.baseUrl}/api/v1/auth/sync-customer`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(customer(1002)),
    });
    expect(missing.status).toBe(401);
    expect(missing.headers.get('x-request-id')).toBeTruthy();
  });

  test('the second configured key is accepted too', async () => {
    const res = await sync(server.baseUrl, customer(1003), 'test-crm-key-2');
    expect(res.status).toBe(201);
  });

  test('an e-mail held by another customer is 409 in the CRM conflict shape', async () => {
    expect((await sync(server.baseUrl, customer(1004, { email: 'shared@example.com' }))).status).toBe(201);
    const conflict = await sync(server.baseUrl, customer(1005, { email: 'Shared@Example.com' }));
    expect(conflict.status).toBe(409);
    const body = (await conflict.json()) as Record<string, unknown>;
    expect(body).toEqual({ success: false, error: expect.any(String), code: 'CONFLICT' });
  });

  test('validation failures are 400 with a message array and details', async () => {
    const res = await sync(server.baseUrl, { id: 'x', first_name: '', email: 'not-an-email', active: 'yes' });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { statusCode: number; error: string; message: string[]; details: { field: string; message: string }[] };
    expect(body.statusCode).toBe(400);
    expect(body.error).toBe('Bad Request');
    expect(body.message).toEqual(expect.arrayContaining(['email must be an email', 'first_name should not be empty', 'last_name should not be empty']));
    expect(body.details).toEqual(expect.arrayContaining([{ field: 'email', message: 'email must be an email' }]));
  });

  test('an operator object where a string belongs is a 400, never a query', async () => {
    const res = await sync(server.baseUrl, customer(1006, { email: { $gt: '' } }));
    expect(res.status).toBe(400);
  });

  test('malformed JSON is 400, a non-JSON body is 415, unknown routes are 404 JSON', async () => {
    const malformed = await fetch(`${server.baseUrl}/api/v1/auth/sync-customer`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'X-Internal-Api-Key': CRM_KEY },
      body: '{"id": 1,',
    });
    expect(malformed.status).toBe(400);
    expect(((await malformed.json()) as { statusCode: number }).statusCode).toBe(400);

    const text = await fetch(`${server.baseUrl}/api/v1/auth/sync-customer`, {
      method: 'POST',
      headers: { 'Content-Type': 'text/plain', 'X-Internal-Api-Key': CRM_KEY },
      body: 'hello',
    });
    expect(text.status).toBe(415);

    const unknown = await fetch(`${server.baseUrl}/api/v1/nothing-here`);
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toEqual({ statusCode: 404, message: 'Cannot GET /api/v1/nothing-here', error: 'Not Found' });
    expect(unknown.headers.get('x-request-id')).toBeTruthy();
  });

  test('a body over 64 KiB is 413', async () => {
    const res = await sync(server.baseUrl, customer(1007, { company_name: 'x'.repeat(70 * 1024) }));
    expect(res.status).toBe(413);
  });

  test('a synced user is still there after a restart', async () => {
    const first = await sync(server.baseUrl, customer(1010, { email: 'durable@example.com' }));
    expect(first.status).toBe(201);
    const { user } = (await first.json()) as { user: { id: string; createdAt: string } };

    expect(await server.stop()).toBe(0);
    server = await startServerProcess(env);

    const again = await sync(server.baseUrl, customer(1010, { email: 'durable@example.com' }));
    expect(again.status).toBe(200);
    const body = (await again.json()) as { created: boolean; user: { id: string; createdAt: string } };
    expect(body.created).toBe(false);
    expect(body.user.id).toBe(user.id);
    expect(body.user.createdAt).toBe(user.createdAt);
    // The e-mail reservation survived as well.
    const taken = await sync(server.baseUrl, customer(1011, { email: 'durable@example.com' }));
    expect(taken.status).toBe(409);
  }, PROCESS_TEST_TIMEOUT_MS);
});
