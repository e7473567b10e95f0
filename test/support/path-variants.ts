import { request } from 'node:http';
import type { TestService } from './harness';

/**
 * The attacker's spellings of a route's path (decisions §6: the tier of a request is the tier
 * of the route that answers it, however its path is spelled). `routed`: spellings Express
 * routes to the same handler (letter case, one trailing slash, a query); `unrouted`: spellings
 * no route answers (repeated slashes, an encoded `/` or letter, dot segments), which must get
 * the 404 of an unknown route, never the handler, and never a tier of their own.
 */
export interface PathVariants {
  readonly routed: readonly string[];
  readonly unrouted: readonly string[];
}

const capitalised = (path: string): string =>
  path
    .split('/')
    .map((segment) => (segment.length === 0 ? segment : segment[0]?.toUpperCase() + segment.slice(1)))
    .join('/');

/** Every separator position of `path` but the first, by index. */
function separators(path: string): number[] {
  const at: number[] = [];
  for (let i = 1; i < path.length; i++) if (path[i] === '/') at.push(i);
  return at;
}

/** `endsWithParam`: the last segment is a parameter (a uuid), which a suffix only changes. */
export function pathVariants(path: string, options: { endsWithParam?: boolean } = {}): PathVariants {
  const inner = separators(path);
  const last = inner.at(-1) ?? path.length;
  const letter = path.slice(last + 1).search(/[a-z]/);
  const unrouted = [
    `/${path}`,
    `${path}//`,
    ...inner.map((i) => `${path.slice(0, i)}/${path.slice(i)}`),
    ...inner.map((i) => `${path.slice(0, i)}%2F${path.slice(i + 1)}`),
    ...inner.map((i) => `${path.slice(0, i)}%2f${path.slice(i + 1)}`),
    `${path.slice(0, last)}/.${path.slice(last)}`,
    `${path.slice(0, last)}/x/..${path.slice(last)}`,
    ...(options.endsWithParam === true ? [] : [`${path}%20`, `${path};x`]),
  ];
  if (letter >= 0 && options.endsWithParam !== true) {
    const at = last + 1 + letter;
    unrouted.push(`${path.slice(0, at)}%${(path.charCodeAt(at) & 0xff).toString(16)}${path.slice(at + 1)}`);
  }
  return {
    routed: [path.toUpperCase(), capitalised(path), `${path}/`, `${capitalised(path).toUpperCase()}/`, `${path}?x=1`, `${path}/?x=1`],
    unrouted,
  };
}

export interface RawResponse {
  readonly status: number;
  readonly body: unknown;
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
}

/** A request with the path sent byte for byte as given (fetch would normalise dot segments). */
export function rawRequest(
  service: Pick<TestService, 'baseUrl'>,
  method: string,
  path: string,
  options: { body?: unknown; headers?: Record<string, string> } = {},
): Promise<RawResponse> {
  const { hostname, port } = new URL(service.baseUrl);
  const payload = options.body === undefined ? undefined : JSON.stringify(options.body);
  const headers: Record<string, string> = { ...options.headers };
  if (payload !== undefined) {
    headers['Content-Type'] = 'application/json';
    headers['Content-Length'] = String(Buffer.byteLength(payload));
  }
  return new Promise((resolve, reject) => {
    const req = request({ hostname, port, method, path, headers, agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => {
        let body: unknown = text;
        try {
          body = text.length > 0 ? JSON.parse(text) : null;
        } catch {
          // not JSON: keep the text
        }
        resolve({ status: res.statusCode ?? 0, body, headers: res.headers });
      });
    });
    req.on('error', reject);
    req.end(payload);
  });
}

/** The 404 of a path no route answers. */
export function isUnknownRoute(res: RawResponse): boolean {
  const message = (res.body as { message?: unknown } | null)?.message;
  return res.status === 404 && typeof message === 'string' && message.startsWith('Cannot ');
}

const header = (res: RawResponse, name: string): string => String(res.headers[name] ?? '');

/**
 * Sends `path` and each of its variants in turn, all as one client (the same IP, key, user or
 * device, whatever `send` puts in): each routed spelling must count against the same counter
 * as `path` (the tier's limit, one fewer remaining each time); each unrouted one must get the
 * 404 of an unknown route in the general tier and leave that counter alone.
 */
export async function expectOneTier(
  send: (path: string) => Promise<RawResponse>,
  path: string,
  limits: { readonly tier: number; readonly general: number },
  variants: PathVariants = pathVariants(path),
): Promise<void> {
  const first = await send(path);
  expect(isUnknownRoute(first)).toBe(false);
  expect({ path, limit: header(first, 'x-ratelimit-limit') }).toEqual({ path, limit: String(limits.tier) });
  let remaining = Number(header(first, 'x-ratelimit-remaining'));
  for (const variant of variants.routed) {
    const res = await send(variant);
    expect({ variant, unknownRoute: isUnknownRoute(res), status: res.status === 429 ? 429 : 'answered' }).toEqual({ variant, unknownRoute: false, status: 'answered' });
    expect({ variant, limit: header(res, 'x-ratelimit-limit'), remaining: header(res, 'x-ratelimit-remaining') }).toEqual({
      variant,
      limit: String(limits.tier),
      remaining: String(remaining - 1),
    });
    remaining -= 1;
  }
  for (const variant of variants.unrouted) {
    const res = await send(variant);
    expect({ variant, unknownRoute: isUnknownRoute(res), limit: header(res, 'x-ratelimit-limit') }).toEqual({
      variant,
      unknownRoute: true,
      limit: String(limits.general),
    });
  }
  const last = await send(path);
  expect({ path, remaining: header(last, 'x-ratelimit-remaining') }).toEqual({ path, remaining: String(remaining - 1) });
}
