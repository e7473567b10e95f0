import { randomUUID } from 'node:crypto';
import express, { type Request, type RequestHandler, type Response } from 'express';
import { errorBody, UNSUPPORTED_MEDIA_TYPE, UnsupportedMediaTypeError } from './http-errors';

const INCOMING_REQUEST_ID = /^[A-Za-z0-9._:-]{8,128}$/;

/** Whether the request came straight from a proxy that TRUST_PROXY trusts (Express's `trust proxy`). */
function fromTrustedProxy(req: Request): boolean {
  const trust = req.app.get('trust proxy fn') as ((address: string, hop: number) => boolean) | undefined;
  const peer = req.socket.remoteAddress;
  return trust !== undefined && peer !== undefined && trust(peer, 0);
}

/**
 * Every response carries `X-Request-Id`, unique per request. A well-formed one set by a
 * trusted proxy (TRUST_PROXY) is kept, so a request is followed from the proxy's log to the
 * events it caused; one sent by anyone else is not (events carry it, and auditors rely on it:
 * decisions §2). Also notes when the request arrived.
 */
export const requestId: RequestHandler = (req, res, next) => {
  res.locals.receivedAt = Date.now();
  const incoming = req.get('X-Request-Id');
  const id = incoming !== undefined && INCOMING_REQUEST_ID.test(incoming) && fromTrustedProxy(req) ? incoming : randomUUID();
  res.locals.requestId = id;
  res.setHeader('X-Request-Id', id);
  next();
};

/** When the request reached the service (noted by `requestId`, the first middleware); now if it was not noted. */
export function receivedAt(res: Response): Date {
  const at: unknown = res.locals.receivedAt;
  return new Date(typeof at === 'number' ? at : Date.now());
}

/** What a browser app may read from a response besides the simple headers (decisions §6). */
export const CORS_EXPOSED_HEADERS = 'X-Request-Id, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, Retry-After';

/**
 * CORS as the interface says: one configured origin, credentials, fixed methods and
 * headers. It runs before the rate limiter (decisions §6): a preflight is answered here
 * and never counted, and every response to the allowed origin, errors and 429s included,
 * carries the CORS headers, with the rate-limit, retry and request-id headers exposed.
 */
/**
 * The origin a browser sends for `APP_ORIGIN`: scheme, host and port only (a trailing slash
 * or a path in the setting would never equal the `Origin` header). HTTP and the tunnel's
 * Socket.IO CORS both use it.
 */
export function appOriginOf(appOrigin: string | undefined): string | undefined {
  return appOrigin === undefined ? undefined : new URL(appOrigin).origin;
}

export function cors(appOrigin: string | undefined): RequestHandler {
  const origin = appOriginOf(appOrigin);
  return (req, res, next) => {
    if (origin !== undefined) {
      res.setHeader('Vary', 'Origin');
      if (req.get('Origin') === origin) {
        res.setHeader('Access-Control-Allow-Origin', origin);
        res.setHeader('Access-Control-Allow-Credentials', 'true');
        res.setHeader('Access-Control-Expose-Headers', CORS_EXPOSED_HEADERS);
      }
    }
    if (req.method === 'OPTIONS' && req.get('Access-Control-Request-Method') !== undefined) {
      if (origin !== undefined && req.get('Origin') === origin) {
        res.setHeader('Access-Control-Allow-Methods', 'GET, POST, PUT, DELETE, PATCH');
        res.setHeader('Access-Control-Allow-Headers', 'Authorization, Content-Type');
        res.setHeader('Access-Control-Max-Age', '600');
      }
      res.status(204).end();
      return;
    }
    next();
  };
}

/**
 * A request with a body must say it is JSON: anything else is 415, never guessed. The JSON
 * parser is not even entered by a request that announces no body (every GET).
 */
export function jsonBody(limitBytes: number): RequestHandler {
  const parse = express.json({ limit: limitBytes, strict: false });
  return (req, res, next) => {
    const length = req.headers['content-length'];
    const chunked = req.headers['transfer-encoding'] !== undefined;
    if (length === undefined && !chunked) {
      next();
      return;
    }
    // A hub's request (marked by the rate limiter): a body refused here is answered only after
    // its token is (routes/devices.ts, `deferredBodyError`), so a revoked hub hears 401, not 400.
    const deferred = res.locals.hubRequest === true;
    if ((chunked || length !== '0') && !req.is('application/json')) {
      if (deferred) {
        res.locals.bodyError = new UnsupportedMediaTypeError();
        next();
        return;
      }
      res.status(415).json(errorBody(415, UNSUPPORTED_MEDIA_TYPE));
      return;
    }
    parse(req, res, (error?: unknown) => {
      if (error !== undefined && error !== null && deferred) {
        res.locals.bodyError = error;
        req.body = undefined;
        next();
        return;
      }
      next(error);
    });
  };
}

/** What `jsonBody` refused of a hub's request's body, to be thrown once its token is answered; undefined when nothing. */
export function deferredBodyError(res: Response): unknown {
  return res.locals.bodyError;
}
