/**
 * One small error hierarchy. Deciders and command handlers throw these; the HTTP error
 * middleware and the socket error helper map them, once, to the bodies of the spec.
 */

export abstract class DomainError extends Error {
  abstract readonly kind: 'validation' | 'unauthorized' | 'forbidden' | 'not_found' | 'conflict' | 'rate_limited';
}

export interface FieldProblem {
  readonly field: string;
  readonly message: string;
}

export class ValidationError extends DomainError {
  readonly kind = 'validation' as const;
  constructor(readonly problems: readonly FieldProblem[]) {
    super(problems.map((p) => p.message).join('; ') || 'Validation failed');
    this.name = 'ValidationError';
  }
}

/** A 400 with a single message in the default body (e.g. `Invalid or expired reset token`). */
export class BadRequestError extends DomainError {
  readonly kind = 'validation' as const;
  constructor(message: string) {
    super(message);
    this.name = 'BadRequestError';
  }
}

export class UnauthorizedError extends DomainError {
  readonly kind = 'unauthorized' as const;
  constructor(message = 'Unauthorized') {
    super(message);
    this.name = 'UnauthorizedError';
  }
}

export class ForbiddenError extends DomainError {
  readonly kind = 'forbidden' as const;
  constructor(message = 'Forbidden') {
    super(message);
    this.name = 'ForbiddenError';
  }
}

export class NotFoundError extends DomainError {
  readonly kind = 'not_found' as const;
  constructor(message = 'Not found') {
    super(message);
    this.name = 'NotFoundError';
  }
}

export class ConflictError extends DomainError {
  readonly kind = 'conflict' as const;
  constructor(message = 'Conflict') {
    super(message);
    this.name = 'ConflictError';
  }
}

export class RateLimitedError extends DomainError {
  readonly kind = 'rate_limited' as const;
  constructor(readonly retryAfterSeconds: number) {
    super('Rate limit exceeded');
    this.name = 'RateLimitedError';
  }
}

/**
 * What was asked was done, but could not be made visible everywhere in time: 503, and the
 * caller tries again (the commands behind it are idempotent). Not a client error.
 */
export class ServiceUnavailableError extends Error {
  constructor(message = 'Service temporarily unavailable') {
    super(message);
  }
}
