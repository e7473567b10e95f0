/**
 * The hub client's HTTP with many hubs in one process: the global `fetch` against
 * `agentFetch` (clients/hub/src/http.ts), as the hub client calls them (a POST with a JSON body
 * and a 10 s `AbortSignal.timeout`, the answer's `Date` and JSON read). What is measured is the
 * CPU of this process per request, and the connections the server saw; the server runs in a
 * child process of its own, so its work is not counted. Rounds alternate the two.
 *
 *   npm run bench:hub-http            (BENCH_REQUESTS=4000 BENCH_CONCURRENCY=500 BENCH_ROUNDS=5)
 */
import { spawn } from 'node:child_process';
import { get } from 'node:http';
import { agentFetch, type HttpFetch } from '@home-hub-cloud/hub-client';

const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 4000);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 500);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);

/** A server answering every POST as the heartbeat route does (a small JSON body), counting connections. */
const SERVER = `
const http = require('node:http');
let connections = 0;
const server = http.createServer((req, res) => {
  if (req.url === '/connections') { res.end(String(connections)); return; }
  req.resume();
  req.on('end', () => {
    res.writeHead(200, { 'Content-Type': 'application/json; charset=utf-8' });
    res.end('{"success":true,"data":{"uuid":"00000000-0000-4000-8000-000000000000","status":"online"}}');
  });
});
server.on('connection', () => connections++);
server.keepAliveTimeout = 5000;
server.listen(0, '127.0.0.1', () => console.log(server.address().port));
`;

async function startServer(): Promise<{ url: string; connections: () => Promise<number>; stop: () => void }> {
  const child = spawn(process.execPath, ['-e', SERVER], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise<string>((resolve) => child.stdout.once('data', (chunk: Buffer) => resolve(chunk.toString().trim())));
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    // On a connection of its own (counted, hence the - 1 below), not through either pool measured.
    connections: () =>
      new Promise((resolve, reject) => {
        get(`${url}/connections`, { agent: false }, (res) => {
          let text = '';
          res.on('data', (chunk: Buffer) => (text += chunk.toString()));
          res.on('end', () => resolve(Number(text)));
        }).on('error', reject);
      }),
    stop: () => child.kill(),
  };
}

/** CPU µs of this process per request, for REQUESTS requests CONCURRENCY at a time. */
async function run(http: HttpFetch, url: string): Promise<number> {
  const started = process.cpuUsage();
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < REQUESTS) {
      const i = next++;
      const res = await http(`${url}/api/v1/devices/heartbeat/${i}`, {
        method: 'POST',
        headers: { Authorization: 'Bearer x', 'Content-Type': 'application/json' },
        body: '{}',
        signal: AbortSignal.timeout(10_000),
      });
      res.headers.get('Date');
      await res.json();
      if (res.status !== 200) throw new Error(`answered ${res.status}`);
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  const used = process.cpuUsage(started);
  return (used.user + used.system) / REQUESTS;
}

const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? NaN;

async function main(): Promise<void> {
  const server = await startServer();
  const lean = agentFetch();
  const global: HttpFetch = (url, init) => fetch(url, init);
  const cpu = { fetch: [] as number[], agentFetch: [] as number[] };
  const opened = { fetch: [] as number[], agentFetch: [] as number[] };
  try {
    for (let round = 0; round < ROUNDS; round++) {
      for (const [name, http] of [['fetch', global], ['agentFetch', lean]] as const) {
        const before = await server.connections();
        cpu[name].push(await run(http, server.url));
        opened[name].push((await server.connections()) - before - 1);
      }
    }
  } finally {
    lean.close();
    server.stop();
  }
  const result = {
    requests: REQUESTS,
    concurrency: CONCURRENCY,
    rounds: ROUNDS,
    cpuMicrosPerRequest: { fetch: median(cpu.fetch), agentFetch: median(cpu.agentFetch), ratio: Number((median(cpu.agentFetch) / median(cpu.fetch)).toFixed(2)) },
    connectionsOpenedPerRound: { fetch: median(opened.fetch), agentFetch: median(opened.agentFetch) },
    everyRound: { cpu, opened },
  };
  console.log(JSON.stringify(result, (key, v: unknown) => (typeof v === 'number' && key !== 'ratio' ? Math.round(v * 10) / 10 : v), 2));
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
