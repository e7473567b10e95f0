/**
 * HTTP for many hubs in one process (a fleet simulator, a gateway bridging many devices):
 * the part of `fetch` the hub client uses, over `node:http`/`node:https` with one keep-alive
 * agent that keeps a bounded number of idle connections.
 *
 * A hub on its own device should keep the default (the global `fetch`). Thousands of hubs in
 * one process pay for what `fetch` does per request (a Request and a Response object, a body
 * stream teed for redirects, an abort signal made transferable) and undici's pool keeps every
 * connection it opened for a burst, each one a file descriptor on both sides. Measured in the
 * reconnect storm's fleet (bench/README.md): about 40 % of the fleet's CPU was `fetch`'s own.
 *
 * Requests are not queued behind a small number of connections by default: each hub's request
 * goes out at once, as it would from its own device. A queue in front of a slow service is a
 * queue whose every request outwaits its timeout (seen in the storm: ten thousand heartbeats
 * queued behind 64 connections, none answered in its 10 s).
 */
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';

/** What the hub client asks of an HTTP request. */
export interface HttpRequestInit {
  readonly method: string;
  readonly headers: Record<string, string>;
  readonly body?: string;
  readonly signal?: AbortSignal;
}

/** What the hub client reads of an answer. */
export interface HttpResponse {
  readonly status: number;
  readonly headers: { get(name: string): string | null };
  json(): Promise<unknown>;
}

/** The part of `fetch` the hub client uses (the global `fetch` is one). */
export type HttpFetch = (url: string, init: HttpRequestInit) => Promise<HttpResponse>;

export interface AgentFetchOptions {
  /** Connections to one service at most; requests beyond wait for one (default: no limit). */
  readonly maxSockets?: number;
  /** Idle connections kept for the next requests; the others are closed once answered (default 256). */
  readonly maxFreeSockets?: number;
  /** The local address connections are made from. */
  readonly localAddress?: string;
  /** Largest answer body read, bytes (default 1 MiB); a larger one is an error. */
  readonly maxBodyBytes?: number;
}

/** Answer bodies are UTF-8, as fetch's json() reads them: a byte order mark dropped, bytes that are not UTF-8 as U+FFFD. */
const utf8 = new TextDecoder();

function headerOf(message: IncomingMessage, name: string): string | null {
  // Every value of a repeated header, joined as fetch's Headers.get joins them (`message.headers`
  // keeps only the first of some, Retry-After among them).
  return message.headersDistinct[name.toLowerCase()]?.join(', ') ?? null;
}

/**
 * The requests waiting on each abort signal, behind one listener per signal: one signal may be
 * shared by thousands of requests at once, as fetch allows, and a listener each would warn
 * (MaxListenersExceededWarning) from the eleventh on.
 */
const waitingOn = new WeakMap<AbortSignal, { readonly aborts: Set<() => void>; readonly fire: () => void }>();

/** Calls `abort` once `signal` aborts; the returned function stops waiting. */
function whenAborted(signal: AbortSignal, abort: () => void): () => void {
  let waiting = waitingOn.get(signal);
  if (waiting === undefined) {
    const aborts = new Set<() => void>();
    const fire = (): void => {
      waitingOn.delete(signal);
      for (const each of [...aborts]) each();
    };
    waiting = { aborts, fire };
    waitingOn.set(signal, waiting);
    signal.addEventListener('abort', fire, { once: true });
  }
  const { aborts, fire } = waiting;
  aborts.add(abort);
  return () => {
    aborts.delete(abort);
    if (aborts.size === 0 && waitingOn.get(signal)?.fire === fire) {
      waitingOn.delete(signal);
      signal.removeEventListener('abort', fire);
    }
  };
}

/**
 * An idle connection is closed after this long (fetch's own default), or a second before the
 * server said it closes it (`Keep-Alive: timeout=N`; node's agent reads that hint only when it
 * has a timeout of its own). A connection the server is closing as a request goes out on it
 * loses the request; a load balancer closes idle connections without saying when.
 */
const IDLE_MS = 4000;

