import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { agentFetch, HubClient, type HubEvent, type HttpFetch, type HttpResponse } from '@home-hub-cloud/hub-client';
import { createUser, GENEROUS_RATE_LIMITS, startTestService, type TestService } from '../support/harness';
import { deviceToken, registerHub } from '../support/tunnel';
import { eventually } from '../support/client-timers';

/**
 * `agentFetch`: the hub client's HTTP for many hubs in one process (the storm bench's fleet,
 * the simulator). It must read the service's answers exactly as the global `fetch` does, and
 * keep its promise of a bounded number of connections.
 */

let service: TestService;
const closers: Array<() => void> = [];

beforeAll(async () => {
  const limits = GENEROUS_RATE_LIMITS.replace(/heartbeat=[^,]+/, 'heartbeat=2/60');
  service = await startTestService('embedded', { RATE_LIMITS: limits });
}, 60_000);
afterEach(() => {
  for (const close of closers.splice(0)) close();
});
afterAll(async () => {
  await service?.stop();
});

interface Read {
  readonly status: number;
  readonly body: unknown;
  readonly retryAfter: string | null;
  readonly contentType: string | null;
  readonly hasDate: boolean;
}

async function read(res: HttpResponse): Promise<Read> {
  return {
    status: res.status,
    body: await res.json().catch(() => 'not json'),
    retryAfter: res.headers.get('Retry-After'),
    contentType: res.headers.get('content-type'),
    hasDate: res.headers.get('Date') !== null,
  };
}

function withoutTimes(value: unknown): unknown {
  return JSON.parse(JSON.stringify(value, (key, v: unknown) => (key === 'timestamp' || key === 'lastSeenAt' || key === 'lastHeartbeat' || key === 'retryAfter' ? '<t>' : v)));
}

test('the service answers agentFetch as it answers fetch: 200, 401 and 429 with Retry-After', async () => {
  const http = agentFetch();
  closers.push(http.close);
  const owner = await createUser(service);
  const hub = await registerHub(service, owner);
  const token = await deviceToken(service, hub, owner);
  const beat = (with_: HttpFetch, bearer: string, uuid = hub.uuid): Promise<HttpResponse> =>
    with_(`${service.baseUrl}/api/v1/devices/heartbeat/${uuid}`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${bearer}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ ipAddress: '10.0.0.2' }),
    });
  const global: HttpFetch = (url, init) => fetch(url, init);
  // The limit is 2 a minute per device: one each, then one each over it.
  const pairs: Array<[Read, Read]> = [];
  for (let i = 0; i < 2; i++) pairs.push([await read(await beat(global, token)), await read(await beat(http, token))]);
  pairs.push([await read(await beat(global, 'not-a-token')), await read(await beat(http, 'not-a-token'))]);
  const [first, second] = pairs[0] ?? [];
  expect(first?.status).toBe(200);
  expect(second?.status).toBe(200);
  expect(pairs[1]?.[0].status).toBe(429);
  expect(pairs[1]?.[1].status).toBe(429);
  expect(pairs[1]?.[1].retryAfter).toMatch(/^\d+$/);
  expect(pairs[2]?.[1].status).toBe(401);
  for (const [viaFetch, viaAgent] of pairs) {
    expect(withoutTimes(viaAgent)).toEqual(withoutTimes(viaFetch));
    expect(viaAgent.hasDate).toBe(true);
  }
});

test('a hub client on agentFetch beats and renews its token through it', async () => {
  const http = agentFetch({ maxSockets: 2 });
  closers.push(http.close);
  const owner = await createUser(service);
  const hub = await registerHub(service, owner);
  let token: string | null = await deviceToken(service, hub, owner);
  const saved: string[] = [];
  const calls: string[] = [];
  const client = new HubClient({
    baseUrl: service.baseUrl,
    uuid: hub.uuid,
    tokens: { load: () => token, save: (t) => void saved.push((token = t)) },
    renewBetween: [0, 0],
    fetch: (url, init) => {
      calls.push(url);
      return http(url, init);
    },
  });
  closers.push(() => client.stop());
  const events: HubEvent[] = [];
  client.on((e) => events.push(e));
  await client.start();
  await eventually(() => events.some((e) => e.type === 'renewed') && events.some((e) => e.type === 'heartbeat' && e.ok), 10_000, 'renewed and beat');
  expect(saved.length).toBeGreaterThan(0);
  expect(client.currentToken).toBe(saved.at(-1));
  expect(calls.some((u) => u.endsWith(`/devices/auth/${hub.uuid}/renew`))).toBe(true);
  expect(events.filter((e) => e.type === 'error')).toEqual([]);
});

