import type { ErrorRequestHandler, RequestHandler } from 'express';
import { DomainError, RateLimitedError, ServiceUnavailableError, ValidationError } from '../domain/errors';
import { isTransientStoreError } from '../infra/transient';
import type { Logger } from '../logger';

const STATUS_TEXT: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  409: 'Conflict',
  413: 'Payload Too Large',
  415: 'Unsupported Media Type',
  422: 'Unprocessable Entity',
  429: 'Too Many Requests',
  500: 'Internal Server Error',
  503: 'Service Unavailable',
};

export function statusText(status: number): string {
  return STATUS_TEXT[status] ?? 'Error';
}

/** The default error body of the spec: `{statusCode, message, error}`. */
export function errorBody(status: number, message: string | readonly string[]): Record<string, unknown> {
  return { statusCode: status, message, error: statusText(status) };
}

/** The message of the 503 answered while a store is unreachable. */
export const SERVICE_UNAVAILABLE = 'Service unavailable';

const KIND_STATUS: Record<DomainError['kind'], number> = {
  validation: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  rate_limited: 429,
};

export const UNSUPPORTED_MEDIA_TYPE = 'Content-Type must be application/json';

/** The 415 of `jsonBody` (middleware.ts), as an error a route throws: a hub's request, whose token was answered first. */
export class UnsupportedMediaTypeError extends Error {
  readonly status = 415;
  constructor() {
    super(UNSUPPORTED_MEDIA_TYPE);
    this.name = 'UnsupportedMediaTypeError';
  }
}

/** The errors body-parser raises for what a client sent. */
interface ClientHttpError {
  readonly status: number;
  readonly type?: string;
}

function isClientHttpError(error: unknown): error is ClientHttpError {
  if (typeof error !== 'object' || error === null) return false;
  const status = (error as { status?: unknown }).status;
  return typeof status === 'number' && status >= 400 && status < 500;
}

/** A store that cannot take writes for now (EventStoreUnavailableError: `statusCode` 503). */
function isServiceUnavailable(error: unknown): boolean {
  return typeof error === 'object' && error !== null && (error as { statusCode?: unknown }).statusCode === 503;
}

/** Maps every error once to the spec's bodies; never leaks a stack or an internal message. */
export function errorMiddleware(logger: Logger): ErrorRequestHandler {
  return (error: unknown, req, res, _next) => {
    if (res.headersSent) {
      res.end();
      return;
    }
    if (error instanceof ValidationError) {
      res.status(400).json({
        ...errorBody(400, error.problems.map((p) => p.message)),
        details: error.problems.map((p) => ({ field: p.field, message: p.message })),
      });
      return;
    }
    if (error instanceof RateLimitedError) {
      res.setHeader('Retry-After', String(error.retryAfterSeconds));
      res.status(429).json({ ...errorBody(429, 'Rate limit exceeded'), retryAfter: error.retryAfterSeconds });
      return;
    }
    if (error instanceof ServiceUnavailableError) {
      res.setHeader('Retry-After', '1');
      res.status(503).json(errorBody(503, error.message));
      return;
    }
    if (error instanceof DomainError) {
      const status = KIND_STATUS[error.kind];
      res.status(status).json(errorBody(status, error.message));
      return;
    }
    if (error instanceof UnsupportedMediaTypeError) {
      res.status(415).json(errorBody(415, error.message));
      return;
    }
    if (isClientHttpError(error)) {
      const message =
        error.type === 'entity.parse.failed'
          ? 'Malformed JSON in request body'
          : error.type === 'entity.too.large'
            ? 'Request body is too large'
            : error.type === 'encoding.unsupported' || error.type === 'charset.unsupported'
              ? 'Unsupported request body encoding'
              : statusText(error.status);
      res.status(error.status).json(errorBody(error.status, message));
      return;
    }
    if (isTransientStoreError(error) || isServiceUnavailable(error)) {
      // A store unreachable or failing over, or one that cannot write for now (a full disk):
      // the outage's, not the request's (and not a bug).
      logger.warn({ err: error, requestId: res.getHeader('X-Request-Id'), method: req.method, url: req.originalUrl }, 'store unavailable');
      res.status(503).json(errorBody(503, SERVICE_UNAVAILABLE));
      return;
    }
    logger.error({ err: error, requestId: res.getHeader('X-Request-Id'), method: req.method, url: req.originalUrl }, 'unhandled error');
    res.status(500).json(errorBody(500, 'Internal server error'));
  };
}

export const notFoundHandler: RequestHandler = (req, res) => {
  res.status(404).json(errorBody(404, `Cannot ${req.method} ${req.path}`));
};
