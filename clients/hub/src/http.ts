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

function headerOf(message: IncomingMessage, name: string): string | null {
  const value = message.headers[name.toLowerCase()];
  if (value === undefined) return null;
  return Array.isArray(value) ? value.join(', ') : value;
}

/** An `HttpFetch` over one keep-alive agent (`maxFreeSockets` idle connections, `maxSockets` in all). */
export function agentFetch(options: AgentFetchOptions = {}): HttpFetch & { readonly close: () => void } {
  const agentOptions = {
    keepAlive: true,
    maxSockets: options.maxSockets ?? Infinity,
    maxFreeSockets: options.maxFreeSockets ?? 256,
    ...(options.localAddress !== undefined ? { localAddress: options.localAddress } : {}),
  };
  const plain = new HttpAgent(agentOptions);
  const secure = new HttpsAgent(agentOptions);
  const maxBody = options.maxBodyBytes ?? 1024 * 1024;

  const send = (url: string, init: HttpRequestInit): Promise<HttpResponse> =>
    new Promise((resolve, reject) => {
      const target = new URL(url);
      const tls = target.protocol === 'https:';
      if (!tls && target.protocol !== 'http:') return reject(new TypeError(`unsupported protocol ${target.protocol}`));
      const signal = init.signal;
      if (signal?.aborted === true) return reject(signal.reason);
      const headers: Record<string, string | number> = { ...init.headers };
      if (init.body !== undefined) headers['Content-Length'] = Buffer.byteLength(init.body);
      const req = (tls ? httpsRequest : httpRequest)(target, { method: init.method, headers, agent: tls ? secure : plain });
      const onAbort = (): void => {
        req.destroy(signal?.reason instanceof Error ? signal.reason : new Error('aborted'));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      const settled = (): void => signal?.removeEventListener('abort', onAbort);
      req.on('error', (error) => {
        settled();
        reject(error);
      });
      req.on('response', (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on('data', (chunk: Buffer) => {
          size += chunk.length;
          if (size > maxBody) {
            req.destroy(new Error(`answer body over ${maxBody} bytes`));
            return;
          }
          chunks.push(chunk);
        });
        res.on('error', (error) => {
          settled();
          reject(error);
        });
        res.on('end', () => {
          settled();
          const text = Buffer.concat(chunks).toString('utf8');
          resolve({
            status: res.statusCode ?? 0,
            headers: { get: (name) => headerOf(res, name) },
            json: () => new Promise((ok, fail) => {
              try {
                ok(JSON.parse(text) as unknown);
              } catch (error) {
                fail(error);
              }
            }),
          });
        });
      });
      req.end(init.body);
    });

  return Object.assign(send, {
    close: (): void => {
      plain.destroy();
      secure.destroy();
    },
  });
}
