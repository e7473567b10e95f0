import fc from 'fast-check';
import type { z } from 'zod';
import { createApp } from '../../src/api/app';
import { documentedRoutes, type RouteDoc } from '../../src/api/openapi-registry';
import { TUNNEL_ERROR_CODES, type TunnelError } from '../../src/tunnel/events';
import { appMessage, deviceMessage, subscribeRequest } from '../../src/tunnel/schemas';
import { brokenObject, hostileValue, jsonSchemaOf, validValue, withHints } from '../support/schema-arbitrary';
import { createUser, CRM_KEY, startTestService, type TestService } from '../support/harness';
import { connect, deviceToken, registerHub, type Hub, type Probe } from '../support/tunnel';

/**
 * Fuzzing from the API's own schemas (fast-check): for every documented route, requests
 * built from the zod schemas that validate it, valid and broken (wrong types, boundaries,
 * huge and deep values, operator objects, `__proto__` keys, unicode, malformed JSON), with
 * good, bad and no credentials; and every tunnel event, valid and hostile, from an app and
 * from a hub. Properties: never a 5xx; every error in the body shape of decisions §7; no
 * stack trace or internal message; a request the validating schemas accept is never
 * answered 400 (INVALID_PAYLOAD on the tunnel). A failure prints fast-check's seed and the
 * shrunk request; keep it below as a regression case.
 */

void createApp; // every route module registers its documentation when the app is assembled

const SEED = 20261124;
const RUNS_PER_ROUTE = 12;
const REQUEST_TIMEOUT_MS = 15_000;
const STACK_TRACE = /(\n\s+at\s)|(\.ts:\d+)|(node_modules)|(TypeError|ReferenceError|SyntaxError: Unexpected)/;

/** A 400 the spec gives a well-formed request (decisions §3: an unknown reset token), by route. */
const SEMANTIC_400: Readonly<Record<string, string>> = { 'post /auth/password-reset/confirm': 'Invalid or expired reset token' };

let service: TestService;
let user: Awaited<ReturnType<typeof createUser>>;
let hub: Hub;
let hubToken: string;

beforeAll(async () => {
  service = await startTestService('embedded');
  user = await createUser(service);
  hub = await registerHub(service, user);
  hubToken = await deviceToken(service, hub, user);
}, 60_000);
afterAll(async () => {
  await service?.stop();
});

type Credentials = 'good' | 'garbage' | 'none';

function headersFor(route: RouteDoc, credentials: Credentials): Record<string, string> {
  if (credentials === 'none') return {};
  if (credentials === 'garbage') return route.security === 'internalApiKey' ? { 'X-Internal-Api-Key': 'nope' } : { Authorization: 'Bearer a.b.c' };
  switch (route.security) {
    case 'access':
      return { Authorization: `Bearer ${user.accessToken}` };
    case 'device':
      return { Authorization: `Bearer ${hubToken}` };
    case 'internalApiKey':
      return { 'X-Internal-Api-Key': CRM_KEY };
    default:
      return {};
  }
}

function pathFor(route: RouteDoc, params: unknown): string {
  const values = (params ?? {}) as Record<string, unknown>;
  return route.path.replace(/:([A-Za-z]+)/g, (_m, name: string) => {
    const value = values[name];
    return encodeURIComponent(typeof value === 'string' ? value : JSON.stringify(value ?? 'x'));
  });
}

function queryFor(query: unknown): string {
  if (query === null || typeof query !== 'object') return '';
  const pairs = Object.entries(query as Record<string, unknown>).map(([k, v]): [string, string] => [k, typeof v === 'string' ? v : String(JSON.stringify(v))]);
  return pairs.length === 0 ? '' : `?${new URLSearchParams(pairs).toString()}`;
}

/** A body as sent: JSON of a value, or raw text (malformed JSON, a wrong content type). */
type Body = { readonly json: unknown } | { readonly raw: string; readonly contentType: string } | undefined;

interface Outcome {
  readonly status: number;
  readonly body: unknown;
  readonly text: string;
}

async function send(method: string, path: string, headers: Record<string, string>, body: Body): Promise<Outcome> {
  const init: RequestInit = { method, headers: { ...headers }, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) };
  if (body !== undefined && 'json' in body) {
    init.headers = { ...headers, 'Content-Type': 'application/json' };
    init.body = JSON.stringify(body.json) ?? 'null';
  } else if (body !== undefined) {
    init.headers = { ...headers, 'Content-Type': body.contentType };
    init.body = body.raw;
  }
  const res = await fetch(`${service.baseUrl}/api/v1${path}`, init);
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = text.length > 0 ? JSON.parse(text) : null;
  } catch {
    // not JSON: checked as text
  }
  return { status: res.status, body: parsed, text };
}

