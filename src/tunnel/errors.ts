import { DomainError, RateLimitedError } from '../domain/errors';
import type { TunnelError, TunnelErrorCode } from './events';

/** A refusal on the tunnel: becomes `tunnel:error` and, when the client asked for one, a failed ack. */
export class TunnelFailure extends Error {
  constructor(
    readonly code: TunnelErrorCode,
    message: string,
    readonly retryAfter?: number,
  ) {
    super(message);
    this.name = 'TunnelFailure';
  }

  toPayload(): TunnelError {
    return { code: this.code, message: this.message, ...(this.retryAfter !== undefined ? { retryAfter: this.retryAfter } : {}) };
  }
}

export const TUNNEL_MESSAGES = {
  invalidPayload: 'Invalid payload',
  tooLarge: 'Message is larger than 64 KiB',
  deviceNotFound: 'Device not found',
  forbidden: 'Controlling this device needs the owner or editor role',
  devicesCannotSubscribe: 'A device socket cannot subscribe',
  rateLimited: 'Rate limit exceeded',
  tooBusy: 'Too many requests in flight on this socket',
  tokenExpired: 'Token has expired',
  sessionReplaced: 'A newer connection of this device replaced this one',
  accessRevoked: (deviceUuid: string) => `Access to device ${deviceUuid} has been revoked`,
  deviceRevoked: 'This device was deleted or its token was revoked',
  accountRevoked: 'The token of this connection has been revoked (deactivation, password reset or reuse): sign in again',
  unavailable: 'The service is unavailable, try again',
} as const;

/** The socket error helper: any error met while handling an event, as the spec's `tunnel:error`. */
export function toTunnelError(error: unknown): TunnelError {
  if (error instanceof TunnelFailure) return error.toPayload();
  if (error instanceof DomainError) {
    switch (error.kind) {
      case 'validation':
        return { code: 'INVALID_PAYLOAD', message: error.message };
      case 'not_found':
        return { code: 'NOT_FOUND', message: error.message };
      case 'forbidden':
        return { code: 'FORBIDDEN', message: error.message };
      case 'rate_limited':
        return { code: 'RATE_LIMITED', message: TUNNEL_MESSAGES.rateLimited, retryAfter: error instanceof RateLimitedError ? error.retryAfterSeconds : 10 };
      case 'unauthorized':
        return { code: 'ACCESS_REVOKED', message: error.message };
      case 'conflict':
        return { code: 'INVALID_PAYLOAD', message: error.message };
      default: {
        const _exhaustive: never = error.kind;
        return _exhaustive;
      }
    }
  }
  // Not the caller's fault (the event store is down, say): nothing internal leaks.
  return { code: 'RATE_LIMITED', message: TUNNEL_MESSAGES.unavailable, retryAfter: 1 };
}