describe('against a plain HTTP server', () => {
  let server: Server;
  let base = '';
  let connections = 0;
  const open = new Set<object>();
  let inFlight = 0;
  let mostInFlight = 0;
  let hold: Array<() => void> = [];
  let holding = false;

  beforeAll(async () => {
    server = createServer((req, res) => {
      inFlight++;
      mostInFlight = Math.max(mostInFlight, inFlight);
      const answer = (): void => {
        inFlight--;
        if (req.url === '/big') {
          res.writeHead(200, { 'Content-Type': 'application/json' });
          res.end(`"${'x'.repeat(64 * 1024)}"`);
        } else if (req.url === '/junk') {
          res.writeHead(503, { 'Content-Type': 'text/plain' });
          res.end('oops');
        } else {
          let body = '';
          req.on('data', (c: Buffer) => (body += c.toString()));
          req.on('end', () => {
            res.writeHead(200, { 'Content-Type': 'application/json', 'X-Twice': ['a', 'b'] });
            res.end(JSON.stringify({ echo: body, method: req.method, length: req.headers['content-length'] ?? null }));
          });
        }
      };
      if (holding && req.url === '/hold') hold.push(answer);
      else answer();
    });
    server.on('connection', (socket) => {
      connections++;
      open.add(socket);
      socket.on('close', () => open.delete(socket));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  beforeEach(() => {
    connections = 0;
    mostInFlight = 0;
    inFlight = 0;
    hold = [];
    holding = false;
  });

  test('200 requests at once go over at most maxSockets connections, kept alive, and all are answered', async () => {
    const http = agentFetch({ maxSockets: 4 });
    closers.push(http.close);
    const answers = await Promise.all(
      Array.from({ length: 200 }, (_, i) => http(`${base}/n/${i}`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: `{"i":${i},"é":"ü"}` })),
    );
    const bodies = await Promise.all(answers.map((a) => a.json()));
    expect(answers.every((a) => a.status === 200)).toBe(true);
    expect(bodies[7]).toEqual({ echo: '{"i":7,"é":"ü"}', method: 'POST', length: String(Buffer.byteLength('{"i":7,"é":"ü"}')) });
    expect(answers[0]?.headers.get('x-twice')).toBe('a, b');
    expect(answers[0]?.headers.get('Nope')).toBeNull();
    expect(connections).toBeLessThanOrEqual(4);
    expect(mostInFlight).toBeLessThanOrEqual(4);
  });

  test('by default nothing waits for a connection: 50 requests are at the server at once; then only maxFreeSockets stay open', async () => {
    const http = agentFetch({ maxFreeSockets: 5 });
    closers.push(http.close);
    holding = true;
    const pending = Array.from({ length: 50 }, () => http(`${base}/hold`, { method: 'POST', headers: {} }));
    await eventually(() => hold.length === 50, 5_000, 'all 50 at the server');
    expect(mostInFlight).toBe(50);
    for (const answer of hold.splice(0)) answer();
    const answers = await Promise.all(pending);
    expect(answers.every((a) => a.status === 200)).toBe(true);
    await eventually(() => open.size === 5, 5_000, 'idle connections down to 5');
  });

  test('an abort signal ends a request the server never answers, and frees its connection', async () => {
    const http = agentFetch({ maxSockets: 1 });
    closers.push(http.close);
    holding = true;
    const abort = new AbortController();
    const pending = http(`${base}/hold`, { method: 'POST', headers: {}, signal: abort.signal });
    await eventually(() => hold.length === 1, 5_000, 'request held');
    abort.abort();
    await expect(pending).rejects.toThrow();
    holding = false;
    const next = await http(`${base}/after`, { method: 'POST', headers: {}, body: 'x' });
    expect(next.status).toBe(200);
    await expect(http(`${base}/late`, { method: 'POST', headers: {}, signal: AbortSignal.abort() })).rejects.toBeDefined();
  });

  test('a body that is not JSON is refused by json(), not thrown at the call; a body over the limit is an error', async () => {
    const http = agentFetch({ maxBodyBytes: 1024 });
    closers.push(http.close);
    const junk = await http(`${base}/junk`, { method: 'POST', headers: {} });
    expect(junk.status).toBe(503);
    await expect(junk.json()).rejects.toThrow();
    await expect(http(`${base}/big`, { method: 'POST', headers: {} })).rejects.toThrow(/over 1024 bytes/);
    await expect(http(`ftp://127.0.0.1/x`, { method: 'POST', headers: {} })).rejects.toThrow(/unsupported protocol/);
  });

  test('a server gone: the request fails with an error the client reports', async () => {
    const http = agentFetch();
    closers.push(http.close);
    const gone = createServer();
    await new Promise<void>((resolve) => gone.listen(0, '127.0.0.1', resolve));
    const port = (gone.address() as AddressInfo).port;
    await new Promise<void>((resolve) => gone.close(() => resolve()));
    await expect(http(`http://127.0.0.1:${port}/x`, { method: 'POST', headers: {} })).rejects.toThrow(/ECONNREFUSED/);
  });
});