/** The checks every answer passes, whatever was sent. */
function checkAnswer(outcome: Outcome): void {
  expect(outcome.status).toBeGreaterThanOrEqual(200);
  expect(outcome.status).toBeLessThan(500);
  expect(outcome.text).not.toMatch(STACK_TRACE);
  if (outcome.status < 400) return;
  expect(typeof outcome.body).toBe('object');
  const body = (outcome.body ?? {}) as Record<string, unknown>;
  if (outcome.status === 409 && body.code === 'CONFLICT') {
    // sync-customer's 409 has the interface's own shape.
    expect(body).toEqual({ success: false, error: expect.any(String), code: 'CONFLICT' });
    return;
  }
  expect(body.statusCode).toBe(outcome.status);
  expect(typeof body.error).toBe('string');
  expect(typeof body.message === 'string' || (Array.isArray(body.message) && body.message.every((m) => typeof m === 'string'))).toBe(true);
}

const routes = (): RouteDoc[] => [...documentedRoutes()];
const named = (list: RouteDoc[]): (readonly [string, RouteDoc])[] => list.map((route) => [`${route.method.toUpperCase()} ${route.path}`, route] as const);

const malformedBody: fc.Arbitrary<Body> = fc.oneof(
  fc.constantFrom('{"a":', '{"__proto__":{"x":1}', 'nul', '[1,2', '\u0000', '{"a":1}}').map((raw) => ({ raw, contentType: 'application/json' })),
  fc.constantFrom('a=1&b=2', '<xml/>').map((raw) => ({ raw, contentType: 'text/plain' })),
);

function brokenOrValid(schema: z.ZodObject | undefined): fc.Arbitrary<unknown> {
  if (schema === undefined) return fc.constant(undefined);
  const json = jsonSchemaOf(schema);
  return fc.oneof(validValue(json), brokenObject(json));
}

describe('HTTP routes fuzzed from their schemas', () => {
  test('every route is covered', () => {
    expect(routes().length).toBeGreaterThanOrEqual(20);
  });

  test.each(named(routes()))('%s: broken input never gets a 5xx, always the error shape', async (_name, route) => {
    const body: fc.Arbitrary<Body> =
      route.body === undefined
        ? fc.constant(undefined)
        : fc.oneof(brokenObject(jsonSchemaOf(route.body)).map((json): Body => ({ json })), hostileValue.map((json): Body => ({ json })), malformedBody);
    const query = brokenOrValid(route.query).map(queryFor);
    await fc.assert(
      fc.asyncProperty(brokenOrValid(route.params), query, body, fc.constantFrom<Credentials>('good', 'garbage', 'none'), async (p, q, b, credentials) => {
        checkAnswer(await send(route.method.toUpperCase(), pathFor(route, p) + q, headersFor(route, credentials), b));
      }),
      { seed: SEED, numRuns: RUNS_PER_ROUTE, endOnFailure: true },
    );
  }, 120_000);

  /** Valid parts, from the schemas, with the real device and user where a route names them. */
  function validPart(schema: z.ZodType | undefined, inPath = false): fc.Arbitrary<unknown> {
    if (schema === undefined) return fc.constant(undefined);
    const pathHints = { id: fc.oneof(fc.constant(hub.uuid), fc.uuid()), uuid: fc.constant(hub.uuid), userId: fc.oneof(fc.constant(user.id), fc.uuid()) };
    return validValue(jsonSchemaOf(schema), 0, withHints(inPath ? pathHints : {})).map((value) => (schema.safeParse(value).success ? value : null));
  }

  test.each(named(routes()))('%s: a request the validating schemas accept is never answered 400', async (_name, route) => {
    // DELETE of the hub itself would leave nothing to fuzz the other routes against.
    const params =
      route.method === 'delete'
        ? validPart(route.params, true).map((p) => (p === null ? null : { ...(p as object), id: '00000000-0000-4000-8000-000000000000' }))
        : validPart(route.params, true);
    await fc.assert(
      fc.asyncProperty(params, validPart(route.query), validPart(route.body), async (p, q, b) => {
        fc.pre(p !== null && q !== null && b !== null);
        const body: Body = route.body === undefined ? undefined : { json: b };
        const outcome = await send(route.method.toUpperCase(), pathFor(route, p) + queryFor(q), headersFor(route, 'good'), body);
        checkAnswer(outcome);
        if (outcome.status === 400) expect((outcome.body as { message?: unknown }).message).toBe(SEMANTIC_400[`${route.method} ${route.path}`]);
      }),
      { seed: SEED, numRuns: RUNS_PER_ROUTE, endOnFailure: true },
    );
  }, 120_000);

  test('regression (seed 20261124, GET /devices): a 70 kB query string is answered in the error shape, not a bare 431', async () => {
    const outcome = await send('GET', `/devices?page=${'x'.repeat(70_000)}`, headersFor(routes()[0] as RouteDoc, 'none'), undefined);
    expect(outcome.status).toBe(431);
    expect(outcome.body).toEqual({ statusCode: 431, message: 'Request Header Fields Too Large', error: 'Request Header Fields Too Large' });
  });
});

