import { keyedHash } from './crypto';

/**
 * The reservation stream of an e-mail address, named by a keyed hash (HMAC-SHA-256 under a
 * key derived from DATA_KEY_ENCRYPTION_KEY): without the key, a dictionary of addresses
 * cannot find whose address a stream reserves (decisions §2).
 */
export function keyedEmailReservationStream(emailHashKey: Buffer): (email: string) => string {
  return (email) => `reservation-email-k-${keyedHash(emailHashKey, email.trim().toLowerCase())}`;
}