/**
 * An `HttpFetch` over one keep-alive agent (`maxFreeSockets` idle connections, `maxSockets` in all).
 * Unlike fetch, it follows no redirect (the answer is the redirect) and asks for no compression.
 * `close()` ends the requests in flight and refuses later ones.
 */
export function agentFetch(options: AgentFetchOptions = {}): HttpFetch & { readonly close: () => void } {
  const agentOptions = {
    keepAlive: true,
    maxSockets: options.maxSockets ?? Infinity,
    maxFreeSockets: options.maxFreeSockets ?? 256,
    // For idle connections only: node's agent closes a connection on its timeout only while idle.
    timeout: IDLE_MS,
    ...(options.localAddress !== undefined ? { localAddress: options.localAddress } : {}),
  };
  const plain = new HttpAgent(agentOptions);
  const secure = new HttpsAgent(agentOptions);
  const maxBody = options.maxBodyBytes ?? 1024 * 1024;
  /** How to end each request not settled yet (its signal's abort, or close()). */
  const unsettled = new Set<(reason: unknown) => void>();
  let closed = false;

  const send = (url: string, init: HttpRequestInit): Promise<HttpResponse> =>
    new Promise((resolve, reject) => {
      if (closed) return reject(new Error('agentFetch closed'));
      const target = new URL(url);
      const tls = target.protocol === 'https:';
      if (!tls && target.protocol !== 'http:') return reject(new TypeError(`unsupported protocol ${target.protocol}`));
      const signal = init.signal;
      if (signal?.aborted === true) return reject(signal.reason);
      const headers: Record<string, string | number> = { ...init.headers };
      if (init.body !== undefined) headers['Content-Length'] = Buffer.byteLength(init.body);
      const req = (tls ? httpsRequest : httpRequest)(target, { method: init.method, headers, agent: tls ? secure : plain });
      let response: IncomingMessage | null = null;

      // Ends the call with `reason` at once, as fetch does: also a request still waiting for a
      // connection, whose own error would come only once a connection frees. The request is
      // destroyed without an error: its answer may be whole already, its connection no longer
      // listened to for errors, and an error there would end the process.
      const end = (reason: unknown): void => {
        settled();
        reject(reason);
        req.destroy();
      };
      const stopWaiting = signal === undefined ? () => undefined : whenAborted(signal, () => end(signal.reason));
      unsettled.add(end);
      const settled = (): void => {
        stopWaiting();
        unsettled.delete(end);
      };

      req.on('error', (error) => {
        // Once the whole answer is in, what breaks is the connection (bytes past its Content-Length): the answer stands.
        if (response?.complete === true) return;
        settled();
        reject(error);
      });
      req.on('response', (res) => {
        response = res;
        const chunks: Buffer[] = [];
        let size = 0;
        const answer = (body: () => unknown): void => {
          settled();
          resolve({
            status: res.statusCode ?? 0,
            headers: { get: (name) => headerOf(res, name) },
            json: () => new Promise((ok) => ok(body())),
          });
        };
        res.on('data', (chunk: Buffer) => {
          size += chunk.length;
          if (size > maxBody) return end(new Error(`answer body over ${maxBody} bytes`));
          chunks.push(chunk);
        });
        // The body broke off (the connection closed mid-body): as with fetch, the status and
        // headers stand and json() fails.
        res.on('error', (error) =>
          answer(() => {
            throw error;
          }),
        );
        res.on('end', () => {
          const text = utf8.decode(Buffer.concat(chunks));
          answer(() => JSON.parse(text) as unknown);
        });
      });
      req.end(init.body);
    });

  return Object.assign(send, {
    close: (): void => {
      closed = true;
      for (const end of [...unsettled]) end(new Error('agentFetch closed'));
      for (const agent of [plain, secure]) {
        // The requests ended while waiting for a connection stay in the agent's queue, and the
        // agent opens a connection for them whenever one closes: it opens none any more.
        agent.createConnection = (_options, done) => {
          done?.(new Error('agentFetch closed'), undefined as never);
          return undefined;
        };
        agent.destroy();
      }
    },
  });
}