type Ack = { success?: boolean; error?: TunnelError } | 'no-ack';

async function emitWithAck(socket: Probe, event: string, payload: unknown): Promise<Ack> {
  const timed = socket.socket.timeout(5000) as unknown as { emitWithAck(e: string, p: unknown): Promise<Ack> };
  return timed.emitWithAck(event, payload).catch((): Ack => 'no-ack');
}

function checkTunnelErrors(socket: Probe, ack: Ack): void {
  const errors = socket.all<TunnelError>('tunnel:error');
  if (typeof ack === 'object' && ack.error !== undefined) errors.push(ack.error);
  for (const error of errors) {
    expect((TUNNEL_ERROR_CODES as readonly string[]).includes(error.code)).toBe(true);
    expect(typeof error.message).toBe('string');
    expect(error.message).not.toMatch(STACK_TRACE);
  }
  expect(socket.socket.connected).toBe(true);
}

describe('tunnel events fuzzed', () => {
  const events = ['tunnel:subscribe', 'tunnel:unsubscribe', 'tunnel:message', 'tunnel:bogus'] as const;
  let app: Probe;
  let device: Probe;
  let owner: Awaited<ReturnType<typeof createUser>>;
  let ownHub: Hub;
  // An owner and hub of their own: the HTTP fuzzing above may have logged the first user out.
  beforeAll(async () => {
    owner = await createUser(service);
    ownHub = await registerHub(service, owner);
    app = await connect(service, owner.accessToken);
    device = await connect(service, await deviceToken(service, ownHub, owner));
  });
  afterAll(() => {
    app?.close();
    device?.close();
  });

  test('hostile payloads on every event, from an app and from a hub: answered with the error shape, the sockets keep working', async () => {
    await fc.assert(
      fc.asyncProperty(fc.boolean(), fc.constantFrom(...events), hostileValue, fc.boolean(), async (fromApp, event, payload, withAck) => {
        const socket = fromApp ? app : device;
        let ack: Ack = 'no-ack';
        if (withAck) {
          ack = await emitWithAck(socket, event, payload);
          // An unknown event has no handler, so no ack; every known one answers.
          if (event !== 'tunnel:bogus') expect(typeof ack).toBe('object');
        } else {
          (socket.socket as unknown as { emit(e: string, p: unknown): void }).emit(event, payload);
        }
        checkTunnelErrors(socket, ack);
      }),
      { seed: SEED, numRuns: 60, endOnFailure: true },
    );
    expect((await send('GET', '/users/me', { Authorization: `Bearer ${owner.accessToken}` }, undefined)).status).toBe(200);
  }, 120_000);

  const hints = (): ReturnType<typeof withHints> => withHints({ deviceUuid: fc.constant(ownHub.uuid), to: fc.constant(owner.id) });
  const validFrom = (schema: z.ZodType): fc.Arbitrary<unknown> => validValue(jsonSchemaOf(schema), 0, hints()).map((v) => (schema.safeParse(v).success ? v : null));

  test.each([
    ['app tunnel:subscribe', 'app', 'tunnel:subscribe', subscribeRequest],
    ['app tunnel:unsubscribe', 'app', 'tunnel:unsubscribe', subscribeRequest],
    ['app tunnel:message', 'app', 'tunnel:message', appMessage],
    ['hub tunnel:message', 'hub', 'tunnel:message', deviceMessage],
  ] as const)('%s: a payload its schema accepts is acknowledged as a success', async (_name, who, event, schema) => {
    await fc.assert(
      fc.asyncProperty(validFrom(schema), async (payload) => {
        fc.pre(payload !== null);
        const socket = who === 'app' ? app : device;
        const ack = await emitWithAck(socket, event, payload);
        checkTunnelErrors(socket, ack);
        expect(ack).toEqual(expect.objectContaining({ success: true }));
      }),
      { seed: SEED, numRuns: 20, endOnFailure: true },
    );
  }, 120_000);
});
